package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// D6, C3: a create-intent message sent on a cached route to a node that no longer holds the
// Spot (it closed there) and that refuses to create it again at its activation cap was refused
// unrun: placement chooses another node for it, as for a node placement chose, rather than the
// caller seeing the cap of a node it never chose while the mesh has room.
func TestD6_AnIntentCallThatACachedNodeRefusesAtItsCapIsPlaced(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{maxActive: 1}, testNodeOpts{})

	target := sdk.InstanceIntent(rttest.LedgerType, "evicted").WithDesc(&rttest.LedgerDesc)
	where, err := caller.m.Call(ctx, target, rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	require.Equal(t, "owner", where.(*wrapperspb.StringValue).GetValue())
	route, ok := caller.m.routes.get(target)
	require.True(t, ok)
	require.Equal(t, sdk.NodeID("owner"), route)

	// The Spot closes on its node, whose one place another Spot then takes; the caller's
	// route still names the node.
	require.NoError(t, owner.m.CloseSpot(ctx, target.Plain(), sdk.CallOptions{}))
	_, err = owner.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, "fills-the-cap").WithDesc(&rttest.LedgerDesc),
		rttest.LedgerRecord, wrapperspb.String("m"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	require.False(t, owner.cat.HasRoom())
	_, ok = caller.m.routes.get(target)
	require.True(t, ok, "the caller was not told of the close")

	where, err = caller.m.Call(ctx, target, rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err, "the node at its cap refused the creation unrun: placement chose another")
	assert.Equal(t, "caller", where.(*wrapperspb.StringValue).GetValue())
}

// C1: a node refuses a message for another node's Entry Spot, which reached it by that node's
// endpoint (a node that ended, whose address this node took), as a stale route that names
// both nodes. It is the runtime's refusal of an unrun message, not an application error.
func TestC1_AMessageForAnotherNodesEntrySpotIsAStaleRoute(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{beacon: true}, testNodeOpts{beacon: true})
	caller.m.tr.Connect("ended", owner.m.Endpoint())
	awaitPeerState(t, ctx, caller.m, "ended", sdk.PeerStateReady)

	_, err := caller.m.Call(ctx, sdk.EntryTarget(rttest.BeaconType, "ended").WithDesc(&rttest.BeaconDesc), "Spawn",
		wrapperspb.String("m"), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrStaleRoute)
	var app *sdk.AppError
	assert.False(t, errors.As(err, &app), "a refusal of the runtime's, not the handler's error: %v", err)
	assert.ErrorContains(t, err, "owner")
	assert.ErrorContains(t, err, "ended")
}

// K5, B3: an Actor whose Spot's owner has ended (its lease is gone, the Spot's record not yet
// reclaimed) is unavailable, as its Spot is, and as an Actor of an ended node's Entry Spot is:
// not missing, which only the reclaim makes it.
func TestK5_AnActorOfASpotWhoseOwnerEndedIsUnavailableNotMissing(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner := registerTestNodeWith(t, endpoints, "owner", testNodeOpts{beacon: true})
	require.NoError(t, owner.m.Start(ctx, owner.st, owner.reg, owner.cat, serving))
	// The caller joins without watching the membership or reclaiming: the ended owner's records
	// stay as they are.
	caller := registerTestNodeWith(t, endpoints, "caller", testNodeOpts{beacon: true})
	_, _, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	awaitPeerState(t, ctx, caller.m, "owner", sdk.PeerStateReady)

	spawned, err := caller.m.Call(ctx, sdk.EntryTarget(rttest.BeaconType, "owner").WithDesc(&rttest.BeaconDesc), "Spawn",
		wrapperspb.String("m"), sdk.CallOptions{})
	require.NoError(t, err)
	require.Equal(t, "ok", spawned.(*wrapperspb.StringValue).GetValue())
	host := sdk.InstanceIntent(rttest.LedgerType, "host").WithDesc(&rttest.LedgerDesc)
	_, err = caller.m.Call(ctx, host, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	actor := sdk.ActorTarget(rttest.MarkType, "m").WithDesc(&rttest.MarkDesc)
	require.NoError(t, caller.m.MoveActor(ctx, actor, host.Plain(), sdk.CallOptions{}))
	where, err := caller.m.Call(ctx, actor, rttest.MarkWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err)
	require.Equal(t, "owner", where.(*wrapperspb.StringValue).GetValue())
	caller.m.routes.drop(actor, "owner") // the caller reads where the Actor is from the store

	// The owner ends as at a crash: its process stops answering, and its lease ends.
	require.NoError(t, owner.m.Close())
	require.NoError(t, owner.reg.Revoke(ctx))
	res, err := caller.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: "host"})
	require.NoError(t, err)
	require.Equal(t, store.StateUnavailable, res.State)

	_, err = caller.m.Call(ctx, host.Plain(), rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "the Spot is unavailable")
	_, err = caller.m.Call(ctx, actor, rttest.MarkWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "its Actor is unavailable too")
	assert.NotErrorIs(t, err, sdk.ErrNotFound)
}

// B6: a caller whose own deadline ends its call to a Spot's owner learns nothing of the route:
// the route stays cached, so that callers that give up on a slow owner do not send the next
// callers to the store.
func TestB6_ACallThatTheCallersDeadlineEndsKeepsTheRoute(t *testing.T) {
	ctx, caller, target := routedToOwner(t, "slow")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := caller.m.Call(short, target.Plain(), rttest.LedgerSleep, wrapperspb.Int64(10_000), sdk.CallOptions{})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	route, ok := caller.m.routes.get(target)
	require.True(t, ok, "the caller's deadline says nothing of the route")
	assert.Equal(t, sdk.NodeID("owner"), route)

	short, cancel = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := caller.m.Call(short, target.Plain(), rttest.LedgerSleep, wrapperspb.Int64(10_000), sdk.CallOptions{})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	_, ok = caller.m.routes.get(target)
	assert.True(t, ok, "nor does the caller's cancellation")
}

// D6, C3: a create-intent message that the node placement chose refuses unrun as not serving
// (it began a relocation or a drain that its published state does not show yet) is placed on
// another node: it never ran, so placing it again is no retry.
func TestD6_AnIntentCallThatAPlacedNodeRefusesAsNotServingIsPlacedElsewhere(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	id := placedOn(t, caller.m, "owner")
	owner.cat.SetRelocating(true) // its descriptor still says Serving

	where, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc),
		rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err, "the chosen node refused the creation unrun: placement chose another")
	assert.Equal(t, "caller", where.(*wrapperspb.StringValue).GetValue())
}

// D6: when every node placement may choose refuses a create-intent message unrun as not
// serving, the caller gets that refusal, not a capacity error.
func TestD6_AnIntentCallThatEveryNodeRefusesAsNotServingSaysSo(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	id := placedOn(t, caller.m, "owner")
	owner.cat.SetRelocating(true)
	caller.cat.SetRelocating(true)

	_, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc),
		rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrNotServing)
	var ce *sdk.CapacityError
	assert.False(t, errors.As(err, &ce), "not a capacity error: %v", err)
}

// placedOn returns an ID of a Ledger Spot that m's placement puts on node.
func placedOn(t *testing.T, m *Mesh, node sdk.NodeID) string {
	t.Helper()
	return placedOnType(t, m, rttest.LedgerType, node)
}

// D6, C3: an explicit create that the node placement chose, this one or a remote one, refuses
// unrun as not serving (it began a relocation that its state does not show yet) is placed on
// another node, as a create-intent call is.
func TestD6_AnExplicitCreateThatThePlacedNodeRefusesAsNotServingIsPlacedElsewhere(t *testing.T) {
	for _, name := range []sdk.NodeID{"caller", "owner"} {
		t.Run(string(name), func(t *testing.T) {
			endpoints, ctx := startEtcd(t)
			owner, caller := startPair(t, ctx, endpoints, testNodeOpts{user: true}, testNodeOpts{user: true})
			refuser, other := caller, owner
			if name == "owner" {
				refuser, other = owner, caller
			}
			id := placedOnType(t, caller.m, rttest.UserLedgerType, name)
			refuser.cat.SetRelocating(true) // its state still says Serving

			target := sdk.UserTarget(rttest.UserLedgerType, id).WithDesc(&rttest.UserLedgerDesc)
			require.NoError(t, caller.m.Create(ctx, target, sdk.CallOptions{}), "the chosen node refused the creation unrun: placement chose another")
			where, err := caller.m.Call(ctx, target, rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
			require.NoError(t, err)
			assert.Equal(t, string(other.m.cfg.Node), where.(*wrapperspb.StringValue).GetValue())
		})
	}
}

// placedOnType returns an ID of a Spot of type typ that m's placement puts on node.
func placedOnType(t *testing.T, m *Mesh, typ string, node sdk.NodeID) string {
	t.Helper()
	for i := range 1000 {
		id := fmt.Sprint("placed-", i)
		if got, err := m.place(typ, id, refusals{}); err == nil && got == node {
			return id
		}
	}
	t.Fatalf("placement never chose node %s", node)
	return ""
}

// routedToOwner starts a pair of nodes and creates the Ledger Spot id on the one named owner,
// which the caller's route cache then names.
func routedToOwner(t *testing.T, id string) (context.Context, *testNode, sdk.Target) {
	t.Helper()
	endpoints, ctx := startEtcd(t)
	_, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	target := sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
	_, err := caller.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	route, ok := caller.m.routes.get(target)
	require.True(t, ok)
	require.Equal(t, sdk.NodeID("owner"), route)
	return ctx, caller, target
}

// deadlinePassed is a context whose deadline has passed although its timer has not fired yet:
// its Err is still nil.
type deadlinePassed struct{ context.Context }

func (deadlinePassed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// B6: a call whose deadline has passed before its context's timer fired ends with
// DeadlineExceeded from the transport, and keeps the cached route as a call its context ended
// does.
func TestB6_ACallWhoseDeadlinePassedBeforeItsTimerKeepsTheRoute(t *testing.T) {
	ctx, caller, target := routedToOwner(t, "late")
	_, err := caller.m.Call(deadlinePassed{ctx}, target.Plain(), rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	route, ok := caller.m.routes.get(target)
	require.True(t, ok, "the caller's deadline says nothing of the route")
	assert.Equal(t, sdk.NodeID("owner"), route)
}

// B6, C3: a message that two broken peers redirect to each other ends at the hop bound as a
// stale route, and the caller forgets the route that the last redirect left cached: its next
// message reads the owner from the store and runs there, rather than starting from the loop
// again.
func TestB6_ARedirectLoopEndedByTheHopBoundDropsTheRoute(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	var sent atomic.Int64
	for _, loop := range [][2]sdk.NodeID{{"ping", "pong"}, {"pong", "ping"}} {
		to := loop[1]
		// An Object Server hosting no type: placement never chooses it.
		answeringPeer(t, ctx, endpoints, &storepb.NodeDescriptor{NodeId: string(loop[0]), Roles: RoleObjectServer, Weight: 1,
			State: uint32(sdk.RuntimeStateServing)}, func(*wire.Request) *wire.Reply {
			sent.Add(1)
			return &wire.Reply{Redirect: string(to), Refused: true}
		})
		awaitPeerState(t, ctx, caller.m, loop[0], sdk.PeerStateReady)
	}
	looped := staleRoute(t, ctx, caller, owner, "looped", "ping")

	_, err := caller.m.Call(ctx, looped.Plain(), rttest.LedgerRecord, wrapperspb.String("lost"), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrStaleRoute)
	assert.Equal(t, int64(maxHops), sent.Load(), "the hop bound ended the loop")
	_, cached := caller.m.routes.get(looped)
	assert.False(t, cached, "the route the loop left is forgotten")
	requireRunsOnOwner(t, ctx, caller, owner, looped)
}

// B5, C3: a create-intent message for a Spot whose record names a node that is shutting down
// (its peers see it draining, its record still says Ready there) reaches that node by a
// redirect of the node placement chose, or by this node's own read of the record, and the
// node refuses it unrun as not serving. Another node is tried (the Spot may have moved on by
// the time it reads the record), and when its read leads to the same node, that node's
// refusal is the answer: none creates the Spot while its record names an owner, and the
// draining node is not asked again through every other node.
func TestB5_AnIntentCallThatTheRecordsOwnerRefusesAsNotServingCreatesNothingElsewhere(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	caller := registerTestNode(t, endpoints, "caller")
	require.NoError(t, caller.m.Start(ctx, caller.st, caller.reg, caller.cat, serving))
	other := registerTestNode(t, endpoints, "other")
	require.NoError(t, other.m.Start(ctx, other.st, other.reg, other.cat, serving))
	awaitPeerState(t, ctx, caller.m, "other", sdk.PeerStateReady)
	var refused atomic.Int64
	reg := answeringPeer(t, ctx, endpoints, &storepb.NodeDescriptor{NodeId: "draining", Roles: RoleObjectServer, Weight: 1,
		SpotTypes: []string{rttest.LedgerType}, State: uint32(sdk.RuntimeStateDraining)}, func(*wire.Request) *wire.Reply {
		refused.Add(1)
		return refusedReply(fmt.Errorf("%w: node draining is closing its connections and did not run the request", sdk.ErrNotServing))
	})
	awaitPeerState(t, ctx, caller.m, "draining", sdk.PeerStateReady)
	id := placedOn(t, caller.m, "other")
	res, err := caller.st.Reserve(ctx, store.SpotKey{Type: rttest.LedgerType, ID: id}, sdk.KindInstance, reg.Owner())
	require.NoError(t, err)
	require.True(t, res.Won)
	_, err = caller.st.CommitReady(ctx, res.Reservation)
	require.NoError(t, err)

	_, err = caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc),
		rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrNotServing)
	assert.ErrorContains(t, err, "draining")
	assert.Equal(t, int64(1), refused.Load(), "the owner refused it once: the next node's read led there again")
	look, err := caller.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: id})
	require.NoError(t, err)
	assert.Equal(t, reg.Owner(), look.Record.Owner, "no node created the Spot while its record named an owner")
	assert.Equal(t, store.PhaseReady, look.Record.Phase)
}

// D6, C3: when the nodes placement may choose refuse a create-intent message unrun as not
// serving and the one left that could take it cannot be reached, the caller learns both: no
// node hosting the type is reachable (what placement would have answered had their published
// states been current), and what the last refusal said.
func TestD6_AnIntentCallWithNoNodeLeftAndOneUnreachableSaysBoth(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	// "far" is Serving and hosts the Ledger, but nothing listens at its endpoint.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	far, err := newTestStore(t, endpoints).Register(ctx, &storepb.NodeDescriptor{NodeId: "far", Roles: RoleObjectServer, Weight: 1,
		SpotTypes: []string{rttest.LedgerType}, Endpoint: l.Addr().String(), State: uint32(sdk.RuntimeStateServing)},
		store.LeaseOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = far.Close(context.Background()) })
	require.Eventually(t, func() bool { return slices.Contains(memberIDs(caller.m), "far") }, 10*time.Second, 5*time.Millisecond)
	require.NotEqual(t, sdk.PeerStateReady, caller.m.tr.PeerState("far"))
	owner.cat.SetRelocating(true) // both still say Serving
	caller.cat.SetRelocating(true)

	_, err = caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, "nowhere").WithDesc(&rttest.LedgerDesc),
		rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "a node that could take it is not reachable")
	assert.ErrorContains(t, err, "reachable")
	assert.ErrorContains(t, err, "relocating its objects", "the last refusal is named")
}

// F7, D6, C3: a create-intent message for a Spot that has moved (its record names its new
// owner) can still reach the node it left, by the redirect of a node that read the record
// before the move; that node, relocating, refuses it unrun as not serving. The caller tries
// another node, which reads the record as it is now: the message runs once, on the new owner.
func TestF7_AnIntentCallThatTheNodeASpotLeftRefusesFindsItOnItsNewOwner(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	left := registerTestNode(t, endpoints, "left")
	require.NoError(t, left.m.Start(ctx, left.st, left.reg, left.cat, serving))
	awaitPeerState(t, ctx, caller.m, "left", sdk.PeerStateReady)
	left.cat.SetRelocating(true) // its published state still says Serving
	// "stale" read the record before the move: it redirects every message to "left".
	answeringPeer(t, ctx, endpoints, &storepb.NodeDescriptor{NodeId: "stale", Roles: RoleObjectServer, Weight: 1,
		SpotTypes: []string{rttest.LedgerType}, State: uint32(sdk.RuntimeStateServing)}, func(*wire.Request) *wire.Reply {
		return &wire.Reply{Redirect: "left", Refused: true}
	})
	awaitPeerState(t, ctx, caller.m, "stale", sdk.PeerStateReady)
	id := placedOn(t, caller.m, "stale")
	target := sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
	_, err := owner.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	where, err := caller.m.Call(ctx, target, rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err, "the Spot was found on its new owner")
	assert.Equal(t, "owner", where.(*wrapperspb.StringValue).GetValue())
	assert.Equal(t, int64(1), ledgerCount(t, ctx, caller.m, target.Plain()), "no second Spot was created")
}

// closesOwnerOnReserve is a store whose first reservation of the armed ID that finds the Spot
// owned runs the armed func before it answers: the node reads an owner that then closes the
// Spot.
type closesOwnerOnReserve struct {
	*store.Etcd
	armed atomic.Pointer[reserveHook]
}

type reserveHook struct {
	id   string
	then func()
}

func (s *closesOwnerOnReserve) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *closesOwnerOnReserve) Reserve(ctx context.Context, key store.SpotKey, kind sdk.SpotKind, owner store.Owner) (store.ReserveResult, error) {
	r, err := s.Etcd.Reserve(ctx, key, kind, owner)
	if h := s.armed.Load(); h != nil && err == nil && !r.Won && key.ID == h.id && s.armed.CompareAndSwap(h, nil) {
		h.then()
	}
	return r, err
}

// B5, D4, C3: the node placement chose reads a new Spot's record, which names an owner that is
// closing, and redirects the message there; the owner has closed the Spot meanwhile and refuses
// to create it again as not serving. With no other node left, the chosen node is asked again:
// it finds the record released and creates the Spot, rather than the owner's refusal being the
// answer.
func TestB5_AnIntentCallLedToAnOwnerThatHasJustClosedTheSpotIsCreatedWhereItWasPlaced(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	onReserve := &closesOwnerOnReserve{}
	chosen := registerTestNodeWith(t, endpoints, "chosen", testNodeOpts{wrap: onReserve.wrap})
	require.NoError(t, chosen.m.Start(ctx, chosen.st, chosen.reg, chosen.cat, serving))
	closing := startMember(t, ctx, endpoints, "closing")
	caller := registerTestNode(t, endpoints, "caller")
	// The caller places nothing on itself.
	require.NoError(t, caller.m.Start(ctx, caller.st, caller.reg, caller.cat, func() sdk.RuntimeState { return sdk.RuntimeStateDraining }))
	awaitPeerState(t, ctx, caller.m, "chosen", sdk.PeerStateReady)
	awaitPeerState(t, ctx, caller.m, "closing", sdk.PeerStateReady)
	awaitPeerState(t, ctx, chosen.m, "closing", sdk.PeerStateReady)
	id := placedOn(t, caller.m, "chosen")
	target := sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
	_, err := closing.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "closing"})
	require.NoError(t, err)
	onReserve.armed.Store(&reserveHook{id: id, then: func() { assert.NoError(t, closing.cat.Close(ctx)) }})

	where, err := caller.m.Call(ctx, target, rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err, "created on the node placement chose")
	assert.Equal(t, "chosen", where.(*wrapperspb.StringValue).GetValue())
	assert.Nil(t, onReserve.armed.Load(), "the chosen node read the closing owner's record")
	assert.Equal(t, int64(0), ledgerCount(t, ctx, caller.m, target), "a fresh Spot")
}

// reserveCounter is a store that counts the reservations of one Spot ID.
type reserveCounter struct {
	*store.Etcd
	id string
	n  atomic.Int64
}

func (s *reserveCounter) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *reserveCounter) Reserve(ctx context.Context, key store.SpotKey, kind sdk.SpotKind, owner store.Owner) (store.ReserveResult, error) {
	if key.ID == s.id {
		s.n.Add(1)
	}
	return s.Etcd.Reserve(ctx, key, kind, owner)
}

// B5, F8, C3: a create-intent message of a closing node for a Spot that the node's close
// force-stopped (its record stays, naming the node, until the lease ends) is placed on another
// node, whose read of the record leads back; the node refuses it as not serving, and with no
// other node left the other node is asked once more, whose read leads back again: the closing
// node's refusal is then the answer, as it is when the refuser is another node, rather than
// the message going round until the hop bound.
func TestB5_AnIntentCallOfAClosingNodeForItsForceStoppedSpotGetsItsRefusal(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	const id = "forced"
	counter := &reserveCounter{id: id}
	other := registerTestNodeWith(t, endpoints, "other", testNodeOpts{wrap: counter.wrap})
	require.NoError(t, other.m.Start(ctx, other.st, other.reg, other.cat, serving))
	var state atomic.Uint32
	state.Store(uint32(sdk.RuntimeStateServing))
	closing := registerTestNode(t, endpoints, "closing")
	require.NoError(t, closing.m.Start(ctx, closing.st, closing.reg, closing.cat, func() sdk.RuntimeState { return sdk.RuntimeState(state.Load()) }))
	awaitPeerState(t, ctx, closing.m, "other", sdk.PeerStateReady)
	awaitPeerState(t, ctx, other.m, "closing", sdk.PeerStateReady)

	target := sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
	_, err := closing.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "closing"})
	require.NoError(t, err)
	sleeping := make(chan struct{})
	go func() {
		defer close(sleeping)
		_, _ = closing.m.Call(ctx, target.Plain(), rttest.LedgerSleep, wrapperspb.Int64(3000), sdk.CallOptions{})
	}()
	t.Cleanup(func() { <-sleeping })
	time.Sleep(100 * time.Millisecond)
	state.Store(uint32(sdk.RuntimeStateDraining)) // as the host's shutdown does before the catalog closes
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, closing.cat.Close(cctx), catalog.ErrForceStopped)
	res, err := closing.st.Lookup(ctx, store.SpotKey{Type: rttest.LedgerType, ID: id})
	require.NoError(t, err)
	require.Equal(t, store.StateReady, res.State)
	before := counter.n.Load()

	_, err = closing.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrNotServing, "the closing node's own refusal is the answer")
	assert.NotErrorIs(t, err, sdk.ErrStaleRoute)
	assert.LessOrEqual(t, counter.n.Load()-before, int64(2), "the other node is asked twice at most")
}

// B5, D6, C3: the node placement chose refuses a new Spot's message as not serving for a
// moment (it is starting), while another caller's message creates the Spot there. The
// message is placed elsewhere, whose read of the record leads back to that node: it is asked
// again and runs there, rather than its first refusal being taken for the answer.
func TestB5_AChosenNodesPassingRefusalIsNotTheAnswerForTheSpotItServesNow(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	_, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	var fresh atomic.Pointer[store.Registration]
	var asked atomic.Int64
	var id string
	fresh.Store(answeringPeer(t, ctx, endpoints, &storepb.NodeDescriptor{NodeId: "fresh", Roles: RoleObjectServer, Weight: 1,
		SpotTypes: []string{rttest.LedgerType}, State: uint32(sdk.RuntimeStateServing)}, func(*wire.Request) *wire.Reply {
		if asked.Add(1) > 1 {
			b, err := proto.Marshal(wrapperspb.String("fresh"))
			if err != nil {
				return refusedReply(err)
			}
			return &wire.Reply{Payload: b}
		}
		// Another caller's creation lands here meanwhile; this message is refused unrun.
		res, err := caller.st.Reserve(ctx, store.SpotKey{Type: rttest.LedgerType, ID: id}, sdk.KindInstance, fresh.Load().Owner())
		if err == nil && res.Won {
			_, err = caller.st.CommitReady(ctx, res.Reservation)
		}
		if err != nil {
			return refusedReply(err)
		}
		return refusedReply(fmt.Errorf("%w: node fresh is starting", sdk.ErrNotServing))
	}))
	awaitPeerState(t, ctx, caller.m, "fresh", sdk.PeerStateReady)
	id = placedOn(t, caller.m, "fresh")

	where, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc),
		rttest.LedgerWhere, wrapperspb.String(""), sdk.CallOptions{})
	require.NoError(t, err, "the Spot serves on the node that refused a moment before")
	assert.Equal(t, "fresh", where.(*wrapperspb.StringValue).GetValue())
	assert.Equal(t, int64(2), asked.Load())
}
