package mesh

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/rttest"
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
