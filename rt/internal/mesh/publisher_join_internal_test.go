package mesh

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/sdk"
)

// txnGate holds the answer of the next etcd transaction once it is armed: the write lands in
// etcd, and its caller hears of it only when the test lets it.
type txnGate struct {
	armed   atomic.Bool
	landed  chan struct{}
	release chan struct{}
}

func newTxnGate() *txnGate {
	return &txnGate{landed: make(chan struct{}), release: make(chan struct{})}
}

func (g *txnGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if method == "/etcdserverpb.KV/Txn" && g.armed.CompareAndSwap(true, false) {
		close(g.landed)
		<-g.release
	}
	return err
}

// publisherMember reports whether reg carries this node's publisher membership of channel.
func publisherMember(reg *store.Registration, channel string) bool {
	return slices.ContainsFunc(reg.Channels(), func(c store.ChannelMembership) bool {
		return c.Channel == channel && c.Role == store.ChannelPublisher
	})
}

// G7: a publisher membership whose write landed on a registration that was replaced before
// its answer came (the lease ended, the node registered again) is not the node's: the join
// does not count as done, and the next publication writes it on the new registration.
func TestG7_AJoinAnsweredAfterARebindIsWrittenAgain(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	gate := newTxnGate()
	client, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(gate.intercept)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	st, err := store.New(client, "publisher-join-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	m, err := Listen(Config{Node: "pub", Transport: transport.Config{ListenAddr: "127.0.0.1:0"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	register := func() *store.Registration {
		reg, err := st.Register(ctx, &storepb.NodeDescriptor{
			NodeId: "pub", Endpoint: m.Endpoint(), State: uint32(sdk.RuntimeStateServing),
		}, store.LeaseOptions{TTL: 5 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = reg.Close(context.Background()) })
		return reg
	}
	first := register()
	m.reg.Store(first)

	gate.armed.Store(true)
	m.joinPublisher(&rttest.FeedDesc)
	select {
	case <-gate.landed:
	case <-ctx.Done():
		t.Fatal("the join wrote nothing")
	}
	// The first lease ends while the answer is on its way; the node registers again.
	require.NoError(t, first.Close(ctx))
	second := register()
	m.Rebind(second)
	close(gate.release)

	j := feedJoinEnded(t, m)
	require.False(t, j.joined.Load(), "the membership was written on the registration that ended")
	require.False(t, publisherMember(second, rttest.FeedChannel))

	m.joinPublisher(&rttest.FeedDesc)
	require.Eventually(t, func() bool { return j.joined.Load() }, 10*time.Second, 5*time.Millisecond,
		"the next publication joins on the new registration")
	require.True(t, publisherMember(second, rttest.FeedChannel))
}

// lockedBuffer is a log destination that handlers may write to from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// G7: a registration that holds the most channel memberships it may has no room for a
// publisher membership, and a later registration of the node carries the same ones: the join
// is given up with one Warn line rather than tried again, with a goroutine and a Warn line, at
// every publication.
func TestG7_APublisherJoinRefusedAtTheBoundIsNotTriedAgain(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	var logs lockedBuffer
	m, reg := boundedPublisher(t, ctx, client, "publisher-bound-test", &logs,
		store.ChannelMembership{Channel: rttest.WhoChannel, Role: store.ChannelServer, Kind: sdk.ChannelClientServer, Weight: 1})
	for range 3 { // three publications
		publishFeed(t, m)
	}
	require.False(t, publisherMember(reg, rttest.FeedChannel))
	// The join's goroutine logs after it has said that the join ended.
	warned := func() int { return strings.Count(logs.String(), "could not register the node as a publisher") }
	require.Eventually(t, func() bool { return warned() > 0 }, 10*time.Second, 5*time.Millisecond, "a Warn line")
	require.Equal(t, 1, warned(), "one Warn line: %s", logs.String())
}

// G7: a publisher join refused only because another join under way holds the last slot of the
// bound is not given up: once that join fails and frees its slot, the next publication writes
// the publisher membership.
func TestG7_APublisherJoinRefusedForAJoinUnderWayIsTriedAgain(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	var armed atomic.Bool
	entered := make(chan struct{}, 1)
	stall := rttest.StallTxnOnce(&armed, entered) // etcd does not answer before the join's deadline
	client, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(stall)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	m, reg := boundedPublisher(t, ctx, client, "publisher-pending-test", io.Discard)

	// Another join holds the one slot while etcd does not answer it.
	armed.Store(true)
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	other := make(chan error, 1)
	go func() {
		other <- reg.JoinChannel(jctx, store.ChannelMembership{Channel: "other", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
	}()
	<-entered

	j := publishFeed(t, m)
	require.False(t, j.joined.Load())
	require.False(t, j.refused.Load(), "a join under way may still free its slot")

	cancel()
	require.Error(t, <-other)
	j = publishFeed(t, m)
	require.True(t, j.joined.Load(), "the next publication joins in the freed slot")
	require.True(t, publisherMember(reg, rttest.FeedChannel))
}

// boundedPublisher is the mesh of the node "pub", which logs to logs, registered with
// memberships in a store whose registrations hold one channel membership at most.
func boundedPublisher(t *testing.T, ctx context.Context, client *clientv3.Client, name string, logs io.Writer, memberships ...store.ChannelMembership) (*Mesh, *store.Registration) {
	t.Helper()
	st, err := store.New(client, name, store.WithGroupCommit(3)) // 1 membership
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	m, err := Listen(Config{Node: "pub", Transport: transport.Config{ListenAddr: "127.0.0.1:0"}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	reg, err := st.Register(ctx, &storepb.NodeDescriptor{
		NodeId: "pub", Endpoint: m.Endpoint(), State: uint32(sdk.RuntimeStateServing),
	}, store.LeaseOptions{TTL: 5 * time.Second}, memberships...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	m.reg.Store(reg)
	return m, reg
}

// publishFeed is a publication of the Feed channel by m, as far as its publisher join goes:
// it returns once the join it may have started ended.
func publishFeed(t *testing.T, m *Mesh) *publisherJoin {
	t.Helper()
	m.joinPublisher(&rttest.FeedDesc)
	return feedJoinEnded(t, m)
}

// feedJoinEnded waits until m's publisher join of the Feed channel is not under way.
func feedJoinEnded(t *testing.T, m *Mesh) *publisherJoin {
	t.Helper()
	v, ok := m.channels.publishing.Load(rttest.FeedChannel)
	require.True(t, ok)
	j := v.(*publisherJoin)
	require.Eventually(t, func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return !j.joining
	}, 10*time.Second, 5*time.Millisecond, "the join ends")
	return j
}
