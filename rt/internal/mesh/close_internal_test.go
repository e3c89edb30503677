package mesh

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// F8: a node that closes answers the requests it took in; a message for an object that moved
// from it, whose caller's cached route still names it, goes where the store says: the caller
// sees neither the close nor a lost connection.
func TestF8_AClosingNodeAnswersWhatItTookInAndItsCallersFindTheOwner(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	factoryHeld := make(chan struct{})
	letGo := make(chan struct{})
	release := sync.OnceFunc(func() { close(letGo) })
	defer release()
	old := registerTestNodeWith(t, endpoints, "old", testNodeOpts{built: func(id string) {
		if id == "holds-the-close" {
			close(factoryHeld)
			<-letGo
		}
	}})
	require.NoError(t, old.m.Start(ctx, old.st, old.reg, old.cat, serving))
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	awaitPeerState(t, ctx, caller.m, "old", sdk.PeerStateReady)

	moved := staleRoute(t, ctx, caller, owner, "moved", "old")

	// A creation on the old node holds its close open: the node answers what it took in.
	creation := make(chan error, 1)
	go func() {
		_, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, "holds-the-close").WithDesc(&rttest.LedgerDesc),
			rttest.LedgerRecord, wrapperspb.String("m"), sdk.CallOptions{Node: "old"})
		creation <- err
	}()
	awaitChan(t, ctx, factoryHeld, "the creation on the old node")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		assert.NoError(t, old.m.Close())
	}()
	// The old node tells its peers that it closes: the caller's link sends nothing more.
	for caller.m.tr.PeerState("old") == sdk.PeerStateReady {
		require.NoError(t, ctx.Err())
		time.Sleep(time.Millisecond)
	}

	requireRunsOnOwner(t, ctx, caller, owner, moved)

	release()
	require.NoError(t, <-creation, "the creation the old node took in before it closed was answered")
	awaitChan(t, ctx, closed, "the old node's close")
}

// C3: a message sent on a cached route to a node that refuses it unrun because it does not
// serve (here: it is starting) goes where the store says, once.
func TestC3_AMessageANotServingCachedOwnerRefusedGoesWhereTheStoreSays(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	registerTestNode(t, endpoints, "starting") // registered and listening, its mesh not started
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	awaitPeerState(t, ctx, caller.m, "starting", sdk.PeerStateReady)

	moved := staleRoute(t, ctx, caller, owner, "elsewhere", "starting")
	requireRunsOnOwner(t, ctx, caller, owner, moved)
}

// C3, F2: a create-intent message sent on a cached route to a node whose catalog is closing,
// which refuses it unrun as not serving, goes where the store says, once; also when placement
// would choose that node.
func TestC3_AnIntentMessageAClosingCachedOwnerRefusedGoesWhereTheStoreSays(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	closing := startMember(t, ctx, endpoints, "closing", caller)
	placedOnClosing := "elsewhere-1"
	picked, err := caller.m.place(rttest.LedgerType, placedOnClosing, refusals{})
	require.NoError(t, err)
	require.Equal(t, sdk.NodeID("closing"), picked, "placement chooses the closing node for %s", placedOnClosing)

	var moved []sdk.Target
	for _, id := range []string{"elsewhere", placedOnClosing} {
		moved = append(moved, staleRoute(t, ctx, caller, owner, id, "closing"))
	}
	require.NoError(t, closing.cat.Close(ctx))
	for _, target := range moved {
		_, err := caller.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
		require.NoError(t, err, "%v: the message went to the owner the store names", target)
		route, ok := caller.m.routes.get(target)
		require.True(t, ok)
		assert.Equal(t, owner.m.cfg.Node, route, "%v: the route names the owner now", target)
		assert.Equal(t, int64(2), ledgerCount(t, ctx, caller.m, target), "%v: each message ran once, on the owner", target)
	}
}

// D4, F8: a local intent message whose Spot this node's shutdown closed between its resolve
// and its delivery is refused there unrun, and the router places it on a node that serves,
// rather than answering that the node is closing.
func TestD4_ALocalIntentMessageWhoseSpotTheShutdownClosedGoesElsewhere(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	closing, other := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	awaitPeerState(t, ctx, closing.m, other.m.cfg.Node, sdk.PeerStateReady)
	target := sdk.InstanceIntent(rttest.LedgerType, "shut").WithDesc(&rttest.LedgerDesc)
	_, err := closing.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: closing.m.cfg.Node})
	require.NoError(t, err)
	route, ok := closing.cat.LocalSpot(target)
	require.True(t, ok)

	require.NoError(t, closing.cat.Close(ctx))
	_, next, err := closing.m.deliverHere(ctx, target, hop{kind: hopHere, route: route}, rttest.LedgerRecord, wrapperspb.String("m2"), false)
	require.Equal(t, hereRefused, next, "refused unrun, so the router looks again: %v", err)
	_, err = closing.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
	require.NoError(t, err, "placed on the node that serves")
	_, onOther := other.cat.LocalSpot(target)
	assert.True(t, onOther, "created on the other node")
	assert.Equal(t, int64(1), ledgerCount(t, ctx, other.m, target), "a fresh Spot; the refused message did not run")
}

// staleRoute creates the Ledger id on owner through caller, whose cached route then names
// stale instead, and returns its target.
func staleRoute(t *testing.T, ctx context.Context, caller, owner *testNode, id string, stale sdk.NodeID) sdk.Target {
	t.Helper()
	target := sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
	_, err := caller.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: owner.m.cfg.Node})
	require.NoError(t, err)
	caller.m.routes.put(target, stale)
	return target
}

// requireRunsOnOwner sends a second message to target through caller's stale route: it runs
// once, on owner, which the caller's route names afterwards.
func requireRunsOnOwner(t *testing.T, ctx context.Context, caller, owner *testNode, target sdk.Target) {
	t.Helper()
	_, err := caller.m.Call(ctx, target.Plain(), rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
	require.NoError(t, err, "the message went to the owner the store names")
	route, ok := caller.m.routes.get(target)
	require.True(t, ok)
	assert.Equal(t, owner.m.cfg.Node, route, "the route names the owner now")
	assert.Equal(t, int64(2), ledgerCount(t, ctx, caller.m, target), "each message ran once, on the owner")
}

// B6: a route cached to a node that has left the mesh (a reply of its came in just before it
// left, and the route was written after the mesh forgot the node's routes) sends nothing
// there: the message never left, so the store says where the object is, and it runs once,
// on its owner.
func TestB6_ACachedRouteToANodeThatLeftIsResolvedAgain(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	moved := staleRoute(t, ctx, caller, owner, "left", "gone") // "gone": no member, no link
	requireRunsOnOwner(t, ctx, caller, owner, moved)
}

// heldMove is a store between a catalog and etcd that holds the relocation commit of one Spot
// ID until the test releases it: the Spot's relocation unit is under way meanwhile.
type heldMove struct {
	*store.Etcd
	id      string
	held    chan struct{} // closed once the commit of id is held
	release chan struct{}
	once    sync.Once
}

func (h *heldMove) wrap(st *store.Etcd) store.Store {
	h.Etcd = st
	return h
}

func (h *heldMove) MoveSpot(ctx context.Context, key store.SpotKey, rec store.Record, to store.Owner, attempt uint64) (store.Record, error) {
	if key.ID == h.id {
		h.once.Do(func() { close(h.held) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return store.Record{}, ctx.Err()
		}
	}
	return h.Etcd.MoveSpot(ctx, key, rec, to, attempt)
}

// D3, C3: an explicit close that reaches the Spot's owner while a relocation unit moves the
// Spot away is refused there unrun once the Spot has gone (that node no longer owns it); the
// close looks for the owner again and closes the Spot where it went, rather than failing with
// a stale route.
func TestD3_ACloseThatMeetsARelocationFollowsTheSpot(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	move := &heldMove{id: "moves", held: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(move.release) })
	defer release()
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{wrap: move.wrap}, testNodeOpts{})
	target := startMember(t, ctx, endpoints, "target", owner, caller)

	spot := sdk.InstanceIntent(rttest.LedgerType, "moves").WithDesc(&rttest.LedgerDesc)
	_, err := caller.m.Call(ctx, spot, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	relocated := make(chan error, 1)
	go func() { relocated <- owner.cat.RelocateSpot(ctx, spot.Plain(), "target") }()
	awaitChan(t, ctx, move.held, "the relocation's commit")

	closed := make(chan error, 1)
	go func() { closed <- caller.m.CloseSpot(ctx, spot.Plain(), sdk.CallOptions{}) }()
	awaitSlowWait(t, ctx, owner.m, closed) // the close waits on the owner for the unit's outcome
	release()
	require.NoError(t, <-relocated)

	require.NoError(t, <-closed, "the close followed the Spot to where it went")
	res, err := caller.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: "moves"})
	require.NoError(t, err)
	assert.Equal(t, store.StateMissing, res.State, "the Spot is closed")
	_, active := target.cat.LocalSpot(spot.Plain())
	assert.False(t, active, "the Spot is closed on the node it moved to")
}

// K5, B3: an explicit close of a Spot whose owner's lease has ended fails at once with
// ErrOwnerUnavailable: only the reclaim releases it. It does not ask the node that took the
// ended owner's ID since, which owns nothing of it and would refuse it as a stale route.
func TestK5_ACloseOfASpotWhoseOwnerEndedIsUnavailable(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	old := registerTestNode(t, endpoints, "owner")
	require.NoError(t, old.m.Start(ctx, old.st, old.reg, old.cat, serving))
	// The caller watches the membership but does not reclaim: the ended owner's record stays.
	caller := registerTestNode(t, endpoints, "caller")
	_, rev, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	caller.m.watchMembership(rev)
	awaitPeerState(t, ctx, caller.m, "owner", sdk.PeerStateReady)
	spot := sdk.InstanceIntent(rttest.LedgerType, "orphan").WithDesc(&rttest.LedgerDesc)
	_, err = caller.m.Call(ctx, spot, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	// The owner ends as at a crash, and a new process registers its ID.
	require.NoError(t, old.m.Close())
	require.NoError(t, old.reg.Revoke(ctx))
	restarted := registerTestNode(t, endpoints, "owner")
	_, _, _, err = restarted.m.join(ctx, restarted.st, restarted.reg, restarted.cat, serving)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		caller.m.mu.RLock()
		n, ok := caller.m.members["owner"]
		caller.m.mu.RUnlock()
		return ok && n.Lease == restarted.reg.Owner().Lease && caller.m.tr.PeerState("owner") == sdk.PeerStateReady
	}, 10*time.Second, 5*time.Millisecond, "the caller links to the new process")

	err = caller.m.CloseSpot(ctx, spot.Plain(), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.NotErrorIs(t, err, sdk.ErrStaleRoute)
	res, err := caller.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: "orphan"})
	require.NoError(t, err)
	assert.Equal(t, store.StateUnavailable, res.State, "nothing released it")
}

// F2, F7, C2: a create-intent message that its caller places on a node (OnNode) which has
// since relocated the Spot elsewhere and may create nothing is not refused: the node it moved
// from sends it where it went. That is the answer too for a message that waited on that node
// for the move's outcome; from a caller on the node itself as from a peer.
func TestF7_AnIntentCallPlacedOnTheNodeASpotMovedFromFollowsIt(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	target := startMember(t, ctx, endpoints, "target", owner, caller)

	spot := sdk.InstanceIntent(rttest.LedgerType, "moved").WithDesc(&rttest.LedgerDesc)
	onOwner := sdk.CallOptions{Node: "owner"}
	_, err := caller.m.Call(ctx, spot, rttest.LedgerRecord, wrapperspb.String("m1"), onOwner)
	require.NoError(t, err)
	owner.cat.SetRelocating(true)
	require.NoError(t, owner.cat.RelocateSpot(ctx, spot.Plain(), "target"))
	caller.m.routes.drop(spot, "owner")
	owner.m.routes.drop(spot, "owner")

	for _, from := range []*testNode{caller, owner} {
		where, err := from.m.Call(ctx, spot, rttest.LedgerWhere, wrapperspb.String(""), onOwner)
		require.NoError(t, err, "from %s: the Spot lives on target", from.m.cfg.Node)
		assert.Equal(t, "target", where.(*wrapperspb.StringValue).GetValue(), "from %s", from.m.cfg.Node)
	}
	assert.EqualValues(t, 1, target.cat.ActiveOwned(), "the Spot that moved, and no other")
}

// F7, C2: where a Spot went is followed only to a node still in the mesh. The Spot moved on
// from there and that node left: the node it first moved from refuses the intent call as
// before, and the caller, whose route named that node, looks again and finds the Spot.
func TestF7_AnIntentCallDoesNotFollowASpotToANodeThatLeft(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	target := startMember(t, ctx, endpoints, "target", owner, caller)
	startMember(t, ctx, endpoints, "next", owner, caller, target)

	spot := sdk.InstanceIntent(rttest.LedgerType, "rolled").WithDesc(&rttest.LedgerDesc)
	_, err := caller.m.Call(ctx, spot, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	cached, ok := caller.m.routes.get(spot)
	require.True(t, ok)
	require.Equal(t, sdk.NodeID("owner"), cached)

	owner.cat.SetRelocating(true)
	require.NoError(t, owner.cat.RelocateSpot(ctx, spot.Plain(), "target"))
	target.cat.SetRelocating(true)
	require.NoError(t, target.cat.RelocateSpot(ctx, spot.Plain(), "next"))
	require.NoError(t, target.m.Close())
	require.NoError(t, target.cat.Close(context.Background()))
	require.NoError(t, target.reg.Close(context.Background()))
	require.Eventually(t, func() bool {
		owner.m.mu.RLock()
		_, member := owner.m.members["target"]
		owner.m.mu.RUnlock()
		return !member
	}, 10*time.Second, 10*time.Millisecond, "the owner sees the target leave")

	where, err := caller.m.Call(ctx, spot, rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err, "the Spot is Ready on next")
	assert.Equal(t, "next", where.(*wrapperspb.StringValue).GetValue())
}

// startMember starts the serving node id, and waits until each of peers sees it Ready.
func startMember(t *testing.T, ctx context.Context, endpoints []string, id sdk.NodeID, peers ...*testNode) *testNode {
	t.Helper()
	n := registerTestNode(t, endpoints, id)
	require.NoError(t, n.m.Start(ctx, n.st, n.reg, n.cat, serving))
	for _, p := range peers {
		awaitPeerState(t, ctx, p.m, id, sdk.PeerStateReady)
	}
	return n
}
