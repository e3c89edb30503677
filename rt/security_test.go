package rt_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// A node that listens on a network address without TLS is refused before it starts, with the
// fix named; InsecurePlaintext accepts it. Loopback needs neither.
func TestPlaintextOnANetworkAddressIsRefused(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.ListenAddr = "0.0.0.0:7070"
	err := cfg.Validate()
	require.ErrorIs(t, err, sdk.ErrConfig)
	for _, want := range []string{"0.0.0.0:7070", "without TLS", "ServerTLS", "InsecurePlaintext"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = rt.Start(ctx, cfg)
	require.ErrorIs(t, err, sdk.ErrConfig, "Start refuses it before it listens")

	cfg.InsecurePlaintext = true
	require.NoError(t, cfg.Validate())
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:7070"} {
		cfg := rt.DefaultConfig()
		cfg.ListenAddr = addr
		require.NoError(t, cfg.Validate(), addr)
	}
	pki := rttest.NewPKI(t, "ca")
	cfg = rt.DefaultConfig()
	cfg.ListenAddr = "0.0.0.0:7070"
	cfg.ServerTLS, cfg.ClientTLS = pki.MutualTLS(t, "n")
	require.NoError(t, cfg.Validate(), "with TLS a network address is fine")
	cfg.ClientTLS = nil
	require.ErrorIs(t, cfg.Validate(), sdk.ErrConfig, "TLS one way only")
}

// A TLS configuration that sets no minimum version gets TLS 1.3: a TLS 1.2 client is refused.
func TestTLSDefaultsToVersion13(t *testing.T) {
	pki := rttest.NewPKI(t, "ca")
	var built atomic.Int64
	cfg := config(t, &built)
	cfg.ServerTLS, cfg.ClientTLS = pki.MutualTLS(t, "n")
	cfg.ServerTLS.MinVersion, cfg.ClientTLS.MinVersion = 0, 0
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	old := pki.ClientTLS(t, "old")
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", h.Endpoint(), old)
	if err == nil {
		err = conn.Handshake()
		conn.Close()
	}
	require.Error(t, err, "a TLS 1.2 handshake is refused")
	modern := pki.ClientTLS(t, "new")
	conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", h.Endpoint(), modern)
	require.NoError(t, err, "TLS 1.3 is accepted")
	assert.Equal(t, uint16(tls.VersionTLS13), conn.ConnectionState().Version)
	conn.Close()
}

// A node runs against an etcd that requires client certificates and has authentication and
// role-based access on: its user may read and write only the mesh's keys. Without the right
// password it does not start.
func TestEtcdWithClientCertificatesAndAuthentication(t *testing.T) {
	pki := rttest.NewPKI(t, "etcd-ca")
	dir := t.TempDir()
	certFile, keyFile, caFile := pki.Files(t, "etcd-server", dir)
	srv, err := devetcd.Start(ctx, devetcd.WithoutFsync(), devetcd.WithClientTLS(certFile, keyFile, caFile))
	require.NoError(t, err)
	defer srv.Close()

	root, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), TLS: pki.ClientTLS(t, "root"), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer root.Close()
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "zlink"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "zlink", "/zlink/", clientv3.GetPrefixRangeEnd("/zlink/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "zlink", "node-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "zlink", "zlink"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}

	var built atomic.Int64
	cfg := config(t, &built)
	cfg.EtcdEndpoints = srv.Endpoints()
	cfg.EtcdTLS = pki.ClientTLS(t, "node")
	cfg.EtcdUsername, cfg.EtcdPassword = "zlink", "node-secret"
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	assert.Equal(t, int64(3), add(t, h, "secured", 3), "creates and calls through the secured etcd")

	bad := config(t, &built)
	bad.EtcdEndpoints = srv.Endpoints()
	bad.EtcdTLS = pki.ClientTLS(t, "node")
	bad.EtcdUsername, bad.EtcdPassword = "zlink", "wrong"
	bad.EtcdDialTimeout = 15 * time.Second // the refusal comes fast; a loaded machine may not
	_, err = rt.Start(ctx, bad)
	require.Error(t, err, "a wrong password does not start")
	assert.Contains(t, err.Error(), "authentication failed")

	plain := config(t, &built)
	plain.EtcdEndpoints = srv.Endpoints()
	plain.EtcdDialTimeout = time.Second
	plain.Logger = slog.New(slog.DiscardHandler)
	_, err = rt.Start(ctx, plain)
	require.Error(t, err, "a node without a client certificate does not start")
}

// A client that reaches a node's port and sends it garbage, duplicate call IDs, requests for
// types it does not host, a flood of creations, oversized batches and half-closed streams does
// not hurt it: it answers what it can, refuses the rest, keeps serving the others, and its
// memory stays bounded by its limits.
func TestHostilePeerCannotHurtANode(t *testing.T) {
	c := newCluster(t, 2, func(_ int, cfg *rt.Config) {
		cfg.MaxActiveObjects = 2000
		// The default lease rather than the suite's 2 s: the flood runs under the race detector
		// on a shared machine, and this test is about what the node holds, not lease timing.
		cfg.LeaseTTL = rt.DefaultConfig().LeaseTTL
	})
	a, b := c.hosts[0], c.hosts[1]
	_, err := record(a, openLedger("legit"), "before", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	peer := rttest.DialRawPeer(t, b.Endpoint())
	stream := func() grpc.ClientStream {
		s, err := peer.Stream(hctx, "hostile")
		require.NoError(t, err)
		return s
	}
	// replies drains s after its sender closed it and counts the replies with no error.
	replies := func(s grpc.ClientStream) (ok, failed int) {
		for {
			var batch wire.Batch
			if err := s.RecvMsg(&batch); err != nil {
				return ok, failed
			}
			for _, env := range batch.Envelopes {
				if r := env.GetReply(); r != nil && r.Error == nil {
					ok++
				} else if r != nil {
					failed++
				}
			}
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 { // garbage
		garbage := make([]byte, rng.IntN(4096))
		for i := range garbage {
			garbage[i] = byte(rng.Uint32())
		}
		s := stream()
		_ = s.SendMsg(garbage)
		_ = s.CloseSend()
		replies(s)
	}

	s := stream() // malformed and unknown requests, duplicate call IDs
	require.NoError(t, s.SendMsg(rttest.Batch(
		&wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Kind: 3, Type: rttest.LedgerType, Id: "x", Method: rttest.LedgerRecord},
		&wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Kind: 3, Type: "not.Hosted", Id: "x", Method: "M"},
		&wire.Request{CallId: 2, Op: wire.Op_OP_CALL, Kind: 99, Type: "t", Id: "x"},
		&wire.Request{CallId: 3, Op: wire.Op_OP_CALL, Kind: 3, Type: rttest.LedgerType, Id: "bad\x00id", Intent: true},
		&wire.Request{CallId: 4, Op: 77},
		&wire.Request{CallId: 5, Op: wire.Op_OP_CLOSE, Kind: 1, Type: "x", Node: "n"},
		&wire.Request{CallId: 6, Op: wire.Op_OP_CALL, Kind: 3, Type: rttest.LedgerType, Id: "y", Intent: true, Method: rttest.LedgerRecord, Payload: []byte{0xff, 0xff}},
	)))
	// A half-close ends the stream and what it still runs, so it waits for the refusals to come
	// back (on a loaded machine they may take a while).
	var ok, failed int
	for failed == 0 {
		var batch wire.Batch
		if err := s.RecvMsg(&batch); err != nil {
			break
		}
		for _, env := range batch.Envelopes {
			if r := env.GetReply(); r != nil && r.Error == nil {
				ok++
			} else if r != nil {
				failed++
			}
		}
	}
	_ = s.CloseSend()
	more, moreFailed := replies(s)
	ok, failed = ok+more, failed+moreFailed
	assert.Zero(t, ok, "nothing malformed or unknown ran")
	assert.Positive(t, failed)

	s = stream() // 10,000 creations of random Spots: the active-object cap bounds them
	go func() {
		for i := range 20 {
			var reqs []*wire.Request
			for j := range 500 {
				payload, _ := proto.Marshal(wrapperspb.String("flood"))
				reqs = append(reqs, &wire.Request{CallId: uint64(i*500 + j + 1), Op: wire.Op_OP_CALL, Kind: 3, Type: rttest.LedgerType,
					Id: fmt.Sprintf("flood-%d", rng.Uint64()), Intent: true, Method: rttest.LedgerRecord, Payload: payload})
			}
			if s.SendMsg(rttest.Batch(reqs...)) != nil {
				break
			}
		}
		_ = s.CloseSend()
	}()
	created, refused := replies(s)
	t.Logf("flood: %d created, %d refused", created, refused)
	assert.LessOrEqual(t, b.CatalogStats().Active, int64(2000), "the cap held")
	assert.Positive(t, refused, "creations past the cap were refused")

	s = stream() // a batch over the message size limit
	huge := &wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Payload: make([]byte, 5<<20)}
	_ = s.SendMsg(rttest.Batch(huge))
	replies(s)

	for range 100 { // streams opened and half-closed at once
		s := stream()
		_ = s.CloseSend()
		replies(s)
	}

	got, err := record(a, ledger("legit"), "after")
	require.NoError(t, err, "the node still serves the mesh")
	assert.Equal(t, "after", got)
	assert.Equal(t, 1, c.runs.Count("after"))
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap %d MiB before, %d MiB after", before.HeapAlloc>>20, after.HeapAlloc>>20)
	assert.Less(t, after.HeapAlloc, before.HeapAlloc+256<<20, "memory stayed bounded")
}

// DefaultConfig caps a node's active Spots, so that a flood of creations cannot exhaust its
// memory; an explicit zero lifts the cap.
func TestDefaultConfigCapsActiveObjects(t *testing.T) {
	cfg := rt.DefaultConfig()
	assert.Equal(t, rt.DefaultMaxActiveObjects, cfg.MaxActiveObjects)
	cfg.MaxActiveObjects = 0
	require.NoError(t, cfg.Validate(), "zero: no cap")
	cfg.MaxActiveObjects = -1
	require.ErrorIs(t, cfg.Validate(), sdk.ErrConfig)
}

// A node whose mesh certificate does not come from the mesh's CA takes no part in it: its calls
// to the others are refused, the others never see it Ready, and what they would route to it
// fails instead of running. (With etcd's client-certificate auth on, it would not even register:
// TestEtcdWithClientCertificatesAndAuthentication.)
func TestNodeWithoutAMeshCertificateCanNeitherJoinNorCall(t *testing.T) {
	mesh := rttest.NewPKI(t, "mesh-ca")
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.ServerTLS, cfg.ClientTLS = mesh.MutualTLS(t, string(cfg.NodeID))
	})
	a := c.hosts[0]
	_, err := record(a, openLedger("on-a"), "first", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)

	rogue := rttest.NewPKI(t, "rogue-ca")
	x := c.start(t, 1, func(_ int, cfg *rt.Config) {
		cfg.NodeID = "node-x"
		cfg.ServerTLS, cfg.ClientTLS = rogue.MutualTLS(t, "node-x")
		cfg.ClientTLS.RootCAs = mesh.Pool // it even trusts the mesh's nodes
		cfg.OperationTimeout = 2 * time.Second
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = x.Call(cctx, ledger("on-a"), rttest.LedgerRecord, wrapperspb.String("from-x"))
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "node-a refuses node-x's connection")
	assert.Zero(t, c.runs.Count("from-x"))

	_, err = a.Call(cctx, openLedger("on-x"), rttest.LedgerRecord, wrapperspb.String("to-x"), sdk.OnNode("node-x"))
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "node-a does not trust node-x's certificate")
	assert.Zero(t, c.runs.Count("to-x"))
	for _, p := range a.MeshStatus().Peers {
		if p.NodeRid == "node-x" {
			assert.NotEqual(t, sdk.PeerStateReady, p.State)
		}
	}
	got, err := record(a, ledger("on-a"), "still-serving")
	require.NoError(t, err)
	assert.Equal(t, "still-serving", got)
}

// A call ID still in flight on a stream is refused when it comes again: one call's reply never
// ends another's context.
func TestDuplicateCallIDInFlightIsRefused(t *testing.T) {
	c := newCluster(t, 1, nil)
	h := c.hosts[0]
	_, err := record(h, openLedger("sleeper"), "create")
	require.NoError(t, err)
	peer := rttest.DialRawPeer(t, h.Endpoint())
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := peer.Stream(sctx, "duplicate")
	require.NoError(t, err)
	sleep, err := proto.Marshal(wrapperspb.Int64(1000))
	require.NoError(t, err)
	req := func() *wire.Request {
		return &wire.Request{CallId: 7, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType,
			Id: "sleeper", Method: rttest.LedgerSleep, Payload: sleep}
	}
	require.NoError(t, s.SendMsg(rttest.Batch(req(), req())))
	var replies []*wire.Reply
	for len(replies) < 2 {
		var b wire.Batch
		require.NoError(t, s.RecvMsg(&b))
		for _, env := range b.Envelopes {
			if r := env.GetReply(); r != nil {
				replies = append(replies, r)
			}
		}
	}
	require.NotNil(t, replies[0].Error, "the duplicate is answered first, refused")
	assert.True(t, replies[0].Refused)
	assert.ErrorIs(t, wire.DecodeError(replies[0].Error), sdk.ErrInvalidArgument)
	assert.Nil(t, replies[1].Error, "the first call ran to its end, its context untouched")
	_ = s.CloseSend()
}

// A peer's request with an overlong method name is refused before anything logs it.
func TestOverlongMethodNameIsRefused(t *testing.T) {
	c := newCluster(t, 1, func(_ int, cfg *rt.Config) {
		cfg.Unhandled = sdk.UnhandledDispatchOptions{Request: sdk.UnhandledDispatchActionLogAndDrop}
	})
	peer := rttest.DialRawPeer(t, c.hosts[0].Endpoint())
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := peer.Stream(sctx, "long-names")
	require.NoError(t, err)
	require.NoError(t, s.SendMsg(rttest.Batch(&wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance),
		Type: rttest.LedgerType, Id: "x", Method: strings.Repeat("m", 100_000)})))
	var b wire.Batch
	require.NoError(t, s.RecvMsg(&b), "answered at once, not held as a dropped request")
	require.Len(t, b.Envelopes, 1)
	r := b.Envelopes[0].GetReply()
	require.NotNil(t, r)
	assert.True(t, r.Refused)
	assert.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrInvalidArgument)
	_ = s.CloseSend()
}
