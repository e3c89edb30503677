package mesh

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// awaitChan waits for ch to close, failing the test when ctx ends first.
func awaitChan(t *testing.T, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s never happened", what)
	}
}

// startPair starts the nodes "owner" and "caller", each built with its opts, both in the mesh
// and the caller linked to the owner.
func startPair(t *testing.T, ctx context.Context, endpoints []string, owner, caller testNodeOpts) (*testNode, *testNode) {
	t.Helper()
	o := registerTestNodeWith(t, endpoints, "owner", owner)
	require.NoError(t, o.m.Start(ctx, o.st, o.reg, o.cat, serving))
	c := registerTestNodeWith(t, endpoints, "caller", caller)
	require.NoError(t, c.m.Start(ctx, c.st, c.reg, c.cat, serving))
	awaitPeerState(t, ctx, c.m, "owner", sdk.PeerStateReady)
	return o, c
}

func ledgerCount(t *testing.T, ctx context.Context, m *Mesh, target sdk.Target) int64 {
	t.Helper()
	out, err := m.Call(ctx, target.Plain(), rttest.LedgerCount, &wrapperspb.Int64Value{}, sdk.CallOptions{})
	require.NoError(t, err)
	return out.(*wrapperspb.Int64Value).GetValue()
}

// waitCounter is a store that counts the waits for a record to change that are in progress.
type waitCounter struct {
	*store.Etcd
	waiting atomic.Int64
}

func (w *waitCounter) wrap(st *store.Etcd) store.Store {
	w.Etcd = st
	return w
}

func (w *waitCounter) WaitChange(ctx context.Context, prev store.Resolution) (store.Resolution, error) {
	w.waiting.Add(1)
	defer w.waiting.Add(-1)
	return w.Etcd.WaitChange(ctx, prev)
}

// B6: only Ready routes are cached. Callers that meet the record Creating — a plain call, an
// intent call that loses the reservation, a call whose deadline ends while it waits — leave
// nothing in the route cache; once the record is Ready, the route is cached.
func TestB6_CreatingAnswerIsNeverCached(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	building, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	built := func(id string) {
		if id == "b6" {
			once.Do(func() { close(building) })
			<-release
		}
	}
	waits := &waitCounter{}
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{built: built}, testNodeOpts{wrap: waits.wrap})

	target := sdk.InstanceIntent(rttest.LedgerType, "b6").WithDesc(&rttest.LedgerDesc)
	results := make(chan error, 3)
	call := func(m *Mesh, t sdk.Target, msg string, opts sdk.CallOptions) {
		_, err := m.Call(ctx, t, rttest.LedgerRecord, wrapperspb.String(msg), opts)
		results <- err
	}
	go call(owner.m, target, "m1", sdk.CallOptions{Node: "owner"})
	awaitChan(t, ctx, building, "the factory")
	res, err := caller.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: "b6"})
	require.NoError(t, err)
	require.Equal(t, store.StateCreating, res.State)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = caller.m.Call(short, target.Plain(), rttest.LedgerRecord, wrapperspb.String("late"), sdk.CallOptions{})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a plain call waits for the attempt")
	_, ok := caller.m.routes.get(target)
	require.False(t, ok, "a call that gave up on a Creating record cached nothing")

	go call(caller.m, target.Plain(), "m2", sdk.CallOptions{})
	go call(caller.m, target, "m3", sdk.CallOptions{Node: "caller"})
	require.Eventually(t, func() bool { return waits.waiting.Load() == 2 }, 10*time.Second, 5*time.Millisecond,
		"both calls wait on the Creating record")
	_, ok = caller.m.routes.get(target)
	require.False(t, ok, "the Creating record is not cached")

	close(release)
	for range 3 {
		require.NoError(t, <-results)
	}
	route, ok := caller.m.routes.get(target)
	require.True(t, ok, "the Ready route is cached")
	assert.Equal(t, sdk.NodeID("owner"), route)
	assert.Equal(t, int64(3), ledgerCount(t, ctx, caller.m, target))
}
