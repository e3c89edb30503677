package mesh

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRendezvousSharesFollowWeights(t *testing.T) {
	nodes := []sdk.NodeID{"a", "b", "c", "d"}
	weights := []uint32{1, 1, 2, 4}
	wins := make([]int, len(nodes))
	const ids = 40_000
	for i := range ids {
		best, bestScore := -1, math.Inf(-1)
		for n, node := range nodes {
			if s := score("T", fmt.Sprint(i), node, weights[n]); s > bestScore {
				best, bestScore = n, s
			}
		}
		wins[best]++
	}
	for n := range nodes {
		assert.InDelta(t, float64(weights[n])/8, float64(wins[n])/ids, 0.01, "node %s", nodes[n])
	}
}

func TestRendezvousIsTheSameEverywhere(t *testing.T) {
	// The score depends only on its inputs: every process ranks the nodes of an ID alike.
	assert.Equal(t, score("chat.Room", "r1", "node-a", 3), score("chat.Room", "r1", "node-a", 3))
	assert.NotEqual(t, score("chat.Room", "r1", "node-a", 3), score("chat.Room", "r2", "node-a", 3))
	assert.Greater(t, score("T", "x", "n", 2), 0.0)
}

func TestRouteCacheIsBoundedAndDropsByOwner(t *testing.T) {
	var c routeCache
	c.init(10)
	for i := range 25 {
		c.put(sdk.InstanceTarget("T", fmt.Sprint(i)), sdk.NodeID(fmt.Sprint("n", i%3)))
	}
	assert.Equal(t, 10, c.len(), "a full cache forgets an entry for each new one")
	c.dropOwner("n0")
	c.dropOwner("n1")
	c.dropOwner("n2")
	assert.Zero(t, c.len())

	t1 := sdk.InstanceTarget("T", "x")
	c.put(t1, "b")
	c.put(t1, "a")
	c.put(t1, "a")
	assert.Equal(t, 1, c.len(), "a route recorded again is one entry")
	c.drop(t1, "b")
	owner, ok := c.get(t1)
	require.True(t, ok, "dropping for another owner keeps the route")
	assert.Equal(t, sdk.NodeID("a"), owner)
	c.drop(t1, "a")
	_, ok = c.get(t1)
	assert.False(t, ok)
}

func TestTargetOfRefusesMalformedRequests(t *testing.T) {
	for name, req := range map[string]*wire.Request{
		"unknown kind":    {Kind: 9, Type: "T", Id: "x"},
		"empty type":      {Kind: uint32(sdk.KindInstance), Id: "x"},
		"nul in id":       {Kind: uint32(sdk.KindUser), Type: "T", Id: "a\x00"},
		"entry sans node": {Kind: uint32(sdk.KindEntry), Type: "T"},
	} {
		_, err := targetOf(req)
		assert.Error(t, err, name)
	}
	tg, err := targetOf(&wire.Request{Kind: uint32(sdk.KindInstance), Type: "T", Id: "x", Intent: true})
	require.NoError(t, err)
	assert.True(t, tg.CreateIntent())
	tg, err = targetOf(&wire.Request{Kind: uint32(sdk.KindUser), Type: "T", Id: "x", Intent: true})
	require.NoError(t, err)
	assert.False(t, tg.CreateIntent(), "only an Instance target carries intent (A2)")
}

// A peer's request for an Actor names the Actor, never with create-intent; a malformed one is
// refused for what is wrong with it, and so is an Actor's Spot that is not a Spot.
func TestTargetOfAnActorAndItsSpot(t *testing.T) {
	tg, err := targetOf(&wire.Request{Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindActor), Type: "game.Pawn", Id: "p1", Intent: true})
	require.NoError(t, err)
	assert.Equal(t, sdk.ActorTarget("game.Pawn", "p1"), tg)
	assert.False(t, tg.CreateIntent())
	_, err = targetOf(&wire.Request{Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindActor), Type: "game.Pawn"})
	require.ErrorIs(t, err, sdk.ErrInvalidID)

	for _, to := range []sdk.Target{sdk.EntryTarget("T", "node-a"), sdk.UserTarget("T", "u"), sdk.InstanceIntent("T", "i"), sdk.InstanceTarget("T", "i")} {
		back, err := spotOf(placeOf(to, nil))
		require.NoError(t, err)
		assert.Equal(t, to, back)
	}
	for name, p := range map[string]*wire.ActorPlace{
		"an Actor":       {Kind: uint32(sdk.KindActor), Type: "T", Id: "a"},
		"no kind":        {Type: "T", Id: "a"},
		"empty id":       {Kind: uint32(sdk.KindUser), Type: "T"},
		"entry, no node": {Kind: uint32(sdk.KindEntry), Type: "T"},
	} {
		_, err := spotOf(p)
		assert.Error(t, err, name)
	}
}
