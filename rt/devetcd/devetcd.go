// Package devetcd runs an embedded etcd server (go.etcd.io/etcd/server/v3/embed) on free
// 127.0.0.1 ports: the Location Store of the embedded default (DESIGN §4, §5) and of the tests.
//
// A Server is a real single-member etcd cluster, not a mock. Several can run in one process.
package devetcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Option configures Start.
type Option func(*options)

type options struct {
	dir         string
	noFsync     bool
	maxTxnOps   uint
	readyWithin time.Duration
	name        string
	member      *Member
	cluster     []Member
	tls         *transport.TLSInfo
}

// WithClientTLS makes the server speak TLS to its clients with the certificate in certFile and
// keyFile, and require of each a client certificate signed by the CA in caFile (etcd's
// --client-cert-auth). Endpoints stay host:port; clients need a TLS configuration.
func WithClientTLS(certFile, keyFile, caFile string) Option {
	return func(o *options) {
		o.tls = &transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile, ClientCertAuth: true}
	}
}

// Member is one member of a multi-member cluster: its name and the loopback addresses
// (host:port) it serves clients and peers on.
type Member struct {
	Name, ClientAddr, PeerAddr string
}

// WithMember starts the server as member m of cluster (every member, m included), on m's fixed
// addresses, instead of a single-member cluster on free ports. Each member runs its own Start,
// in this process or another; the cluster serves once a majority has started. A member started
// again on its data directory (WithDir) rejoins with its data.
func WithMember(m Member, cluster []Member) Option {
	return func(o *options) {
		o.member, o.cluster = &m, append([]Member(nil), cluster...)
		o.name = m.Name
	}
}

// WithDir keeps the data in dir, which survives Close: a long-running development node that
// restarts with its objects' locations intact. Without it the data lives in a temporary
// directory that Close removes.
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithoutFsync turns fsync off. Only for tests: a machine crash can lose acknowledged writes.
func WithoutFsync() Option { return func(o *options) { o.noFsync = true } }

// WithMaxTxnOps sets the server's limit of operations in one transaction (etcd's
// --max-txn-ops, 128 by default).
func WithMaxTxnOps(n uint) Option { return func(o *options) { o.maxTxnOps = n } }

// WithReadyTimeout bounds how long Start waits for the server to serve (default 30 s).
func WithReadyTimeout(d time.Duration) Option { return func(o *options) { o.readyWithin = d } }

// Server is a running embedded etcd.
type Server struct {
	etcd      *embed.Etcd
	dir       string
	removeDir bool
	level     zap.AtomicLevel
	endpoints []string
	maxTxnOps uint
}

// Start starts an embedded etcd on free loopback ports and returns once it serves clients.
// Cancelling ctx aborts the start.
func Start(ctx context.Context, opts ...Option) (*Server, error) {
	if ctx == nil {
		return nil, errors.New("devetcd: start: a nil context (context.Background() when there is none)")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("devetcd: start: %w", err)
	}
	o := options{readyWithin: 30 * time.Second, name: "zlink-dev", maxTxnOps: embed.DefaultMaxTxnOps}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	s := &Server{dir: o.dir, level: zap.NewAtomicLevelAt(zapcore.ErrorLevel), maxTxnOps: o.maxTxnOps}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "zlink-etcd-*")
		if err != nil {
			return nil, fmt.Errorf("devetcd: temp dir: %w", err)
		}
		s.dir, s.removeDir = dir, true
	} else if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("devetcd: data dir: %w", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = o.name
	cfg.Dir = s.dir
	cfg.UnsafeNoFsync = o.noFsync
	cfg.MaxTxnOps = o.maxTxnOps
	// Revisions older than an hour are compacted so a long-running node does not grow without
	// bound; watchers re-read when their revision is compacted.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	cfg.EnableGRPCGateway = false
	cfg.Metrics = "basic"
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if o.tls != nil {
		cfg.ClientTLSInfo = *o.tls
		secure := url.URL{Scheme: "https", Host: "127.0.0.1:0"}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{secure}, []url.URL{secure}
	}
	if m := o.member; m != nil {
		client := url.URL{Scheme: "http", Host: m.ClientAddr}
		peer := url.URL{Scheme: "http", Host: m.PeerAddr}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		initial := make([]string, len(o.cluster))
		for i, c := range o.cluster {
			initial[i] = c.Name + "=http://" + c.PeerAddr
		}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "zlink-dev-cluster"
	}
	logger := zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.Lock(os.Stderr),
		s.level,
	))
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("devetcd: start: %w", err)
	}
	s.etcd = e

	timer := time.NewTimer(o.readyWithin)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		s.Close()
		return nil, fmt.Errorf("devetcd: server failed while starting: %w", err)
	case <-timer.C:
		s.Close()
		return nil, fmt.Errorf("devetcd: server not ready within %v", o.readyWithin)
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("devetcd: start: %w", ctx.Err())
	}
	for _, l := range e.Clients {
		s.endpoints = append(s.endpoints, l.Addr().String())
	}
	if len(s.endpoints) == 0 {
		s.Close()
		return nil, errors.New("devetcd: server has no client listener")
	}
	return s, nil
}

// Endpoints returns the client addresses (host:port) to give an etcd client.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// MaxTxnOps is the server's limit of operations in one transaction.
func (s *Server) MaxTxnOps() uint { return s.maxTxnOps }

// Dir is the data directory.
func (s *Server) Dir() string { return s.dir }

// Close stops the server, silently, and removes its data directory unless it was given with
// WithDir. It is safe to call more than once.
func (s *Server) Close() error {
	if s.etcd != nil {
		// Shutdown logs nothing a user should read, not even at error level.
		s.level.SetLevel(zapcore.FatalLevel)
		s.etcd.Close()
		s.etcd = nil
	}
	return s.cleanup()
}

func (s *Server) cleanup() error {
	if !s.removeDir || s.dir == "" {
		return nil
	}
	err := os.RemoveAll(s.dir)
	s.dir = ""
	return err
}
