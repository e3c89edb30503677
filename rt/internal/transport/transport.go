// Package transport carries envelopes between nodes over gRPC bidirectional streams (DESIGN
// §4): one stream from each caller to each peer, requests one way and their replies the other,
// envelopes batched under load, a maximum message size enforced on send and receive, the
// caller's deadline and cancellation carried to the receiver, and TLS or mutual TLS by
// configuration. Two nodes with different maximum message sizes each send at most the smaller.
package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// DefaultMaxMessageSize is the default largest payload a request or reply may carry.
const DefaultMaxMessageSize = 4 << 20

// Limits of the server that a peer cannot raise.
const (
	maxStreamsPerConn = 16
	maxHeaderBytes    = 16 << 10
)

// envelopeOverhead is the room a batch keeps beyond its payloads for envelope fields.
const envelopeOverhead = 64 << 10

// flowWindow is the HTTP/2 flow-control window of every mesh stream and connection, both
// ways. gRPC's default window starts at 64 KiB and grows by probing the bandwidth-delay
// product: a PING and a connection window update for each data frame received while no probe
// is outstanding, which for request and reply is about one of each per call on each side. A
// fixed window turns the probing off.
//
// A stream's window bounds the bytes a peer can have sent on it before the node reads them
// (a connection's window is given back as data arrives, whether read or not), so a connection
// holds at most maxStreamsPerConn of them unread: at most what the probing let a stream grow
// to (16 MiB). A stream carries at most a window per round trip, which a LAN, the mesh's
// network, keeps far above what its messages need; a message larger than the window still
// goes, as gRPC opens the window for a message it is reading.
const flowWindow = 1 << 20

// defaultAheadMax bounds what the served streams' read-aheads hold together without a Core HWM
// budget; with one, they hold a stream's share of it at most, and minAheadMax at least, room
// for five reads under way of batches of the default largest message. Each stream's holds a
// window's bytes and a batch's messages at most, and a node serves up to MaxConns connections
// of maxStreamsPerConn streams: without a bound across them, peers that hold their streams
// waiting for room (by not reading their replies) would have the node read ahead many times
// what gRPC's connection windows let them have in flight.
const (
	defaultAheadMax = 64 << 20
	minAheadMax     = 32 << 20
)

// Config configures a Transport.
type Config struct {
	// Node is this node's ID; peers learn it when the stream opens.
	Node sdk.NodeID
	// ListenAddr is where peers connect (default 127.0.0.1:0: a free loopback port).
	ListenAddr string
	// ServerTLS, when set, makes the listener speak TLS; set ClientAuth and ClientCAs in it for
	// mutual TLS.
	ServerTLS *tls.Config
	// ClientTLS, when set, makes connections to peers speak TLS; its RootCAs must trust the
	// peers' certificates, and its Certificates are presented for mutual TLS.
	ClientTLS *tls.Config
	// MaxMessageSize is the largest payload a request or reply may carry, checked on send and
	// on receive (default DefaultMaxMessageSize). Two nodes tell each other their limits when a
	// stream opens, and each sends at most the smaller one.
	MaxMessageSize int
	// DialTimeout bounds one connection attempt to a peer, the peer's answer to the stream
	// included, and a peer's TLS handshake with this node (default 5 s).
	DialTimeout time.Duration
	// MaxConns bounds the connections the listener serves at once (default 1,024): a mesh needs
	// one per peer.
	MaxConns int
	// Dialer, when set, makes the connections to peers instead of net.Dialer: to go through a
	// proxy or a tunnel, for example. It gets the peer's published endpoint.
	Dialer func(ctx context.Context, endpoint string) (net.Conn, error)
	// Logger receives the transport's logs (default slog.Default()).
	Logger *slog.Logger
	// Meter, when set, accounts the node's inbound capacity: a peer's request is charged to the
	// Core HWM from its receipt until its reply is queued; a request that does not fit is
	// refused with sdk.ErrInboundBudget and its stream takes no request in until bytes return;
	// while the application job queue is paused, no stream takes one in. Meanwhile a stream
	// whose calls run reads ahead (as much as a batch holds at most, and all streams together
	// a quarter of the budget, 32 MiB at least), so that the cancellations of those calls
	// reach them. A stream with requests running, none
	// of which ends in StallTimeout (and then a quarter of it more, a second at most) of such a
	// wait, reads on, refusing each request that finds no room, so that the peer's
	// cancellations reach those calls, until none runs or those calls have all ended. A
	// stream holds at most a quarter of the budget, and a peer that mutual TLS certified has
	// at most two streams served at once: a third ends its oldest.
	Meter *capacity.Meter
	// StallTimeout closes a peer's stream whose replies have waited this long without the peer
	// taking any (default 30 s): the calls on it fail and the replies it holds are freed. It
	// also bounds how long a stream waits for room while none of its requests ends (Meter).
	// A stream to a peer that has said nothing for StallTimeout (at least four of the intervals
	// the peer announces) while calls were open on it, not even that it reads (a peer answers
	// probes, and says so while its reader reads or waits for room), closes too: the peer has
	// stopped reading though its connection lives. Its calls fail, and those whose requests
	// were never sent may go elsewhere. A batch either way (at most the largest message) must
	// therefore cross the link within StallTimeout.
	StallTimeout time.Duration
	// CloseGrace bounds how long Close waits for each peer's stream to end well (default 1 s,
	// at most an hour): the peer has stopped sending, and every request the stream took in has
	// been answered and the answer sent. It counts the time this process runs: a pause does not
	// use it up.
	CloseGrace time.Duration
	// OnServeFailure, when set, is told once that the server stopped serving for another reason
	// than Close (its listener failed): the node can no longer be reached by its peers.
	OnServeFailure func(error)
}

func (c Config) withDefaults() Config {
	if c.ListenAddr == "" {
		c.ListenAddr = "127.0.0.1:0"
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.CloseGrace <= 0 {
		c.CloseGrace = time.Second
	}
	c.CloseGrace = min(c.CloseGrace, maxCloseGrace)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Handler runs the requests that peers send.
type Handler interface {
	// Handle runs req from peer from. It must answer it through reply exactly once, now or
	// later from any goroutine; ctx ends when the caller cancels, its deadline passes or the
	// stream closes. The reply and its payload are the transport's once passed: it reuses
	// both after sending them, so the handler must not keep either, nor give a payload that
	// anything else refers to (wire.NewReply makes a reply that may be reused already). req
	// is the handler's, read from the stream into an array of its own: once nothing reads it or
	// its payload, the handler may give it back to wire.RecycleInboundRequest. Handle runs on
	// the goroutine that reads the stream, so it should return soon once ctx ends: Close waits
	// a second at most for one that does not.
	Handle(ctx context.Context, from sdk.NodeID, req *wire.Request, reply Replier)
}

// Replier answers one peer's request. The transport's own is the request's context, so that a
// request's reply costs no allocation of its own.
type Replier interface {
	// Reply answers the request with r; only the first reply goes back.
	Reply(r *wire.Reply)
	// Answer answers a message that was admitted with its outcome, the handler's reply or
	// the error it ended with (wire.MessageReply), as Reply does.
	Answer(out proto.Message, err error)
}

// ReplyFunc is a function that answers a request as a Replier.
type ReplyFunc func(r *wire.Reply)

// Reply calls f(r).
func (f ReplyFunc) Reply(r *wire.Reply) { f(r) }

// Answer calls f with the reply to an admitted message's outcome.
func (f ReplyFunc) Answer(out proto.Message, err error) { f(wire.MessageReply(out, err)) }

// Transport is this node's side of the mesh's connections.
type Transport struct {
	cfg     Config
	log     *slog.Logger
	handler Handler
	lis     net.Listener
	server  *grpc.Server

	ctx    context.Context // ends at Close: every link stops
	cancel context.CancelFunc
	// closing is closed when Close begins: the served streams refuse the requests they read
	// from then on and end once they have answered the ones they took in (Config.CloseGrace).
	closing chan struct{}
	wg      sync.WaitGroup
	// readers are the goroutines that read the served streams. One may be inside a Handle
	// that has not returned, which Close waits for only so long (readerGrace).
	readers sync.WaitGroup

	mu sync.Mutex
	// links is replaced whole, under mu, when a link is added or removed, so that a call finds
	// its link without taking mu: every remote call reads it, links change with membership.
	links  atomic.Pointer[map[sdk.NodeID]*link]
	closed bool
	// served holds the served streams of each certified peer, oldest first (enterStream).
	served map[sdk.NodeID][]*peerStream

	// aheadHeld is what the served streams' read-aheads hold together (cost), which they keep
	// to aheadMax: a stream reads no more ahead while they hold that much.
	aheadHeld atomic.Int64
	aheadMax  int64

	batches, envelopes atomic.Int64 // sent, for Stats

	maxMessage string    // cfg.MaxMessageSize as the maxMessageHeader value
	hooks      testHooks // unset in production
}

// testHooks are seams for this package's tests (export_test.go).
type testHooks struct {
	// registered runs in every call once it is registered on a Ready link, before its request
	// is sent: a test breaks the link there.
	registered func()
	// replacing runs in Connect when it replaces a peer's link at another endpoint, after the
	// new link is in the table, while the old one is closing.
	replacing func()
	// hold, when set, replaces the longest time a link's sender holds its batch for the
	// callers that replies woke.
	hold time.Duration
}

// Stats counts what the transport sent.
type Stats struct {
	// Batches is the number of stream messages sent; Envelopes the envelopes they carried.
	Batches, Envelopes int64
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{Batches: t.batches.Load(), Envelopes: t.envelopes.Load()}
}

// counted wraps a stream send so that the transport counts it.
func (t *Transport) counted(send func(*wire.Batch) error) func(*wire.Batch) error {
	return func(b *wire.Batch) error {
		t.batches.Add(1)
		t.envelopes.Add(int64(len(b.Envelopes)))
		return send(b)
	}
}

const (
	serviceName = "zlink.wire.v1.Mesh"
	streamName  = "Stream"
	fullMethod  = "/" + serviceName + "/" + streamName
	nodeHeader  = "zlink-node"
	// maxMessageHeader carries a node's MaxMessageSize: in the caller's request metadata and
	// in the server's response header. A peer that sends none uses DefaultMaxMessageSize.
	maxMessageHeader = "zlink-max-message"
	// maxBatchHeader carries the most envelopes a node's sender puts in a batch, where
	// maxMessageHeader goes. A peer that sends none is held to maxSentEnvelopes, the bound
	// that every release announces: no peer's batch is read without a count bound.
	maxBatchHeader = "zlink-max-batch"
	// readingHeader, in the server's response header, says that the server answers a Probe
	// with a Reading, and the longest it lets pass without saying Reading while its stream's
	// reader reads batches or waits for room (nanoseconds): the caller may then close a
	// stream that has said nothing for its StallTimeout while calls were open on it. A server
	// that sends none is never taken for stopped.
	readingHeader = "zlink-reading"
)

// readingEvery is the longest that a stream whose reader reads or waits for room lets pass
// without saying that it reads (readingHeader).
func (t *Transport) readingEvery() time.Duration { return min(t.cfg.StallTimeout/4, time.Second) }

// peerReadingEvery reads from a server's response header how often its stream says that it
// reads while it reads or waits for room: 0 when it does not say so, and with an error naming
// the header when the value is not a single positive count of nanoseconds of an hour at most
// (the caller then watches nothing: the header is a promise, and one it cannot read is none).
func peerReadingEvery(md metadata.MD) (time.Duration, error) {
	v := md.Get(readingHeader)
	if len(v) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n <= 0 || n > int64(time.Hour) || len(v) > 1 {
		return 0, fmt.Errorf("invalid %s header %q", readingHeader, v)
	}
	return time.Duration(n), nil
}

// maxBatch is maxSentEnvelopes as the maxBatchHeader value.
var maxBatch = strconv.Itoa(maxSentEnvelopes)

// limits are the payload limits of a stream's two nodes. Each node sends at most max(), so
// that no message exceeds what the other node's gRPC accepts and kills the stream.
type limits struct{ own, peer int }

func (m limits) max() int { return min(m.own, m.peer) }

// peerLimit reads a peer's limit from its stream metadata.
func peerLimit(md metadata.MD) (int, error) {
	v := md.Get(maxMessageHeader)
	if len(v) == 0 {
		return DefaultMaxMessageSize, nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n <= 0 || len(v) > 1 {
		return 0, fmt.Errorf("invalid %s header %q", maxMessageHeader, v)
	}
	return n, nil
}

// peerBatchLimit reads the most messages a peer puts in a batch from its stream metadata:
// maxSentEnvelopes when it announces none. A peer that announces more is refused.
func peerBatchLimit(md metadata.MD) (int, error) {
	v := md.Get(maxBatchHeader)
	if len(v) == 0 {
		return maxSentEnvelopes, nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n <= 0 || len(v) > 1 {
		return 0, fmt.Errorf("invalid %s header %q", maxBatchHeader, v)
	}
	if n > maxSentEnvelopes {
		// What one batch decodes to stays bounded by this node, whatever a peer announces.
		return 0, fmt.Errorf("its %s header announces batches of up to %d messages, more than the %d this node reads", maxBatchHeader, n, maxSentEnvelopes)
	}
	return n, nil
}

// New starts listening on cfg.ListenAddr and serving peers' streams with handler.
func New(cfg Config, handler Handler) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Node.Validate(); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, errors.New("transport: a handler is required")
	}
	lis, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %s: %w", cfg.ListenAddr, err)
	}
	// Connections beyond the bound wait in the kernel's backlog instead of costing memory here.
	lis = netutil.LimitListener(lis, cfg.MaxConns)
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		cfg: cfg, log: cfg.Logger.With("node", string(cfg.Node)), handler: handler, lis: lis,
		ctx: ctx, cancel: cancel, closing: make(chan struct{}),
		maxMessage: strconv.Itoa(cfg.MaxMessageSize),
	}
	t.aheadMax = defaultAheadMax
	if m := cfg.Meter; m != nil {
		t.aheadMax = max(minAheadMax, m.Settings().Budget/streamShareDivisor)
	}
	t.links.Store(&map[sdk.NodeID]*link{})
	// What one peer, or anyone who reaches the port, may hold of the server: a node opens one
	// stream to each peer, so a few streams per connection are plenty; a handshake and headers
	// are bounded; pings more often than the nodes' own are a protocol error.
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageSize + envelopeOverhead),
		grpc.MaxSendMsgSize(cfg.MaxMessageSize + envelopeOverhead),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.ConnectionTimeout(cfg.DialTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 4 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 5 * time.Second, Timeout: 5 * time.Second}),
		grpc.InitialWindowSize(flowWindow),
		grpc.InitialConnWindowSize(flowWindow),
		grpc.ForceServerCodecV2(newWireCodec()),
	}
	if cfg.ServerTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.ServerTLS)))
	}
	t.server = grpc.NewServer(opts...)
	t.server.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    streamName,
			Handler:       func(_ any, s grpc.ServerStream) error { return t.serveStream(s) },
			ServerStreams: true,
			ClientStreams: true,
		}},
	}, nil)
	t.wg.Go(func() {
		if err := t.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) && t.cfg.OnServeFailure != nil {
			if t.ctx.Err() != nil {
				return // Close stopped it
			}
			t.cfg.OnServeFailure(err)
		}
	})
	return t, nil
}

// Addr is the address peers dial.
func (t *Transport) Addr() string { return t.lis.Addr().String() }

// MaxMessageSize is the largest payload a request or reply may carry on this node. Between two
// nodes, the smaller of their two limits applies.
func (t *Transport) MaxMessageSize() int { return t.cfg.MaxMessageSize }

func (t *Transport) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if t.cfg.ClientTLS != nil {
		creds = credentials.NewTLS(t.cfg.ClientTLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(t.cfg.MaxMessageSize+envelopeOverhead),
			grpc.MaxCallSendMsgSize(t.cfg.MaxMessageSize+envelopeOverhead),
			grpc.ForceCodecV2(newWireCodec()),
		),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithInitialWindowSize(flowWindow),
		grpc.WithInitialConnWindowSize(flowWindow),
	}
	if t.cfg.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(checkedDialer(t.cfg.Dialer)))
	}
	return opts
}

// checkedDialer refuses what dial returns when it is no connection and no error, which gRPC
// would use as a connection and crash the process on.
func checkedDialer(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, endpoint string) (net.Conn, error) {
		conn, err := dial(ctx, endpoint)
		if err == nil && conn == nil {
			return nil, fmt.Errorf("%w: the configured Dialer returned neither a connection nor an error for %s", sdk.ErrConfig, endpoint)
		}
		return conn, err
	}
}

// Connect makes sure a link to peer at endpoint exists; it connects in the background and
// reconnects after failures until Disconnect or Close.
func (t *Transport) Connect(peer sdk.NodeID, endpoint string) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	old, had := t.link(peer)
	if had && old.endpoint == endpoint {
		t.mu.Unlock()
		return
	}
	// The new link is in the table before the old one closes: a call reads the table without
	// t.mu, and one that came while the old link closed would fail as never sent instead of
	// waiting for the new link's first connection.
	l := newLink(t, peer, endpoint)
	t.setLinkLocked(peer, l)
	t.wg.Go(l.run)
	t.mu.Unlock()
	if had {
		old.cancel()
		if h := t.hooks.replacing; h != nil {
			h()
		}
		<-old.done // old.close, with the tests' seam between its two steps
	}
}

// Disconnect closes the link to peer; its pending calls fail.
func (t *Transport) Disconnect(peer sdk.NodeID) {
	t.mu.Lock()
	l, ok := t.link(peer)
	if ok {
		t.setLinkLocked(peer, nil)
	}
	t.mu.Unlock()
	if ok {
		l.close()
	}
}

// link is the link to peer, if there is one.
func (t *Transport) link(peer sdk.NodeID) (*link, bool) {
	l, ok := (*t.links.Load())[peer]
	return l, ok
}

// setLinkLocked makes l the link to peer, or removes peer's when l is nil, in a copy of the
// links that replaces them; t.mu is held.
func (t *Transport) setLinkLocked(peer sdk.NodeID, l *link) {
	links := maps.Clone(*t.links.Load())
	if l == nil {
		delete(links, peer)
	} else {
		links[peer] = l
	}
	t.links.Store(&links)
}

// PeerState reports the link to peer: Connecting, Ready or NotConnected (G2).
func (t *Transport) PeerState(peer sdk.NodeID) sdk.PeerState {
	l, ok := t.link(peer)
	if !ok {
		return sdk.PeerStateNotConnected
	}
	return l.state()
}

// Settled reports whether the link to peer has made its first connection attempt: it is
// Ready, or it failed once. A node that starts waits for its peers to settle before it serves.
func (t *Transport) Settled(peer sdk.NodeID) bool {
	l, ok := t.link(peer)
	if !ok {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st == sdk.PeerStateReady || l.lastErr != nil
}

// ErrNoLink reports a call to a peer this transport has no link to: it was never told to
// connect (Connect), or the link was closed (Disconnect, Close). The request was not sent. It
// comes wrapped with sdk.ErrOwnerUnavailable.
var ErrNoLink = fmt.Errorf("no connection (%w)", ErrNotSent)

// ErrNotSent marks an error after which the request certainly did not leave this node: the
// caller may send it elsewhere without running it twice.
var ErrNotSent = errors.New("request not sent")

// Call sends req to peer and waits for its reply.
//
// ctx's deadline travels with the request: the receiver does not start a request that arrives
// after it, and ends the handler's context at it. Cancelling ctx cancels the call on the
// receiver too. Once ctx has ended, the call ends with ctx's error, even if an error reply
// arrives first.
//
// A payload over the smaller of the two nodes' MaxMessageSize fails with
// sdk.ErrMessageTooLarge before it is sent. A lost connection ends the call with
// sdk.ErrOwnerUnavailable: the request may or may not have run, and it is not retried (C3).
//
// The reply is the caller's alone, and read from the stream into an array of its own: once
// done with it and its payload, the caller may give it back to wire.RecycleInboundReply.
func (t *Transport) Call(ctx context.Context, peer sdk.NodeID, req *wire.Request) (*wire.Reply, error) {
	return t.call(ctx, peer, req, false)
}

// CallOnce is Call for a request that its caller lets go of: the transport reuses req once it
// has sent it, so the caller must not read or write it after CallOnce returns, unless it
// failed with ErrNoLink, when req was never queued. It saves an allocation per call.
func (t *Transport) CallOnce(ctx context.Context, peer sdk.NodeID, req *wire.Request) (*wire.Reply, error) {
	return t.call(ctx, peer, req, true)
}

func (t *Transport) call(ctx context.Context, peer sdk.NodeID, req *wire.Request, once bool) (*wire.Reply, error) {
	if len(req.Payload) > t.cfg.MaxMessageSize {
		// Refused without waiting for the link: the peer's limit can only make it smaller.
		return nil, fmt.Errorf("%w: %d bytes to %s, over the limit of %d (%s accepts %d)",
			sdk.ErrMessageTooLarge, len(req.Payload), peer, t.cfg.MaxMessageSize, t.cfg.Node, t.cfg.MaxMessageSize)
	}
	l, ok := t.link(peer)
	if !ok {
		return nil, fmt.Errorf("%w: %w to node %s", sdk.ErrOwnerUnavailable, ErrNoLink, peer)
	}
	return l.call(ctx, req, once)
}

// Close stops serving and closes every link; pending calls fail. First each peer's stream
// tells the peer that it closes, refuses unrun (sdk.ErrNotServing) what arrives from then on,
// and answers the requests it took in, until the peer has stopped sending and every answer is
// sent: for Config.CloseGrace at most, a second more if a peer stops reading, and a second
// more for a Handle that has not returned once its context ended. A peer that stops reading,
// or a handler that does not answer or return, holds the close no longer: the calls still open
// then end with the stream, and their callers cannot know whether they ran; a Handle still
// running is left to return on its own, and its stream runs nothing more. Safe to call more
// than once.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	links := *t.links.Load()
	t.links.Store(&map[sdk.NodeID]*link{})
	t.mu.Unlock()
	close(t.closing)
	t.cancel()
	for _, l := range links {
		l.close()
	}
	stopped := make(chan struct{})
	go func() {
		t.server.GracefulStop()
		close(stopped)
	}()
	// The streams end by themselves within the grace; gRPC's stop cuts those that do not a
	// second later, a second of this process's running time.
	if !runFor(t.cfg.CloseGrace+time.Second, func() bool { return isClosed(stopped) }, stopped) {
		t.server.Stop()
		<-stopped
	}
	t.wg.Wait()
	// A reader still in Handle, whose context has ended with its stream: the handler should
	// return now (Handler), and one that does not holds the close no longer than readerGrace.
	read := make(chan struct{})
	go func() {
		t.readers.Wait()
		close(read)
	}()
	runFor(readerGrace, func() bool { return isClosed(read) }, read)
	return nil
}

// maxCloseGrace bounds Config.CloseGrace.
const maxCloseGrace = time.Hour

// readerGrace is how long Close waits for the Handle calls still running once their streams
// have ended: every wait of a close is bounded.
const readerGrace = time.Second

// closePoll is the step in which the waits of a close count time.
const closePoll = 2 * time.Millisecond

// runFor waits until ready reports true, for d of this process's running time at most, and
// reports whether it did; once stop is closed it answers ready at once. It counts the ticks
// of a ticker, which drops the ticks it could not deliver: after a pause of the process the
// wait goes on, rather than ending at once before what the pause held up has run.
func runFor(d time.Duration, ready func() bool, stop <-chan struct{}) bool {
	tick := time.NewTicker(closePoll)
	defer tick.Stop()
	for left := max(1, d/closePoll); !ready(); left-- {
		if left <= 0 {
			return false
		}
		select {
		case <-tick.C:
		case <-stop:
			return ready()
		}
	}
	return true
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// serveStream runs one peer's stream: requests in, replies out.
func (t *Transport) serveStream(s grpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	from := sdk.NodeID("")
	if v := md.Get(nodeHeader); len(v) == 1 {
		from = sdk.NodeID(v[0])
	}
	if err := from.Validate(); err != nil {
		return fmt.Errorf("transport: stream without a valid %s header: %w", nodeHeader, err)
	}
	// Under mutual TLS the peer is who its certificate says, whatever its header says.
	overTLS, certified, err := peerIdentity(s.Context())
	if err != nil {
		return status.Errorf(codes.Unauthenticated, "transport: %v", err)
	} else if overTLS && certified == "" {
		// Over TLS without a verified client certificate the header alone would say who the
		// peer is: a node with ServerTLS requires its peers' certificates.
		return status.Errorf(codes.Unauthenticated, "transport: the peer %s sent no certificate of the mesh's CA (ServerTLS needs ClientAuth tls.RequireAndVerifyClientCert)", from)
	} else if certified != "" && certified != from {
		return status.Errorf(codes.Unauthenticated, "transport: the peer says it is node %s, its certificate names node %s", from, certified)
	}
	peerMax, err := peerLimit(md)
	if err != nil {
		return fmt.Errorf("transport: stream from %s: %w", from, err)
	}
	peerBatch, err := peerBatchLimit(md)
	if err != nil {
		return fmt.Errorf("transport: stream from %s: %w", from, err)
	}
	// Answer the headers at once, with this node's limits: the caller counts the stream ready
	// when they arrive.
	if err := s.SendHeader(metadata.Pairs(maxMessageHeader, t.maxMessage, maxBatchHeader, maxBatch,
		readingHeader, strconv.FormatInt(int64(t.readingEvery()), 10))); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(s.Context())
	intake, stopIntake := context.WithCancel(ctx)
	defer stopIntake()
	p := &peerStream{
		t: t, from: from, lim: limits{own: t.cfg.MaxMessageSize, peer: peerMax},
		freedCh: make(chan struct{}, 1), intake: intake, began: time.Now(),
		certified: certified != "", addr: remoteAddr(s.Context()),
	}
	if m := t.cfg.Meter; m != nil {
		budget := m.Settings().Budget
		p.share = min(budget, max(budget/streamShareDivisor, 2*capacity.Request(t.cfg.MaxMessageSize)))
	}
	defer t.enterStream(p)()
	p.out = newSender(t.counted(func(b *wire.Batch) error { return s.SendMsg(b) }), p.lim.max(), t.cfg.Meter, true)
	if t.cfg.Meter != nil {
		p.out.taken = func(n int) { p.freed(int64(n)) }
	}
	defer p.out.close()
	defer t.cfg.Meter.StreamOpened(true)()
	senderDone := make(chan struct{})
	t.wg.Go(func() {
		defer close(senderDone)
		if err := p.out.run(ctx); err != nil {
			cancel()
		}
	})
	// The stream ends when the peer half-closes or goes, or once this transport closes and the
	// stream has answered what it took in: the handler returns then, which tears the stream
	// down and ends a RecvMsg or SendMsg still blocked in it (a peer that stopped reading holds
	// the sender in SendMsg).
	recvDone := make(chan struct{})
	p.ahead = newReadAhead(p, func(b *inBatch) error { return s.RecvMsg(b) }, peerBatch)
	t.readers.Go(func() {
		defer close(recvDone)
		defer p.ahead.close() // what it holds goes with the stream
		b := &inBatch{max: peerBatch}
		for {
			// The next batch: one read ahead while the reader waited for room, or else one it
			// reads itself.
			ahead, ok, waited := p.ahead.next(b)
			b = ahead.b
			var arrived time.Time
			err := ahead.err
			if !ok {
				var idleFrom time.Time // read only while a reader wait has given up (caughtUp)
				if p.heldUpSet.Load() {
					idleFrom = time.Now()
				}
				err = s.RecvMsg(b)
				// The batch's requests arrived now: their timeouts count from here, including
				// any wait for their admission, and the wall clock is read once for them all.
				arrived = time.Now()
				if err == nil && !idleFrom.IsZero() {
					p.caughtUp(arrived.Sub(idleFrom))
				}
			} else if arrived = ahead.arrived; err == nil && p.heldUpSet.Load() {
				p.caughtUp(waited) // the reader waited that long for the read ahead
			}
			if err != nil {
				// io.EOF: the peer half-closed; any other error ended the stream. One that the
				// peer's garbage caused is logged: the operator learns which peer misbehaves.
				if c := status.Code(err); c == codes.Internal || c == codes.ResourceExhausted {
					p.warn("a peer's stream is closed: it sent what this node does not read", "err", err)
				}
				return
			}
			if ctx.Err() != nil {
				return
			}
			if !ok {
				p.readBatch(arrived.Sub(p.began), false)
			}
			p.ahead.reading(b, arrived)
			for i, env := range b.envelopes() {
				switch {
				case env.Request != nil:
					p.ahead.at = i
					if !p.admit(ctx, env.Request, arrived) {
						return
					}
				case env.Cancel != nil:
					p.cancel(env.Cancel.CallId)
				case env.Probe != nil:
					p.readBatch(arrived.Sub(p.began), true)
				}
			}
			b.reset()
		}
	})
	// A peer that stops taking its replies while its connection stays up (keepalive pings go
	// on) is dropped after StallTimeout: its queued replies go with the stream.
	// Two checks about a tick apart must find it stalled (confirmed): after a pause of this
	// process the first one comes at once, before the sender has had a chance to run.
	tick := min(t.cfg.StallTimeout/4, time.Second)
	stallCheck := time.NewTicker(tick)
	defer stallCheck.Stop()
	var stalled confirmed
	var endErr error
wait:
	for {
		select {
		case <-recvDone:
			break wait
		case <-senderDone:
			break wait
		case <-t.closing:
			p.drain(stopIntake, recvDone, senderDone)
			break wait
		case <-stallCheck.C:
			if stalled.look(p.out.stalled(t.cfg.StallTimeout), time.Since(p.began), tick) {
				p.warn("a peer has not taken its replies for too long; its stream is closed", "after", t.cfg.StallTimeout)
				break wait
			}
		case <-p.superseded:
			if isClosed(t.closing) { // both at once: the close ends the stream well
				p.drain(stopIntake, recvDone, senderDone)
				break wait
			}
			p.warn("a peer opened another stream while it held as many as a peer may; its oldest is closed", "most", maxStreamsPerPeer)
			endErr = status.Errorf(codes.ResourceExhausted, "transport: node %s serves at most %d streams of one peer at once; node %s opened another, and this one, its oldest, is closed",
				t.cfg.Node, maxStreamsPerPeer, p.from)
			break wait
		}
	}
	// Cancel first, which ends the context of every call still running and stops the sender,
	// then wait a bounded time for the sender to finish what it is sending. A reader that
	// returns from a Handle after this refuses what it reads next (admit) rather than run it:
	// Close may have stopped waiting for it.
	p.closing.Store(true)
	cancel()
	select {
	case <-senderDone:
	case <-time.After(t.cfg.DialTimeout):
	}
	return endErr
}

// maxStreamsPerPeer is how many streams a peer that mutual TLS certified may have served at
// once. A node opens one stream to each peer; a second is its next session while this node
// has not yet found the last one's connection dead. With each stream's share a quarter of the
// budget, such a peer's streams hold at most half of it. A peer's name without mutual TLS is
// its own word: any client may claim it, or open streams under names of its own, so counting
// by it would bound no flood, and would let a client that claims a node's name end or hold
// off that node's streams.
const maxStreamsPerPeer = 2

// enterStream counts p, when its peer is certified, among the peer's served streams, ending
// the peer's oldest when p is one more than it may have, and returns what takes p out of
// them. The oldest gives way, not p: a node's streams follow one another, and one that opens
// a stream is done with the ones before it.
func (t *Transport) enterStream(p *peerStream) (leave func()) {
	p.superseded = make(chan struct{})
	if !p.certified {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.served == nil {
		t.served = make(map[sdk.NodeID][]*peerStream)
	}
	streams := append(t.served[p.from], p)
	if len(streams) > maxStreamsPerPeer {
		close(streams[0].superseded)
		streams = slices.Delete(streams, 0, 1)
	}
	t.served[p.from] = streams
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		streams := t.served[p.from]
		if i := slices.Index(streams, p); i >= 0 {
			streams = slices.Delete(streams, i, i+1)
		}
		if len(streams) == 0 {
			delete(t.served, p.from)
		} else {
			t.served[p.from] = streams
		}
	}
}

// peerStream is the serving side of one peer's stream.
type peerStream struct {
	t    *Transport
	from sdk.NodeID
	lim  limits
	out  *sender

	// certified is whether mutual TLS certified from; without it from is the peer's own word,
	// which any client may claim. addr is where the stream came from.
	certified bool
	addr      string

	mu    sync.Mutex
	calls callTable[*callCtx] // the calls still running, to cancel them
	ended uint64              // the calls that have left calls
	// heldUp is set when a handler's wait on the reader gave up (heldTooLong) with ended at
	// heldUpEnded: the waits of the requests read behind it give up at once until a call ends,
	// or until the reader has caught up with the peer (caughtUp). heldUpSet mirrors it for the
	// reader's look without the lock.
	heldUp      bool
	heldUpEnded uint64
	heldUpSet   atomic.Bool

	// held is the Core HWM charge of this stream's requests not yet answered; share is the
	// most it may hold, so that one peer that floods the node leaves room for the others.
	// freed gets a token when held falls while the reader waits (waiting).
	held    atomic.Int64
	share   int64
	waiting atomic.Bool
	freedCh chan struct{}
	// kept is the part of held that jobs keep (one-way messages queued or running at their
	// consumers); it may reach half the share at most, so that consumers that do not drain
	// leave the stream room for the peer's other messages.
	kept atomic.Int64
	// admitted counts the requests charged to the stream, released those whose charge came
	// back (ReleaseCharge): the difference is running, as calls or kept jobs. shedding is set
	// when the reader waited for room while none of them ended (awaitRoom), until none runs or
	// the calls it sheds for, shedFor, those running when it began, have all left the stream.
	// shortWaitAt is when the stream, shedding, last waited a short while for room
	// (shedAfterAShortWait). Only the reader touches admitted, shedding, shedFor and
	// shortWaitAt.
	admitted    int64
	released    atomic.Int64
	shedding    bool
	shedFor     []*callCtx
	shortWaitAt time.Time

	// intake ends with the stream or when the transport closes: the waits of a request being
	// taken in end with it.
	intake context.Context
	// closing is set when the transport closes: requests read from then on are refused unrun.
	closing atomic.Bool
	// saidReading is when the stream last told the peer that it is read (sayReading), as time
	// since began, the stream's start.
	began       time.Time
	saidReading atomic.Int64
	// superseded is closed when the peer opened a stream more than it may have at once and
	// this one, its oldest, is to end (enterStream).
	superseded chan struct{}
	// ahead reads the stream while its reader waits for room (waitReading).
	ahead *readAhead
}

// readAhead takes in what b, a batch read ahead at arrived, holds that need not wait for the
// reader: it ends the running calls whose cancellations it holds, which then leave it, and
// answers its probes; it says that the stream is read, as the reader does of a batch. It
// reports whether b holds anything left for the reader: requests, or cancellations of calls
// that do not run (yet).
func (p *peerStream) readAhead(b *inBatch, arrived time.Time) (left bool) {
	at := arrived.Sub(p.began)
	p.readBatch(at, false)
	return p.takeInAhead(b.envelopes(), at)
}

// takeInAhead takes in what envs, read at at, hold that need not wait for the reader, as
// readAhead does, and reports whether they hold anything left for it.
func (p *peerStream) takeInAhead(envs []*wire.Envelope, at time.Duration) (left bool) {
	for _, env := range envs {
		switch {
		case env.Request != nil:
			left = true
		case env.Cancel != nil:
			if p.cancel(env.Cancel.CallId) {
				env.Cancel = nil
			} else {
				left = true
			}
		case env.Probe != nil:
			p.readBatch(at, true)
			env.Probe = nil
		}
	}
	return left
}

// warn logs msg at Warn with args, after the peer's name, whether mutual TLS certified it,
// and its address: an operator acts on a misbehaving peer by what it is, not by the name it
// claims.
func (p *peerStream) warn(msg string, args ...any) {
	p.t.log.Warn(msg, append([]any{"peer", p.from, "certified", p.certified, "addr", p.addr}, args...)...)
}

// streamShareDivisor sets a stream's share of the Core HWM: a quarter of the budget, and at
// least two of the largest requests.
const streamShareDivisor = 4

// add enters a call; a call ID still in flight on this stream is refused, so that one call's
// reply can never end another's context.
func (p *peerStream) add(id uint64, c *callCtx) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls.put(id, c)
}

func (p *peerStream) done(id uint64) {
	p.mu.Lock()
	c, ok := p.calls.remove(id)
	if ok && !c.held.gaveUp {
		p.ended++ // one that gave up is no sign that the calls it waited for end
	}
	p.mu.Unlock()
	if c != nil {
		c.cancel()
	}
}

// running reports whether any of the stream's calls runs.
func (p *peerStream) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls.len() > 0
}

// cancel ends the call id, and reports whether it was running.
func (p *peerStream) cancel(id uint64) (running bool) {
	p.mu.Lock()
	c, _ := p.calls.get(id)
	p.mu.Unlock()
	if c != nil {
		c.cancel()
	}
	return c != nil
}

// admit takes req in from the stream: it waits while the application job queue is paused and
// while the replies queued for the peer are at their bound, then charges req to the Core HWM
// and to the stream's share of it, and dispatches it. A request that does not fit is refused
// with sdk.ErrInboundBudget, and the stream is not read again until there is room for one like
// it, so that gRPC's flow control holds the peer's further requests on its side, unless the
// stream sheds (awaitRoom): then each request that finds no room is refused at once, with
// sdk.ErrInboundBudget, or ErrCapacityExceeded{Scheduler} while the job queue is paused. Once
// the transport closes, req is refused unrun instead (refuseClosing), and so is a request
// whose wait the close ended. It reports false when ctx, the stream's, ended while it waited.
// arrived is when req's batch arrived.
func (p *peerStream) admit(ctx context.Context, req *wire.Request, arrived time.Time) bool {
	if p.closing.Load() {
		return p.refuseClosing(ctx, req)
	}
	m := p.t.cfg.Meter
	if m.Paused() {
		switch p.awaitRoom(m.WaitIntake) {
		case roomEnded:
			return p.refuseClosing(ctx, req)
		case roomShed:
			if p.awaitReplyRoom() != nil {
				return p.refuseClosing(ctx, req)
			}
			p.refuseWith(req, fmt.Errorf("node %s did not run the request from %s: its application job queue is paused, and none of that stream's requests ended while it waited for room: %w",
				p.t.cfg.Node, p.from, &sdk.CapacityError{Where: sdk.CapacityScheduler, Limit: m.Settings().MaxJobs}))
			return true
		}
	}
	if p.awaitReplyRoom() != nil {
		return p.refuseClosing(ctx, req)
	}
	// Every byte of it that the node holds: its payload and its texts (E7).
	n := capacity.Request(len(req.Payload) + requestTextBytes(req))
	if m == nil {
		p.dispatch(ctx, req, &callCtx{}, arrived)
		return true
	}
	if held := p.held.Load(); held > 0 && held+n > p.share {
		p.refuse(req, fmt.Sprintf("its requests and replies to %s hold %d bytes, that stream's share of the budget of %d is %d",
			p.from, held, m.Settings().Budget, p.share))
		return p.awaitRoom(func(c context.Context) error { return p.awaitFreed(c, n) }) != roomEnded || ctx.Err() == nil
	}
	if !m.Charge(n) {
		p.refuse(req, fmt.Sprintf("it holds as many bytes of its peers' requests as its budget of %d allows", m.Settings().Budget))
		return p.awaitRoom(func(c context.Context) error { return m.WaitRoom(c, n) }) != roomEnded || ctx.Err() == nil
	}
	p.admitted++
	p.held.Add(n)
	p.dispatch(ctx, req, charged(n, p), arrived)
	return true
}

// roomOutcome is how a stream's wait for room ended.
type roomOutcome uint8

const (
	roomMade  roomOutcome = iota // there is room
	roomShed                     // the stream sheds: the request is refused, the stream read on
	roomEnded                    // the stream's intake ended
)

// awaitRoom runs wait, a wait for room to take a request in. While none of the stream's
// requests is running (their charges all came back), none of its calls can be waiting behind
// it for a cancellation, and it waits as long as the room takes. Otherwise it waits in windows
// of StallTimeout, each following one in which a request ended, and then a second, shorter
// window (a quarter of it, a second at most), as two checks in a row (after a pause of this
// process the first one ends at once, before the calls have had a chance to run): calls that
// end in neither may be waiting for their cancellations, which come on the stream behind the
// requests that wait. The stream then sheds, refusing each request that finds no room and
// reading on at once (but for a short wait once a StallTimeout at most: shedAfterAShortWait),
// so that the cancellations reach their calls, until none of its requests runs or the calls
// that ran when it began have all ended (whatever requests fit meanwhile).
func (p *peerStream) awaitRoom(wait func(context.Context) error) roomOutcome {
	stall := p.t.cfg.StallTimeout
	released := p.released.Load()
	for second := false; ; {
		if p.admitted == released {
			p.endShedding()
			if p.waitReading(p.intake, wait, nil) != nil {
				return roomEnded
			}
			return roomMade
		}
		if p.shedding {
			switch {
			case !p.shedCallsRun():
				p.endShedding() // the calls it shed for have ended: those running now may end too
			case time.Since(p.shortWaitAt) < stall:
				return roomShed
			default:
				return p.shedAfterAShortWait(wait)
			}
		}
		d := stall
		if second {
			d = min(stall/4, time.Second)
		}
		wctx, cancel := context.WithTimeout(p.intake, d)
		err := p.waitReading(wctx, wait, nil)
		cancel()
		switch {
		case err == nil:
			return roomMade
		case p.intake.Err() != nil:
			return roomEnded
		}
		if now := p.released.Load(); now != released {
			released, second = now, false // its calls end: the room comes
			continue
		}
		if second {
			break
		}
		second = true
	}
	p.shedding, p.shortWaitAt = true, time.Now() // this request waited: no short wait for a while
	p.mu.Lock()
	p.calls.each(func(_ uint64, c *callCtx) { p.shedFor = append(p.shedFor, c) })
	p.mu.Unlock()
	p.warn("none of a peer's calls has ended while its stream waited for room: its requests that find no room are refused until those calls end, and its cancellations are read",
		"after", stall)
	return roomShed
}

// shedAfterAShortWait is the wait of a request that finds no room while the stream sheds, once
// a StallTimeout at most, not in the first after it began: a short one (a quarter of
// StallTimeout, a second at most), so that room that comes back soon (a brief spike) is
// taken, while the cancellations behind wait that long at most once a StallTimeout, whatever
// mix of requests the peer sends.
func (p *peerStream) shedAfterAShortWait(wait func(context.Context) error) roomOutcome {
	p.shortWaitAt = time.Now()
	wctx, cancel := context.WithTimeout(p.intake, min(p.t.cfg.StallTimeout/4, time.Second))
	err := p.waitReading(wctx, wait, nil)
	cancel()
	switch {
	case err == nil:
		return roomMade
	case p.intake.Err() != nil:
		return roomEnded
	}
	return roomShed
}

// shedCallsRun reports whether any of the calls the stream sheds for is still on it: a
// request that fits meanwhile does not end the shedding, since those calls may still wait for
// cancellations behind the next request that does not. It forgets those that have left.
func (p *peerStream) shedCallsRun() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.shedFor); n > 0; n-- {
		c := p.shedFor[n-1]
		if on, ok := p.calls.get(c.id); ok && on == c {
			return true
		}
		p.shedFor[n-1] = nil
		p.shedFor = p.shedFor[:n-1]
	}
	return false
}

// endShedding has the stream wait for room again.
func (p *peerStream) endShedding() {
	p.shedding, p.shedFor, p.shortWaitAt = false, nil, time.Time{}
}

// awaitReplyRoom waits until the stream's reply queue has room, telling the peer meanwhile
// that the stream still reads (waitReading), and returns the intake's error if it ends first.
func (p *peerStream) awaitReplyRoom() error {
	if !p.out.full() {
		return nil
	}
	return p.waitReading(p.intake, p.out.waitRoom, nil)
}

// waitReading runs wait, a wait of the stream's reader for room to take a request in, and
// tells the peer that the stream is read (wire.Reading) whenever readingEvery has passed since
// it last did, across waits: the peer's requests are not read meanwhile, and the peer tells
// this wait from a reader that has stopped (link.session). It returns wait's outcome, or ctx's
// error once ctx ends.
//
// With call not nil it is a wait of a handler taking call's request in (capacity.AsReader),
// which the transport bounds as it bounds its own (awaitRoom). The wait may outlive the
// reader's taking in of the request: once call is no longer taken in, the rest of the wait
// says nothing. And while the stream's other calls run, one may wait for a cancellation queued
// behind the waiting request: when none of them has ended for StallTimeout, at two looks a
// window apart (a pause of this process gives them no chance to end), the wait gives up with
// capacity.ErrReaderHeldUp, and so does every such wait of the requests read behind it, at
// once, until one of the stream's calls ends or the reader catches up with the peer (heldUp).
func (p *peerStream) waitReading(ctx context.Context, wait func(context.Context) error, call *callCtx) error {
	if call != nil && call.taking.Load() && p.behindHeldUp(call) {
		return capacity.ErrReaderHeldUp
	}
	if call != nil || p.running() {
		// The cancellations behind the waiting request are read meanwhile, which may be what
		// the calls running wait for: a handler's own call among them.
		defer p.ahead.end(p.ahead.begin(&p.t.readers, call))
	}
	every := p.t.readingEvery()
	for {
		// A window ends an interval after the stream last said that it is read, so that a run
		// of short waits says so as a long one does.
		d := every - (time.Since(p.began) - time.Duration(p.saidReading.Load()))
		if d <= 0 {
			if call != nil {
				if !call.taking.Load() {
					return wait(ctx)
				}
				if p.heldTooLong(call) {
					return capacity.ErrReaderHeldUp
				}
			}
			p.sayReading(math.MaxInt)
			p.ahead.resume(&p.t.readers) // the other streams' may have left it room
			d = every
		}
		wctx, cancel := context.WithTimeout(ctx, d)
		err := wait(wctx)
		window := err != nil && ctx.Err() == nil && wctx.Err() != nil
		cancel()
		if !window {
			return err
		}
	}
}

// heldReader is what heldTooLong knows of the waits of a request being taken in: since when
// none of the stream's other calls has ended (ended of them had then), and when it first found
// that too long, and whether one of them gave up. The clock runs across the request's waits.
type heldReader struct {
	ended        uint64
	since, first time.Time
	gaveUp       bool
}

// behindHeldUp reports whether call's request was read behind a wait that gave up (heldUp),
// none of the stream's calls having ended since, and marks its call as one that gave up.
func (p *peerStream) behindHeldUp(call *callCtx) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.behindHeldUpLocked(call, p.ended, p.calls.len() > 1)
}

func (p *peerStream) behindHeldUpLocked(call *callCtx, ended uint64, others bool) bool {
	if p.heldUp && (!others || ended != p.heldUpEnded) {
		p.heldUp = false
		p.heldUpSet.Store(false)
	}
	if p.heldUp {
		call.held.gaveUp = true
	}
	return p.heldUp
}

// caughtUp notes that the reader waited idle for the peer's next batch: when it waited an eighth
// of a reading interval or more (far longer than a backlog's batches are apart on a LAN: the
// peer sends on as the reader takes them), it has read every request sent before, and a
// request read from now on is no longer behind a wait that gave up.
func (p *peerStream) caughtUp(idle time.Duration) {
	if idle < p.t.readingEvery()/8 {
		return
	}
	p.mu.Lock()
	p.heldUp = false
	p.heldUpSet.Store(false)
	p.mu.Unlock()
}

// heldTooLong reports whether the waits of call's request have held the stream's reader up too
// long: other calls run on the stream, and none has ended for StallTimeout, at two looks in a
// row; or the request was read behind a wait that gave up so (behindHeldUp).
func (p *peerStream) heldTooLong(call *callCtx) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ended, others := p.ended, p.calls.len() > 1 // the waiting request's call is one
	if p.behindHeldUpLocked(call, ended, others) {
		return true
	}
	h, now := &call.held, time.Now()
	if !others || ended != h.ended || h.since.IsZero() {
		h.ended, h.since, h.first = ended, now, time.Time{}
		return false
	}
	if now.Sub(h.since) <= p.t.cfg.StallTimeout {
		return false
	}
	if h.first.IsZero() {
		h.first = now
		return false
	}
	p.heldUp, p.heldUpEnded, h.gaveUp = true, ended, true
	p.heldUpSet.Store(true)
	return true
}

// readBatch notes that the reader read a batch at at (since the stream began): it tells the
// peer that the stream is read once an interval while batches come, and at once when the batch
// holds a probe, unless it said so less than an eighth of an interval before. A peer whose calls
// all run long, or whose link is slow to carry a backlog, hears from the stream while it reads.
func (p *peerStream) readBatch(at time.Duration, probed bool) {
	since, every := at-time.Duration(p.saidReading.Load()), p.t.readingEvery()
	if since >= every || (probed && since >= every/8) {
		p.sayReading(0)
	}
}

// sayReading tells the peer that the stream is read, queued past the reply queue's bound only
// if small allows (sender.pushWithin): a reader that waits for room says so whatever the
// queue holds, one that reads does within its bound. What the queue did not take does not
// count as said, so that the next look says it.
func (p *peerStream) sayReading(small int) {
	n, full := p.out.pushWithin(queuedReading(), small)
	if full {
		return // unsaid: the next look says it (a wait for room, whatever the queue holds)
	}
	p.saidReading.Store(int64(time.Since(p.began)))
	if n > 0 && p.t.cfg.Meter != nil {
		p.held.Add(int64(n)) // as a reply's: its sending returns them (freed)
	}
}

// refuseClosing refuses req unrun because the transport is closing, once the replies queued
// for the peer leave room: a peer that stops reading is not answered without bound. It reports
// false when ctx, the stream's, ended first.
func (p *peerStream) refuseClosing(ctx context.Context, req *wire.Request) bool {
	if ctx.Err() != nil || (p.out.full() && p.waitReading(ctx, p.out.waitRoom, nil) != nil) {
		return false
	}
	p.reply(&wire.Reply{CallId: req.CallId, Refused: true, Error: wire.EncodeError(fmt.Errorf(
		"%w: node %s is closing its connections and did not run the request from %s", sdk.ErrNotServing, p.t.cfg.Node, p.from))})
	return true
}

// drain is the end of the stream as its transport closes. It tells the peer that the stream
// closes (closingNotice): the peer sends nothing more on it and half-closes it once it has sent
// what it had queued. The requests read from then on are refused unrun. Once the peer has
// half-closed the stream (the reader has ended: no request is being taken in, and none will
// be) and every request taken in is answered and every answer sent, the stream may end: every
// request the peer sent got its outcome or a refusal. drain waits for that for the grace at
// most, or until the sender fails.
func (p *peerStream) drain(stopIntake context.CancelFunc, recvDone, senderDone <-chan struct{}) {
	// The notice goes first: a request read meanwhile is taken in and answered as before.
	p.reply(&wire.Reply{CallId: closingNotice, Refused: true, Error: wire.EncodeError(fmt.Errorf(
		"%w: node %s is closing its connections", sdk.ErrNotServing, p.t.cfg.Node))})
	p.closing.Store(true)
	stopIntake()
	runFor(p.t.cfg.CloseGrace, func() bool { return p.answeredAll(recvDone) }, senderDone)
}

// closingNotice is the call ID of the reply that tells a peer that the stream closes: no call
// has it (a link numbers its calls from 1).
const closingNotice = 0

// answeredAll reports whether the peer has half-closed the stream (or it failed), so that no
// request is read any more, and every request read has been answered and every answer sent: no
// call running, nothing queued or being sent. A call's answer is queued before it leaves the
// calls (replyTo).
func (p *peerStream) answeredAll(recvDone <-chan struct{}) bool {
	if !isClosed(recvDone) {
		return false
	}
	p.mu.Lock()
	running := p.calls.len()
	p.mu.Unlock()
	return running == 0 && p.out.idle()
}

// KeepCharge counts n more bytes as kept by a job, unless the kept bytes would pass half the
// stream's share (a first message larger than that is kept all the same).
func (p *peerStream) KeepCharge(n int64) bool {
	limit := p.share / 2
	for {
		cur := p.kept.Load()
		if cur > 0 && cur+n > limit {
			return false
		}
		if p.kept.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// UnkeepCharge takes back n kept bytes.
func (p *peerStream) UnkeepCharge(n int64) { p.kept.Add(-n) }

// ReleaseCharge returns n bytes of a request's charge to the meter and to the stream's share.
func (p *peerStream) ReleaseCharge(n int64) {
	p.t.cfg.Meter.Release(n)
	p.released.Add(1)
	p.freed(n)
}

// freed returns n bytes to the stream's share and wakes its reader if it waits for them.
func (p *peerStream) freed(n int64) {
	p.held.Add(-n)
	if p.waiting.Load() {
		select {
		case p.freedCh <- struct{}{}:
		default:
		}
	}
}

// refuse answers req with sdk.ErrInboundBudget.
func (p *peerStream) refuse(req *wire.Request, why string) {
	p.refuseWith(req, fmt.Errorf("%w: node %s did not run the request of %d bytes from %s: %s", sdk.ErrInboundBudget, p.t.cfg.Node, len(req.Payload), p.from, why))
}

// refuseWith answers req as refused unrun with err.
func (p *peerStream) refuseWith(req *wire.Request, err error) {
	p.reply(&wire.Reply{CallId: req.CallId, Refused: true, Error: wire.EncodeError(err)})
}

// awaitFreed waits until the stream holds nothing or has room in its share for n more bytes,
// or ctx ends.
func (p *peerStream) awaitFreed(ctx context.Context, n int64) error {
	p.waiting.Store(true)
	defer p.waiting.Store(false)
	if held := p.held.Load(); held == 0 || held+n <= p.share {
		return nil
	}
	defer p.t.cfg.Meter.Blocked()()
	for {
		if held := p.held.Load(); held == 0 || held+n <= p.share {
			return nil
		}
		select {
		case <-p.freedCh:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reply queues r; its bytes count against the stream's share until they are sent, so that a
// peer that does not take its replies stops being read. The requests already taken in still
// answer meanwhile, each with up to the largest message: one that would take the queue past
// its bound goes as sdk.CapacityError{Where: CapacityReplyQueue} instead, no larger than its
// request's fixed charge, so that the replies a peer does not read stay bounded (E6) and its
// caller learns why. A refusal goes whole: it is small, and says the request did not run.
func (p *peerStream) reply(r *wire.Reply) {
	// In the batch it would fail the stream and every call on it: its caller alone learns.
	if n := replyTextBytes(r); n > maxTextBytes {
		r = &wire.Reply{CallId: r.GetCallId(), Error: wire.EncodeError(fmt.Errorf("%w: the reply from %s has texts of %d bytes, over the limit of %d",
			sdk.ErrMessageTooLarge, p.t.cfg.Node, n, maxTextBytes))}
	} else if err := replyUTF8(r); err != nil {
		r = &wire.Reply{CallId: r.GetCallId(), Error: wire.EncodeError(err)}
	}
	small := math.MaxInt
	if !r.Refused {
		small = capacity.MessageOverhead
	}
	n, full := p.out.pushWithin(queuedReply(r), small)
	if full {
		dropped := &wire.Reply{CallId: r.CallId, Error: wire.EncodeError(&sdk.CapacityError{Where: sdk.CapacityReplyQueue})}
		recycleReply(r) // the handler let go of it (Handler), and it was not queued
		n = p.out.push(queuedReply(dropped))
	}
	if n > 0 && p.t.cfg.Meter != nil {
		p.held.Add(int64(n))
	}
}

// answer queues r and settles the charge of the request it answers.
func (p *peerStream) answer(r *wire.Reply, charge *capacity.Charge) {
	p.reply(r)
	if charge != nil {
		charge.Settle()
	}
}

// dispatch runs req in call, not yet started, which holds its charge (none without a meter): a
// context that ends at the caller's deadline, when the caller cancels, or when the stream ends;
// its reply goes back on the stream. The handler finds the charge in its context, to keep it
// for a one-way job. arrived is when req's batch arrived, a reading of this process's clock.
func (p *peerStream) dispatch(ctx context.Context, req *wire.Request, call *callCtx, arrived time.Time) {
	t, id, charge := p.t, req.CallId, call.heldCharge()
	if len(req.Payload) > t.cfg.MaxMessageSize {
		p.answer(&wire.Reply{CallId: id, Refused: true, Error: wire.EncodeError(fmt.Errorf("%w: %d bytes from %s, over %s's limit of %d",
			sdk.ErrMessageTooLarge, len(req.Payload), p.from, t.cfg.Node, t.cfg.MaxMessageSize))}, charge)
		return
	}
	var dl, now time.Time
	wall := false // dl is the caller's absolute deadline
	if req.TimeoutNanos > 0 || req.DeadlineUnixNanos > 0 {
		// The earlier of the caller's absolute deadline and the timeout from the batch's
		// arrival: the timeout alone would start again for a request that waited in a sender
		// or a TCP buffer. The deadline is judged at a fresh reading, whatever held the
		// stream's reader since the batch arrived (an earlier request's admission, a pause);
		// it costs a read of the monotonic clock only, its wall part carried from arrived.
		now = arrived.Add(time.Since(arrived))
		if req.TimeoutNanos > 0 {
			dl = arrived.Add(time.Duration(req.TimeoutNanos))
		}
		if req.DeadlineUnixNanos > 0 {
			if abs := time.Unix(0, req.DeadlineUnixNanos); dl.IsZero() || abs.Before(dl) {
				dl, wall = abs, true
			}
		}
		if !dl.After(now) {
			// Its caller's deadline has passed, so the caller has seen DeadlineExceeded or is
			// about to: the request never starts.
			p.answer(&wire.Reply{CallId: id, Refused: true, Error: wire.EncodeError(fmt.Errorf("%w: the request from %s was %v past its deadline when it came to run, and did not run",
				context.DeadlineExceeded, p.from, now.Sub(dl)))}, charge)
			return
		}
	}
	call.p, call.id = p, id
	call.start(ctx, dl, wall, now)
	if !p.add(id, call) {
		p.answer(&wire.Reply{CallId: id, Refused: true, Error: wire.EncodeError(fmt.Errorf("%w: call ID %d from %s is still in flight",
			sdk.ErrInvalidArgument, id, p.from))}, charge)
		return
	}
	call.taking.Store(true)
	t.handler.Handle(call, p.from, req, call)
	call.taking.Store(false)
	p.ahead.handled()
}

// replyTo answers the request whose context is call with r: the first reply only.
func (p *peerStream) replyTo(call *callCtx, r *wire.Reply) {
	if !call.answer() {
		return
	}
	id := call.id
	r.CallId = id
	if lim := p.lim; len(r.Payload) > lim.max() {
		r = &wire.Reply{CallId: id, Error: wire.EncodeError(fmt.Errorf("%w: the reply to %s is %d bytes, over the limit of %d (%s accepts %d, %s accepts %d)",
			sdk.ErrMessageTooLarge, p.from, len(r.Payload), lim.max(), p.t.cfg.Node, lim.own, p.from, lim.peer))}
	}
	// Queued before the call leaves the stream's calls: a closing stream that finds no call
	// running finds every answer queued or sent (answeredAll).
	p.answer(r, call.heldCharge())
	p.done(id)
}
