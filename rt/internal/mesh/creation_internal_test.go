package mesh

import (
	"context"
	"fmt"
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

// heldCommit is a store between a catalog and etcd that holds the Ready commit of one Spot ID
// until the test releases it. With commit set, the record is committed Ready first: the hold
// is the window between the Ready commit and the activation's registration on its node. Without
// it, the commit fails once released, and with it the creation.
type heldCommit struct {
	*store.Etcd
	id      string
	commit  bool
	held    chan struct{} // closed once the commit of id is held
	release chan struct{}
	once    sync.Once
}

func newHeldCommit(id string, commit bool) *heldCommit {
	return &heldCommit{id: id, commit: commit, held: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldCommit) wrap(st *store.Etcd) store.Store {
	h.Etcd = st
	return h
}

func (h *heldCommit) CommitReady(ctx context.Context, r store.Reservation) (store.Record, error) {
	if r.Key.ID != h.id {
		return h.Etcd.CommitReady(ctx, r)
	}
	var rec store.Record
	var err error
	if h.commit {
		if rec, err = h.Etcd.CommitReady(ctx, r); err != nil {
			return rec, err
		}
	}
	h.once.Do(func() { close(h.held) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return store.Record{}, ctx.Err()
	}
	if !h.commit {
		return store.Record{}, fmt.Errorf("test: the Ready commit of %s fails: %w", r.Key, sdk.ErrStoreUnavailable)
	}
	return rec, nil
}

// awaitChan waits for ch to close, failing the test when ctx ends first.
func awaitChan(t *testing.T, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s never happened", what)
	}
}

// awaitSlowWait waits until m runs a peer's request off its streams' goroutines (the slow
// path), failing the test if the call whose outcome arrives on done ends first.
func awaitSlowWait(t *testing.T, ctx context.Context, m *Mesh, done <-chan error) {
	t.Helper()
	for len(m.slowSlots) == 0 {
		select {
		case err := <-done:
			t.Fatalf("the message was answered before the creation finished: %v", err)
		case <-ctx.Done():
			t.Fatal("the message never waited on the owner")
		case <-time.After(5 * time.Millisecond):
		}
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

// B7: a peer's plain message that reaches the owner after the owner committed the Spot Ready
// but before it registered the activation in its admission view waits for the activation and
// runs there; it is not refused as a stale route although the store says Ready. The wait does
// not hold the stream: another request on the same link is answered meanwhile.
func TestB7_PlainMessageDuringCreationWaitsForTheSlot(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	held := newHeldCommit("b7", true)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{wrap: held.wrap}, testNodeOpts{})
	other := sdk.InstanceIntent(rttest.LedgerType, "b7-other").WithDesc(&rttest.LedgerDesc)
	_, err := owner.m.Call(ctx, other, rttest.LedgerRecord, wrapperspb.String("o1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	target := sdk.InstanceIntent(rttest.LedgerType, "b7").WithDesc(&rttest.LedgerDesc)
	created := make(chan error, 1)
	go func() {
		_, err := owner.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
		created <- err
	}()
	awaitChan(t, ctx, held.held, "the Ready commit")
	res, err := caller.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: "b7"})
	require.NoError(t, err)
	require.Equal(t, store.StateReady, res.State, "the store says Ready")
	require.Equal(t, sdk.NodeID("owner"), res.Record.Owner.Node)
	_, ok := owner.cat.LocalSpot(target.Plain())
	require.False(t, ok, "the activation is not registered on its node yet")

	sent := make(chan error, 1)
	go func() {
		_, err := caller.m.Call(ctx, target.Plain(), rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
		sent <- err
	}()
	awaitSlowWait(t, ctx, owner.m, sent)

	// The owner's stream from the caller is not held by the wait.
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = caller.m.Call(quick, other.Plain(), rttest.LedgerRecord, wrapperspb.String("o2"), sdk.CallOptions{})
	require.NoError(t, err, "another request on the same link is answered while the message waits")
	select {
	case err := <-sent:
		t.Fatalf("the message was answered before the activation was registered: %v", err)
	default:
	}

	close(held.release)
	require.NoError(t, <-created)
	require.NoError(t, <-sent, "the message waited for the activation and ran")
	assert.Equal(t, int64(2), ledgerCount(t, ctx, caller.m, target), "each message ran once, on the owner")
}

// B7: a peer's message that waits for a creation on its owner is refused unrun when that
// creation fails, as a message for a Spot the node does not hold; the caller learns the Spot
// does not exist.
func TestB7_PlainMessageDuringAFailedCreationIsRefused(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	held := newHeldCommit("b7-fails", false)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{wrap: held.wrap}, testNodeOpts{})

	target := sdk.InstanceIntent(rttest.LedgerType, "b7-fails").WithDesc(&rttest.LedgerDesc)
	created := make(chan error, 1)
	go func() {
		_, err := owner.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
		created <- err
	}()
	awaitChan(t, ctx, held.held, "the Ready commit")
	// The caller's route names the owner (learnt from an earlier activation, say).
	caller.m.routes.put(target, "owner")
	sent := make(chan error, 1)
	go func() {
		_, err := caller.m.Call(ctx, target.Plain(), rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
		sent <- err
	}()
	awaitSlowWait(t, ctx, owner.m, sent)

	close(held.release)
	require.ErrorIs(t, <-created, sdk.ErrCreationFailed)
	err := <-sent
	require.ErrorIs(t, err, sdk.ErrNotFound, "the creation failed: the Spot does not exist")
	assert.NotErrorIs(t, err, sdk.ErrCreationFailed, "the message was refused, not run")
	_, ok := caller.m.routes.get(target)
	assert.False(t, ok, "the refused route is forgotten")
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

// B6: a request that placement sent to a node, which created the Spot and ran it there, leaves
// that node as the caller's route: the next message goes straight to it, without placement or
// a store read.
func TestB6_TheNodeThatRanARequestIsCached(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	_, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	target := sdk.InstanceIntent(rttest.LedgerType, "ran-there").WithDesc(&rttest.LedgerDesc)
	_, ok := caller.m.routes.get(target)
	require.False(t, ok)
	_, err := caller.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	route, ok := caller.m.routes.get(target)
	require.True(t, ok, "the node that ran the request is cached")
	assert.Equal(t, sdk.NodeID("owner"), route)
}
