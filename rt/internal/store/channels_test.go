package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Channel memberships are written with the registration, on its lease; a joined one is fenced
// on the registration and ends with it; a watch reports each, and a later registration of the
// node carries them all.
func TestChannelMembershipLivesWithTheLease(t *testing.T) {
	s := newStore(t)
	server := store.ChannelMembership{Channel: "match/maker", Role: store.ChannelServer, Kind: sdk.ChannelClientServer, Weight: 3, Methods: []string{"Find(a.Req)a.Reply"}}
	sub := store.ChannelMembership{Channel: "results", Role: store.ChannelSubscriber, Kind: sdk.ChannelFanout, Publishers: []string{"node-b"}}
	reg, err := s.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{}, server, sub)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })

	members, rev, err := s.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, members, 2)
	byChannel := map[string]store.ChannelMember{}
	for _, m := range members {
		byChannel[m.Channel] = m
	}
	got := byChannel["match/maker"]
	assert.Equal(t, sdk.NodeID("node-a"), got.Node)
	assert.Equal(t, reg.Owner().Lease, got.Lease, "the membership is on the node's lease")
	assert.Equal(t, server, got.ChannelMembership, "a '/' in a channel name round-trips")
	assert.Equal(t, sub, byChannel["results"].ChannelMembership)

	var mu sync.Mutex
	var events []store.ChannelEvent
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.WatchChannels(wctx, rev, func(ev store.ChannelEvent) {
			if ev.Progress {
				return
			}
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		})
	}()
	pub := store.ChannelMembership{Channel: "results", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout}
	require.NoError(t, reg.JoinChannel(ctx, pub))
	assert.Equal(t, []store.ChannelMembership{server, sub, pub}, reg.Channels(), "a later registration carries every membership")

	require.NoError(t, reg.Close(ctx))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 4
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	assert.False(t, events[0].Gone)
	assert.Equal(t, store.ChannelPublisher, events[0].Member.Role)
	gone := map[store.ChannelRole]bool{}
	for _, ev := range events[1:] {
		assert.True(t, ev.Gone, "the lease's end ends every membership")
		gone[ev.Member.Role] = true
	}
	assert.Equal(t, map[store.ChannelRole]bool{store.ChannelServer: true, store.ChannelSubscriber: true, store.ChannelPublisher: true}, gone)

	// A registration that ended joins nothing more.
	err = reg.JoinChannel(ctx, store.ChannelMembership{Channel: "late", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
	require.ErrorIs(t, err, store.ErrFenced)
	members, _, err = s.Channels(ctx)
	require.NoError(t, err)
	assert.Empty(t, members)
}

// newBoundedStore is a store whose registrations hold at most two channel memberships: one made
// for an etcd that takes four operations per transaction.
func newBoundedStore(t *testing.T, cli *clientv3.Client) *store.Etcd {
	t.Helper()
	s, err := store.New(cli, fmt.Sprintf("%s-%d", t.Name(), meshSeq.Add(1)), store.WithGroupCommit(4))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// boundedServer is a newBoundedStore whose etcd client's calls go through intercept, and the
// registration of node-a in it as the server of the channel "s".
func boundedServer(t *testing.T, intercept grpc.UnaryClientInterceptor) (*store.Etcd, *store.Registration) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	s := newBoundedStore(t, cli)
	srv := store.ChannelMembership{Channel: "s", Role: store.ChannelServer, Kind: sdk.ChannelClientServer, Weight: 1}
	reg, err := s.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{}, srv)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	return s, reg
}

// A membership the registration holds already adds nothing to what a later registration's
// transaction writes: joining it again is not refused at the bound, so that the mesh's
// rejoin after a new registration can succeed there.
func TestG7_JoiningAHeldMembershipAgainAtTheBoundSucceeds(t *testing.T) {
	s := newBoundedStore(t, newClient(t))
	srv := store.ChannelMembership{Channel: "s", Role: store.ChannelServer, Kind: sdk.ChannelClientServer, Weight: 1}
	pub := store.ChannelMembership{Channel: "p", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout}
	reg, err := s.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{}, srv, pub)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	require.NoError(t, reg.JoinChannel(ctx, pub))
	assert.Len(t, reg.Channels(), 2, "the registration carries it once")
	err = reg.JoinChannel(ctx, store.ChannelMembership{Channel: "q", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
	require.ErrorIs(t, err, store.ErrTooManyMemberships, "a new one is refused at the bound")
}

// txnBarrier, once armed, holds every etcd Txn until n of them have been sent, then lets them
// all go: n joins are then all past their bound check before any commits.
func txnBarrier(armed *atomic.Bool, n int32) grpc.UnaryClientInterceptor {
	var arrived atomic.Int32
	all := make(chan struct{})
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.KV/Txn" && armed.Load() {
			if arrived.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
			case <-time.After(time.Second): // the joins that were refused send none
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Joins that run together (the mesh joins each channel's publisher membership on a goroutine
// of its own) stay within the bound together: otherwise the registration would hold more
// memberships than a later registration's transaction writes, and the node could never
// register again once its lease ended.
func TestG7_ConcurrentJoinsStayWithinTheMembershipBound(t *testing.T) {
	var armed atomic.Bool
	s, reg := boundedServer(t, txnBarrier(&armed, 2))
	armed.Store(true)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			errs[i] = reg.JoinChannel(ctx, store.ChannelMembership{Channel: fmt.Sprintf("p%d", i), Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
		})
	}
	wg.Wait()
	assert.Len(t, reg.Channels(), 2, "one join took the last slot")
	require.Len(t, slices.DeleteFunc(errs, func(err error) bool { return err == nil }), 1)

	// What the host does once the lease ended.
	armed.Store(false)
	require.NoError(t, reg.Revoke(ctx))
	next, err := s.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{}, reg.Channels()...)
	require.NoError(t, err, "the node registers again with the memberships it holds")
	_ = next.Close(context.Background())
}

// G7: a join refused because another join under way holds the last slot is refused for now,
// not for good: should that join fail (etcd too slow for its deadline), its slot is free, and
// the refused membership is written when tried again. Only the memberships held make
// ErrTooManyMemberships.
func TestG7_AJoinRefusedForAJoinUnderWayMayBeTriedAgain(t *testing.T) {
	var armed atomic.Bool
	entered := make(chan struct{}, 1)
	stall := rttest.StallTxnOnce(&armed, entered) // etcd does not answer before the join's deadline
	_, reg := boundedServer(t, stall)

	armed.Store(true)
	jctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		first <- reg.JoinChannel(jctx, store.ChannelMembership{Channel: "p0", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
	}()
	<-entered
	p1 := store.ChannelMembership{Channel: "p1", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout}
	err := reg.JoinChannel(ctx, p1)
	require.ErrorIs(t, err, store.ErrMembershipsJoining)
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable, "a refusal for now")
	require.NotErrorIs(t, err, store.ErrTooManyMemberships)

	require.Error(t, <-first, "the join under way failed")
	require.NoError(t, reg.JoinChannel(ctx, p1), "its slot is free again")
	assert.Len(t, reg.Channels(), 2)
	err = reg.JoinChannel(ctx, store.ChannelMembership{Channel: "p2", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
	require.ErrorIs(t, err, store.ErrTooManyMemberships, "held memberships at the bound refuse for good")
	require.NotErrorIs(t, err, sdk.ErrStoreUnavailable)
}
