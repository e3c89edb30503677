// Package admin is a node's operator surface over HTTP (DESIGN §6 "Operator surface"): a live
// dashboard page, the node's status snapshots as JSON (/status), the same snapshots as a
// server-sent event stream (/events), a view of every node of the mesh (/mesh), the lifecycle
// operations an operator starts (POST /relocate, POST /shutdown), and /debug/pprof.
//
// The server only reads the statuses the host publishes and starts the operations the host
// offers; it is one more observer of the observation machine (H1): each event stream holds
// at most one pending change and writes the newest snapshot, so a browser that stops reading
// never holds up the host. Metrics are not the runtime's business (I5): an application adds
// its exporter's handler to the server's mux.
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// Node is what the server shows and operates: the host.
type Node interface {
	// Snapshot returns every status the page shows, as of now.
	Snapshot() Snapshot
	// Watch calls changed whenever a status the page shows may have changed, until ctx ends or
	// the host stopped; it returns then, having ended everything it started.
	Watch(ctx context.Context, changed func())
	// Members lists the nodes of the mesh as their registrations describe them, this one
	// included.
	Members() []Member
	// Relocate runs, or joins, the host's relocation; ctx ends only this caller's wait.
	Relocate(ctx context.Context, opts sdk.RelocationOptions) (sdk.RelocationResult, error)
	// BeginShutdown starts, or joins, the host's shutdown and returns at once.
	BeginShutdown(deadline time.Duration)
}

// Snapshot is every status the page shows, taken together.
type Snapshot struct {
	Node               sdk.NodeID
	Mesh               string
	ApplicationVersion int64
	Runtime            sdk.RuntimeStatus
	MeshStatus         sdk.RouteMeshStatus
	Capacity           sdk.HostCapacityStatus
	ClientServer       []sdk.ClientServerStatus
	Fanout             []sdk.FanoutStatus
	// Failed is the runtime status the host published when it turned Error, nil if it never
	// did: a stream that coalesced it away shows it before a newer status (H1). It is not
	// part of the status document.
	Failed *sdk.RuntimeStatus
	// Relocation is the relocation in progress or the last one, nil when none has started.
	Relocation *Relocation
	// Turns counts the messages that took a turn on the node since it started.
	Turns int64
	// TakenAt is when the snapshot was taken.
	TakenAt time.Time
}

// Relocation is a relocation's progress.
type Relocation struct {
	Mode                     sdk.RelocationMode
	TargetApplicationVersion int64
	// Running is true until the relocation has its result.
	Running bool
	// Units counts the units found to move so far; Moved those that moved, Gone those whose
	// object closed or left before it moved.
	Units, Moved, Gone int64
	Deadline           time.Time
	Result             *sdk.RelocationResult
}

// Member is one node of the mesh as its registration describes it.
type Member struct {
	Node               sdk.NodeID
	State              sdk.RuntimeState
	ApplicationVersion int64
	// AdminURL is the base URL of the node's admin server, empty when it serves none.
	AdminURL string
	// Self marks the node that serves this page.
	Self bool
}

// Config configures a server.
type Config struct {
	// Addr is where the server listens (host:port).
	Addr string
	// TLS, when set, makes the server speak HTTPS with it.
	TLS *tls.Config
	// Loopback says that Addr is a loopback address: POST requests are then taken from any
	// caller that reaches it, and requests must name a loopback host (no DNS rebinding).
	// Otherwise a POST needs a client certificate that TLS verified, and without TLS a
	// request must name the server by IP address or by Addr's host (no DNS rebinding).
	Loopback bool
	// PeerTLS is the client configuration for other nodes' admin servers that speak HTTPS.
	PeerTLS *tls.Config
	// Handlers are the application's handlers, by http.ServeMux pattern (CheckHandlers).
	Handlers map[string]http.Handler
	// Logger receives the server's logs.
	Logger *slog.Logger

	// The bounds below have defaults (zero: the default).

	// WriteTimeout bounds each write of an event or progress stream, and the writes of each
	// 64 KiB of every other answer of the server's own, refusals included (not the time
	// between them, such as a profile's collection): a reader that takes longer is cut off
	// (default 10 s). The application's handlers bound their own answers.
	WriteTimeout time.Duration
	// AnswerWriteTimeout bounds the writes of one such answer in all, however steadily its
	// reader takes it, so that a reader that takes each 64 KiB just within WriteTimeout holds
	// a large answer no longer than this (default 2 min).
	AnswerWriteTimeout time.Duration
	// MaxProfileDuration bounds the seconds= of a profile or a trace (default 2 min): one that
	// asks for longer is refused, so that no request holds the node's one CPU profile for good.
	MaxProfileDuration time.Duration
	// EventInterval is the most often a stream writes a snapshot, and Heartbeat the longest it
	// goes without one (defaults 200 ms and 1 s).
	EventInterval, Heartbeat time.Duration
	// MaxStreams bounds the event streams open at once (default 64); the progress streams of
	// operations have places of their own.
	MaxStreams int
	// StreamLifetime is how long an event stream lasts before the server ends it and the
	// browser connects again at once (default 1 min): a reader that stopped reading keeps its
	// place no longer, while the connection's buffers still take the writes that would
	// otherwise time out.
	StreamLifetime time.Duration
	// PeerTimeout bounds the fetch of one other node's status for the mesh view (default 2 s).
	PeerTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.AnswerWriteTimeout <= 0 {
		c.AnswerWriteTimeout = 2 * time.Minute
	}
	if c.MaxProfileDuration <= 0 {
		c.MaxProfileDuration = 2 * time.Minute
	}
	if c.EventInterval <= 0 {
		c.EventInterval = 200 * time.Millisecond
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 64
	}
	if c.StreamLifetime <= 0 {
		c.StreamLifetime = time.Minute
	}
	if c.PeerTimeout <= 0 {
		c.PeerTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// closeGrace bounds how long Close waits for requests under way before it cuts them off, and
// minCloseGrace is the least that CloseWithin gives them.
const (
	closeGrace    = 2 * time.Second
	minCloseGrace = 100 * time.Millisecond
)

// Server is a node's admin HTTP server. It listens from Listen on, and serves from Serve on.
type Server struct {
	cfg     Config
	ln      net.Listener
	url     string
	srv     *http.Server
	streams chan struct{} // a token per open event stream
	// relocations and shutdowns hold a token per open progress stream of a POST /relocate and
	// a POST /shutdown: apart from the event streams', and from each other's, so that neither
	// the dashboard nor the callers following a relocation can keep a shutdown out (F9).
	relocations, shutdowns chan struct{}
	mesh                   meshCache
	peers                  *http.Client

	mu      sync.Mutex
	node    Node
	serving sync.WaitGroup
	closed  bool
	// base ends every request's context at Close.
	base   context.Context
	cancel context.CancelFunc
}

// Listen binds cfg.Addr, so that the server's URL is known before the node registers; it
// serves nothing until Serve.
func Listen(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	mux, err := newMux(cfg.Handlers)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s: %w", cfg.Addr, err)
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
		// HTTP/1.1 only, whatever the node's TLS offers its mesh (gRPC's h2): an HTTP/2
		// stream's write deadline is a timer that resets the stream when it fires, between
		// two writes too, where the server's answers count only the time spent writing.
		ln = tls.NewListener(ln, http1Only(cfg.TLS))
	}
	s := &Server{
		cfg: cfg, ln: ln, url: scheme + "://" + ln.Addr().String(),
		streams: make(chan struct{}, cfg.MaxStreams), relocations: make(chan struct{}, maxOperationStreams), shutdowns: make(chan struct{}, maxOperationStreams),
		peers: &http.Client{Transport: &http.Transport{
			TLSClientConfig: cfg.PeerTLS, DisableKeepAlives: true, ResponseHeaderTimeout: cfg.PeerTimeout,
		}},
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.routes(mux)
	s.srv = &http.Server{
		Handler:           s.answerWithin(s.guard(refusalsInJSON(mux))),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // no HTTP/2 (above)
	}
	return s, nil
}

// http1Only is c without HTTP/2 among the protocols it offers, and so is the configuration that
// its GetConfigForClient returns for a connection.
func http1Only(c *tls.Config) *tls.Config {
	c = c.Clone()
	c.NextProtos = withoutH2(c.NextProtos)
	if get := c.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(hello)
			if cc != nil {
				cc = cc.Clone()
				cc.NextProtos = withoutH2(cc.NextProtos)
			}
			return cc, err
		}
	}
	return c
}

// withoutH2 is protos without "h2"; another protocol that the node offers (acme-tls/1) stays.
func withoutH2(protos []string) []string {
	return slices.DeleteFunc(slices.Clone(protos), func(p string) bool { return p == "h2" })
}

// URL returns the server's base URL: http://host:port, or https:// under TLS.
func (s *Server) URL() string { return s.url }

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve starts serving node's pages. It returns at once; Close stops it.
func (s *Server) Serve(node Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.node != nil {
		return
	}
	s.node = node
	s.serving.Go(func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("the admin server stopped", "err", err)
		}
	})
}

// Close stops the server: it takes no new connection, lets the requests under way end for a
// short while — an event stream ends by itself once the host has stopped — and then cuts off
// what is left. Safe to call more than once.
func (s *Server) Close() error { return s.CloseWithin(closeGrace) }

// CloseWithin is Close with the requests under way given grace at most to end: a shutdown
// gives what its deadline leaves. It gives them minCloseGrace at least, so that the streams
// write the end they were showing.
func (s *Server) CloseWithin(grace time.Duration) error {
	grace = min(max(grace, minCloseGrace), closeGrace)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	served := s.node != nil
	s.mu.Unlock()
	if !served {
		return s.ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.cancel()
		err = s.srv.Close()
	}
	s.cancel()
	s.serving.Wait()
	s.peers.CloseIdleConnections()
	return err
}

// reserved are the patterns the server serves itself.
var reserved = []string{
	"GET /{$}", "GET /assets/", "GET /status", "GET /events", "GET /mesh",
	"POST /relocate", "POST /shutdown", "/debug/pprof/",
}

// CheckHandlers reports the application handlers that the admin mux cannot take: an empty
// pattern or a nil handler, a pattern http.ServeMux refuses, one that names a host (ServeMux
// would put it before the server's own routes), or one that conflicts with the server's own
// routes or another handler's.
func CheckHandlers(handlers map[string]http.Handler) error {
	_, err := newMux(handlers)
	return err
}

func newMux(handlers map[string]http.Handler) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	for _, p := range reserved {
		mux.Handle(p, http.NotFoundHandler())
	}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(handlers)) {
		if err := handle(mux, p, handlers[p]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// A fresh mux, the server's routes registered later.
	mux = http.NewServeMux()
	for _, p := range slices.Sorted(maps.Keys(handlers)) {
		mux.Handle(p, unbounded(handlers[p]))
	}
	return mux, nil
}

// unbounded gives h the connection's own writer, which the server's write deadlines do not
// bound (answerWithin): the application's handlers bound their answers as they choose.
func unbounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := w.(*boundedWriter); ok {
			b.off = true // nor what net/http writes after it, nor a connection it hijacked
		}
		h.ServeHTTP(connWriter(w), r)
	})
}

// handle registers h under pattern, turning ServeMux's panic on a bad pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	switch {
	case strings.TrimSpace(pattern) == "":
		return fmt.Errorf("%w: AdminHandlers: an empty pattern", sdk.ErrConfig)
	case h == nil:
		return fmt.Errorf("%w: AdminHandlers: pattern %q has a nil handler", sdk.ErrConfig, pattern)
	}
	if host := patternHost(pattern); host != "" {
		// ServeMux puts a pattern with a host before every pattern without one, so even
		// "127.0.0.1/" would take the server's own routes for requests to that host.
		return fmt.Errorf("%w: AdminHandlers: pattern %q names a host (%s): it would take the admin server's own routes for that host; give a path alone", sdk.ErrConfig, pattern, host)
	}
	if path := patternPath(pattern); path != "/" {
		for _, own := range ownPaths {
			// A path that differs from an own one only by a trailing slash overlaps it: ServeMux
			// redirects a request for a subtree's path without its slash into the subtree, so
			// "/status/" would take DELETE /status, and "/assets" the request that /assets/
			// redirects.
			same := strings.TrimSuffix(path, "/") == strings.TrimSuffix(own, "/")
			if same || strings.HasPrefix(path, own) && strings.HasSuffix(own, "/") || strings.HasPrefix(own, path) && strings.HasSuffix(path, "/") {
				return fmt.Errorf("%w: AdminHandlers: pattern %q overlaps the admin server's own %s", sdk.ErrConfig, pattern, own)
			}
		}
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: AdminHandlers: pattern %q: %v", sdk.ErrConfig, pattern, v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// ownPaths are the paths the server serves itself; a path ending in / is a subtree.
var ownPaths = []string{"/assets/", "/status", "/events", "/mesh", "/relocate", "/shutdown", "/debug/pprof/"}

// patternPath is the path of a ServeMux pattern ("[METHOD ][HOST]/PATH").
func patternPath(pattern string) string {
	p := hostPath(pattern)
	if i := strings.Index(p, "/"); i > 0 {
		p = p[i:] // a host
	}
	return strings.TrimSuffix(p, "{$}")
}

// patternHost is the host of a ServeMux pattern, "" when it names none.
func patternHost(pattern string) string {
	p := hostPath(pattern)
	if i := strings.Index(p, "/"); i > 0 {
		return p[:i]
	}
	return ""
}

// hostPath is a ServeMux pattern without its method: "[HOST]/PATH".
func hostPath(pattern string) string {
	p := strings.TrimSpace(pattern)
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimSpace(p[i+1:])
	}
	return p
}

func (s *Server) routes(mux *http.ServeMux) {
	mux.Handle("GET /{$}", page())
	mux.Handle("GET /assets/", page())
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /mesh", s.meshView)
	mux.HandleFunc("POST /relocate", s.relocate)
	mux.HandleFunc("POST /shutdown", s.shutdown)
	mux.Handle("/debug/pprof/", s.profiles(pprof.Index))
	mux.Handle("/debug/pprof/cmdline", s.profiles(pprof.Cmdline))
	mux.Handle("/debug/pprof/profile", s.profiles(pprof.Profile))
	mux.Handle("/debug/pprof/symbol", s.profiles(symbol))
	mux.Handle("/debug/pprof/trace", s.profiles(pprof.Trace))
}

// refusalsInJSON answers a request that no pattern serves as every refusal is, in JSON, where
// ServeMux's own answer is text: a path that nothing serves gets 404, and another method on a
// path that some pattern serves gets 405 with the Allow that ServeMux names (every method that
// some pattern serves there, the application's included). It registers no pattern, which
// could conflict with an application's (GET /{name}). ServeMux's redirects stay its own.
func refusalsInJSON(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, pattern := mux.Handler(r); pattern == "" {
			switch code, allow := refusal(h, r); code {
			case http.StatusNotFound:
				writeError(w, http.StatusNotFound, fmt.Sprintf("%s is not served here", r.URL.Path))
				return
			case http.StatusMethodNotAllowed:
				w.Header().Set("Allow", allow)
				writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not served: use %s", r.Method, r.URL.Path, allow))
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// refusal runs h, the handler that ServeMux found for r without a pattern, into a writer that
// keeps its headers only, and reports its status and the Allow it names.
func refusal(h http.Handler, r *http.Request) (code int, allow string) {
	var kept headersOnly
	h.ServeHTTP(&kept, r)
	return kept.code, kept.header.Get("Allow")
}

// headersOnly is a ResponseWriter that keeps an answer's headers and status and drops its body.
type headersOnly struct {
	header http.Header
	code   int
}

func (h *headersOnly) Header() http.Header {
	if h.header == nil {
		h.header = http.Header{}
	}
	return h.header
}

func (h *headersOnly) WriteHeader(code int) {
	if h.code == 0 {
		h.code = code
	}
}

func (h *headersOnly) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

// profiles serves a profile's route, which a plaintext server on a network address serves
// only to a connection from this machine's loopback interface that names it as a loopback
// host: a tunnel that ends on the node, such as kubectl port-forward or ssh -L through the
// node itself. Browsers mark other sites' requests to a loopback host with Sec-Fetch-Site, as
// they do to every TLS address. To a plain-HTTP network address they send none, and an image
// sends no Origin either, so a page of another site that the operator visits would be told
// from the operator by nothing, and could run CPU profiles and traces for as long as it asks;
// and any client on the network can name the server as it likes, but not connect from its
// loopback interface.
func (s *Server) profiles(serve http.HandlerFunc) http.Handler {
	serve = s.profileWithin(serve)
	if !s.plaintextNetwork() {
		return serve
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) || !loopbackPeer(r.RemoteAddr) {
			writeError(w, http.StatusForbidden, "profiles are served on a loopback address, over TLS, or through a tunnel that ends on the node only: a plaintext server on a network address cannot tell the operator from a page of another site")
			return
		}
		serve(w, r)
	})
}

// answerWithin bounds the writing of every answer of the server's own, refusals included: the
// writes of each writeChunk of it may take WriteTimeout in all, so that a reader that stops
// reading is cut off and the handler's goroutine is not held for good, while one that reads a
// large answer slowly, but steadily, gets it, if its writes take no more than
// AnswerWriteTimeout in all. Only the time spent writing counts, not the handler's own between
// its writes: a profile collects for as long as it asked, and a trace that writes as it goes is
// not cut off for writing little. An event or progress stream sets its own deadline before each
// write too. The application's handlers are not bounded (unbounded).
func (s *Server) answerWithin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := &boundedWriter{ResponseWriter: w, timeout: s.cfg.WriteTimeout, whole: s.cfg.AnswerWriteTimeout}
		next.ServeHTTP(bw, r)
		bw.arm() // for what net/http writes once the handler has returned
	})
}

// writeChunk is the most of an answer whose writes share one WriteTimeout.
const writeChunk = 64 << 10

// boundedWriter sets, before each write, the write deadline that what is left of its chunk's
// timeout, and of the whole answer's, allows.
type boundedWriter struct {
	http.ResponseWriter
	timeout, whole time.Duration
	// spent is the time spent in the writes of the current chunk, and since its bytes; total
	// the time spent in all the answer's writes.
	spent, total time.Duration
	since        int
	// off: the answer is an application handler's, which bounds it itself (unbounded).
	off bool
}

// arm sets the write deadline to what is left of the current chunk's timeout, a new chunk's
// once the current one is written, or of the whole answer's if that is less.
func (w *boundedWriter) arm() {
	if w.off {
		return
	}
	if w.since >= writeChunk {
		w.spent, w.since = 0, 0
	}
	setWriteDeadline(w.ResponseWriter, time.Now().Add(min(w.timeout-w.spent, w.whole-w.total)))
}

func (w *boundedWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *boundedWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		w.arm()
		return w.ResponseWriter.Write(b)
	}
	written := 0
	for len(b) > 0 {
		w.arm()
		start := time.Now()
		n, err := w.ResponseWriter.Write(b[:min(len(b), writeChunk-w.since)])
		took := time.Since(start)
		w.spent += took
		w.total += took
		written += n
		w.since += n
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// connWriter is the connection's own writer under w: http.MaxBytesReader tells only that one
// to close the connection after an oversized body.
func connWriter(w http.ResponseWriter) http.ResponseWriter {
	if b, ok := w.(*boundedWriter); ok {
		return b.ResponseWriter
	}
	return w
}

// profileWithin refuses, with 400, a profile or a trace whose seconds= is longer than
// MaxProfileDuration.
func (s *Server) profileWithin(serve http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/symbol" {
			// pprof reads seconds= from the form, which a POST's body may hold: it is read
			// here, bounded, and the form pprof reads is the same.
			r.Body = http.MaxBytesReader(connWriter(w), r.Body, maxSymbolBody)
			if v := r.FormValue("seconds"); v != "" {
				secs, err := strconv.ParseFloat(v, 64)
				if err == nil && !(secs*float64(time.Second) <= float64(s.cfg.MaxProfileDuration)) {
					writeError(w, http.StatusBadRequest, fmt.Sprintf("seconds=%s asks for a profile longer than the %s this server allows", v, s.cfg.MaxProfileDuration))
					return
				}
			}
		}
		serve(w, r)
	}
}

// setWriteDeadline sets the deadline of w's writes, where the connection has one.
func setWriteDeadline(w http.ResponseWriter, at time.Time) {
	_ = http.NewResponseController(w).SetWriteDeadline(at)
}

// plaintextNetwork reports whether the server speaks plain HTTP on a network address
// (InsecurePlaintext).
func (s *Server) plaintextNetwork() bool { return !s.cfg.Loopback && s.cfg.TLS == nil }

// maxSymbolBody bounds the body of a POST /debug/pprof/symbol: a lookup's answer grows with
// its body, and pprof reads the body to its end.
const maxSymbolBody = 64 << 10

// symbol serves /debug/pprof/symbol with its body bounded: a longer one is refused (413)
// before pprof reads it.
func symbol(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		if r.ContentLength > maxSymbolBody {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", maxSymbolBody))
			return
		}
		// A body of unknown length is cut off at the bound: pprof then says so in its answer.
		r.Body = http.MaxBytesReader(connWriter(w), r.Body, maxSymbolBody)
	}
	pprof.Symbol(w, r)
}

// guard refuses, on a loopback server, a request for a host that is not loopback: a page of
// another site whose name resolves to 127.0.0.1 (DNS rebinding) reads nothing and starts
// nothing. It refuses, on every route, a request that a page of another site made
// (fromAnotherSite), and it sets the headers every answer carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if s.cfg.Loopback && !loopbackHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("the admin server listens on loopback and serves only loopback hosts, not %q", r.Host))
			return
		}
		if s.plaintextNetwork() && !s.ownName(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("the admin server speaks plain HTTP on a network address and serves only requests that name it by IP address or as %s does, not %q", s.cfg.Addr, r.Host))
			return
		}
		if why := fromAnotherSite(r); why != "" {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s %s is refused: it comes from a page of another origin (%s)", r.Method, r.URL.Path, why))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fromAnotherSite says why r comes from a page of another origin, or "" when it does not:
// an Origin that is not this server's ("null" included), or a Sec-Fetch-Site that the
// browser sets to same-site or cross-site. Reading alone costs the node dearly here (a CPU
// profile or trace runs for as long as asked, a symbol lookup is as long as its body), so
// every route is guarded, not only the operations. A plain navigation to the dashboard is
// let through: it is how a link on another node's page opens it, and the page then talks to
// its own server only. The command line sends neither header.
func fromAnotherSite(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return "Origin: " + o
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none": // none: the operator typed the address or used a bookmark
		return ""
	default:
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path == "/" &&
			r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" {
			return ""
		}
		return "Sec-Fetch-Site: " + site
	}
}

// ownName reports whether host (host[:port], from a request) names a plaintext server on a
// network address: an IP address, localhost (a tunnel such as ssh -L or kubectl port-forward,
// or a proxy on the operator's machine), or the host of its configured address. A page of
// another site whose name the attacker points at the node (DNS rebinding) sends its own name,
// and no certificate stops it, as TLS would. A page cannot make the browser send an IP
// address or localhost but its own, whose origin is then the server's.
func (s *Server) ownName(host string) bool {
	host = hostName(host)
	if net.ParseIP(host) != nil || loopbackName(host) {
		return true
	}
	own, _, err := net.SplitHostPort(s.cfg.Addr)
	return err == nil && own != "" && strings.EqualFold(host, strings.TrimSuffix(own, "."))
}

// loopbackPeer reports whether addr (a request's RemoteAddr) is on the loopback interface.
func loopbackPeer(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// hostName is the name or address of host (host[:port], from a request), without brackets
// or the root's dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
}

// loopbackName reports whether name is localhost or a name under it, which resolve to the
// loopback interface alone (RFC 6761).
func loopbackName(name string) bool {
	name = strings.ToLower(name)
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// loopbackHost reports whether host (host[:port], from a request) names the loopback
// interface.
func loopbackHost(host string) bool {
	host = hostName(host)
	if loopbackName(host) {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxOperationStreams bounds the progress streams of POST /relocate open at once, and those of
// POST /shutdown.
const maxOperationStreams = 8

// acquireStream takes a place for a long-lived event stream, or answers 503 and reports that
// none is left.
func (s *Server) acquireStream(w http.ResponseWriter) (release func(), ok bool) {
	return acquire(w, s.streams, fmt.Sprintf("too many open streams (at most %d); try again later", s.cfg.MaxStreams))
}

// acquireOperation takes a place among tokens for the progress stream of the operation what,
// or answers 503 and reports that none is left.
func (s *Server) acquireOperation(w http.ResponseWriter, tokens chan struct{}, what string) (release func(), ok bool) {
	return acquire(w, tokens, fmt.Sprintf("too many %s streams open (at most %d); try again later", what, maxOperationStreams))
}

func acquire(w http.ResponseWriter, tokens chan struct{}, full string) (release func(), ok bool) {
	select {
	case tokens <- struct{}{}:
		return func() { <-tokens }, true
	default:
		writeError(w, http.StatusServiceUnavailable, full)
		return nil, false
	}
}

// watch tells of the node's changes on dirty, coalesced (one pending tell at most), until ctx
// ends or the node stops; stopped closes then. The caller cancels ctx and waits for stopped.
func (s *Server) watch(ctx context.Context) (dirty <-chan struct{}, stopped <-chan struct{}) {
	d := make(chan struct{}, 1)
	st := make(chan struct{})
	go func() {
		defer close(st)
		s.node.Watch(ctx, func() {
			select {
			case d <- struct{}{}:
			default: // already dirty: coalesced
			}
		})
	}()
	return d, st
}

// runtimeSince is the runtime statuses a stream writes for snap, after it wrote the one of
// sequence *written (nil: none yet, and a past Error is not news): the host's Error first,
// when snap has replaced it and the stream has not shown it, then snap's own. A stream that
// coalesces statuses so never loses the Error (H1), and writes them in their order (H3).
func runtimeSince(snap Snapshot, written *uint64) []sdk.RuntimeStatus {
	if f := snap.Failed; f != nil && written != nil && *written < f.Sequence && f.Sequence < snap.Runtime.Sequence {
		return []sdk.RuntimeStatus{*f, snap.Runtime}
	}
	return []sdk.RuntimeStatus{snap.Runtime}
}
