package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/channel"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// noSuchMethod is a method that no node's Ledger has.
const noSuchMethod = "Forgotten"

// startTrio starts the nodes "owner", "dropper" (which drops one-way messages it has no handler
// for) and "caller", all in the mesh with beacon as each one's testNodeOpts.beacon, and the
// caller linked to the other two.
func startTrio(t *testing.T, ctx context.Context, endpoints []string, beacon bool) (owner, dropper, caller *testNode) {
	t.Helper()
	drop := testNodeOpts{unhandled: sdk.UnhandledDispatchOptions{Send: sdk.UnhandledDispatchActionDrop}, beacon: beacon}
	for _, n := range []struct {
		node **testNode
		id   sdk.NodeID
		opts testNodeOpts
	}{{&owner, "owner", testNodeOpts{beacon: beacon}}, {&dropper, "dropper", drop}, {&caller, "caller", testNodeOpts{beacon: beacon}}} {
		*n.node = registerTestNodeWith(t, endpoints, n.id, n.opts)
		require.NoError(t, (*n.node).m.Start(ctx, (*n.node).st, (*n.node).reg, (*n.node).cat, serving))
	}
	awaitPeerState(t, ctx, caller.m, "owner", sdk.PeerStateReady)
	awaitPeerState(t, ctx, caller.m, "dropper", sdk.PeerStateReady)
	return owner, dropper, caller
}

// livesOnTheDropper makes the Ledger target on the dropper, and has the caller call it there,
// so that the caller caches the route to the dropper.
func livesOnTheDropper(t *testing.T, ctx context.Context, dropper, caller *testNode, target sdk.Target) {
	t.Helper()
	_, err := dropper.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("made"), sdk.CallOptions{Node: "dropper"})
	require.NoError(t, err)
	_, err = caller.m.Call(ctx, target.Plain(), rttest.LedgerRecord, wrapperspb.String("routed"), sdk.CallOptions{})
	require.NoError(t, err)
	node, cached := caller.m.routes.get(target)
	require.True(t, cached)
	require.Equal(t, sdk.NodeID("dropper"), node)
}

// B6, I1: a one-way message that a node drops as unhandled says nothing of where its object
// is. The sender caches no route to that node, so its next plain message goes to the owner the
// store names, rather than to the node that dropped the first and owns nothing.
func TestB6_AOneWayMessageDroppedAsUnhandledIsNoRoute(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, dropper, caller := startTrio(t, ctx, endpoints, false)
	target := sdk.InstanceIntent(rttest.LedgerType, "b6-dropped").WithDesc(&rttest.LedgerDesc)
	_, err := owner.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	// Create-intent, placed on the dropper, which has no handler for it and does not hold the Spot.
	require.NoError(t, caller.m.Send(ctx, target, noSuchMethod, wrapperspb.String("lost"), sdk.CallOptions{Node: "dropper"}),
		"the dropper's policy drops it: delivered, as far as the sender knows")
	assert.Equal(t, int64(1), dropper.m.unhandledCount.dropped.Load())
	_, cached := caller.m.routes.get(target)
	assert.False(t, cached, "a dropped message names no owner")

	require.NoError(t, caller.m.Send(ctx, target.Plain(), rttest.LedgerNote, wrapperspb.String("m2"), sdk.CallOptions{}))
	assert.Equal(t, int64(2), ledgerCount(t, ctx, caller.m, target), "the plain message ran on the owner")
	node, cached := caller.m.routes.get(target)
	assert.True(t, cached)
	assert.Equal(t, sdk.NodeID("owner"), node)
}

// C1: a node that does not hold the Spot a plain message names finds the route stale before it
// looks for a handler. The message is refused as sent along a stale route, not dropped by the
// unhandled-message policy at a node that owns nothing, and the sender forgets the route.
func TestC1_AStaleRouteIsFoundBeforeTheUnhandledPolicy(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, dropper, caller := startTrio(t, ctx, endpoints, false)
	target := sdk.InstanceIntent(rttest.LedgerType, "c1-moved").WithDesc(&rttest.LedgerDesc)

	// The Spot lives on the dropper first, and the caller caches the route there.
	livesOnTheDropper(t, ctx, dropper, caller, target)

	// It closes there and is made again on the owner; the caller's route still names the dropper.
	require.NoError(t, dropper.cat.CloseTarget(ctx, target.Plain()))
	_, err := owner.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m3"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	err = caller.m.Send(ctx, target.Plain(), noSuchMethod, wrapperspb.String("m4"), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrStaleRoute, "the dropper owns nothing: the route is stale, the policy does not apply")
	assert.Zero(t, dropper.m.unhandledCount.dropped.Load(), "nothing was dropped")
	_, cached := caller.m.routes.get(target)
	assert.False(t, cached, "the stale route is forgotten")

	require.NoError(t, caller.m.Send(ctx, target.Plain(), rttest.LedgerNote, wrapperspb.String("m5"), sdk.CallOptions{}))
	assert.Equal(t, int64(2), ledgerCount(t, ctx, caller.m, target), "the next message runs on the owner")
}

// B6, C1: the owner of a Spot that drops a plain one-way message as unhandled is still its
// owner: the sender keeps the route it cached, and its next message goes there with no store
// read.
func TestB6_AMessageTheOwnerDropsKeepsTheRoute(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	_, dropper, caller := startTrio(t, ctx, endpoints, false)
	target := sdk.InstanceIntent(rttest.LedgerType, "b6-owner-drops").WithDesc(&rttest.LedgerDesc)
	livesOnTheDropper(t, ctx, dropper, caller, target)

	require.NoError(t, caller.m.Send(ctx, target.Plain(), noSuchMethod, wrapperspb.String("m3"), sdk.CallOptions{}))
	assert.Equal(t, int64(1), dropper.m.unhandledCount.dropped.Load(), "the owner dropped it")
	node, cached := caller.m.routes.get(target)
	assert.True(t, cached, "the owner's route stays")
	assert.Equal(t, sdk.NodeID("dropper"), node)
}

// answerWith is a peer that is no node of ours: it answers every request with what the
// function makes of it.
type answerWith func(*wire.Request) *wire.Reply

func (a answerWith) Handle(_ context.Context, _ sdk.NodeID, req *wire.Request, rep transport.Replier) {
	r := a(req)
	wire.RecycleInboundRequest(req)
	rep.Reply(r)
}

// answeringPeer registers the node desc.NodeId, described by desc and with memberships ms,
// whose transport answers every request with answer, and returns its registration.
func answeringPeer(t *testing.T, ctx context.Context, endpoints []string, desc *storepb.NodeDescriptor, answer answerWith, ms ...store.ChannelMembership) *store.Registration {
	t.Helper()
	tr, err := transport.New(transport.Config{Node: sdk.NodeID(desc.NodeId), ListenAddr: "127.0.0.1:0"}, answer)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	desc.Endpoint = tr.Addr()
	reg, err := newTestStore(t, endpoints).Register(ctx, desc, store.LeaseOptions{TTL: 5 * time.Second}, ms...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	return reg
}

// droppingPeer registers the node "broken", described by desc and with memberships ms, whose
// transport answers every request as a dropped one-way message.
func droppingPeer(t *testing.T, ctx context.Context, endpoints []string, desc *storepb.NodeDescriptor, ms ...store.ChannelMembership) {
	t.Helper()
	desc.NodeId, desc.Weight, desc.State = "broken", 1, uint32(sdk.RuntimeStateServing)
	answeringPeer(t, ctx, endpoints, desc, func(*wire.Request) *wire.Reply { return &wire.Reply{Dropped: true} }, ms...)
}

// A peer that acknowledges a request as a dropped one-way message is broken: the call fails
// with an error that says so, rather than returning no reply and no error.
func TestARequestAnsweredAsDroppedFails(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	caller := registerTestNode(t, endpoints, "caller")
	require.NoError(t, caller.m.Start(ctx, caller.st, caller.reg, caller.cat, serving))
	droppingPeer(t, ctx, endpoints, &storepb.NodeDescriptor{Roles: RoleObjectServer, SpotTypes: []string{rttest.LedgerType}})
	awaitPeerState(t, ctx, caller.m, "broken", sdk.PeerStateReady)

	target := sdk.InstanceIntent(rttest.LedgerType, "garbage").WithDesc(&rttest.LedgerDesc)
	out, err := caller.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "broken"})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "dropped one-way message")
	assert.Nil(t, out)
	require.NoError(t, caller.m.Send(ctx, target, rttest.LedgerNote, wrapperspb.String("m2"), sdk.CallOptions{Node: "broken"}),
		"a one-way message may be acknowledged so")
}

// I1, G6: a ClientServer channel call answered as a dropped one-way message fails as a Spot
// call so answered does, with ErrInvalidArgument, rather than returning an empty reply as the
// server's answer; a one-way channel message may be acknowledged so.
func TestI1_AChannelCallAnsweredAsDroppedFails(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	caller := registerTestNode(t, endpoints, "caller")
	caller.m.cfg.Channels = &channel.Registry{}
	require.NoError(t, caller.m.Start(ctx, caller.st, caller.reg, caller.cat, serving))
	droppingPeer(t, ctx, endpoints, &storepb.NodeDescriptor{},
		store.ChannelMembership{Channel: rttest.WhoChannel, Role: store.ChannelServer, Kind: sdk.ChannelClientServer, Weight: 1})
	require.Eventually(t, func() bool {
		st, err := caller.m.ClientServerStatus(rttest.WhoChannel)
		return err == nil && st.ReadyTargetCount == 1
	}, 15*time.Second, 10*time.Millisecond)

	out, err := caller.m.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoWho, wrapperspb.String("?"), false, sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "dropped one-way message")
	assert.Nil(t, out)
	_, err = caller.m.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoNote, wrapperspb.String("n"), true, sdk.CallOptions{})
	require.NoError(t, err, "a one-way message may be acknowledged so")
}

// C1: a one-way message to an Actor that this node no longer holds, for a method this node has
// no handler for, came along a stale route: it is redirected to where the Actor went, not
// dropped here by the unhandled-message policy, so the Actor's node applies its own.
func TestC1_AnActorsStaleRouteIsFoundBeforeTheUnhandledPolicy(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	_, dropper, caller := startTrio(t, ctx, endpoints, true)
	beaconAt := func(node sdk.NodeID) sdk.Target { return sdk.EntryTarget(rttest.BeaconType, node) }
	mark := sdk.ActorTarget(rttest.MarkType, "c1-mark").WithDesc(&rttest.MarkDesc)
	out, err := caller.m.Call(ctx, beaconAt("dropper"), "Spawn", wrapperspb.String(mark.ID()), sdk.CallOptions{})
	require.NoError(t, err)
	require.Equal(t, "ok", out.(*wrapperspb.StringValue).GetValue())
	_, err = caller.m.Call(ctx, mark, rttest.MarkRecord, wrapperspb.String("m1"), sdk.CallOptions{})
	require.NoError(t, err)
	node, cached := caller.m.routes.get(mark)
	require.True(t, cached)
	require.Equal(t, sdk.NodeID("dropper"), node)

	require.NoError(t, dropper.cat.MoveActorTo(ctx, mark, beaconAt("owner")))
	err = caller.m.Send(ctx, mark, noSuchMethod, wrapperspb.String("m2"), sdk.CallOptions{})
	require.ErrorIs(t, err, sdk.ErrUnhandled, "the Actor's node refuses it, as its policy says")
	assert.Zero(t, dropper.m.unhandledCount.dropped.Load(), "the node it left dropped nothing")
}
