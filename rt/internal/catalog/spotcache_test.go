package catalog_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/sdk"
)

// The Spot cache stands in front of the index for messages: whatever it hands out must be the
// index's Spot of the key at that moment, so that no message reaches an activation that is
// no longer the one (B-rules' single activation), and a closed Spot's memory is not kept.
func TestSpotCacheHandsOutTheIndexsSpotUntilTheShardChanges(t *testing.T) {
	n := newNode(t, nodeOpts{})
	room := sdk.InstanceTarget(roomType, "cached")
	_, err := n.call("cached", "Join", "a")
	require.NoError(t, err)

	route, ok := n.cat.LocalSpot(room)
	require.True(t, ok)
	got, ok := n.cat.CachedSpot(room)
	require.True(t, ok, "the lookup filled the entry")
	assert.Same(t, route.Spot(), got)

	n.cat.ChangeShardOf(room)
	_, ok = n.cat.CachedSpot(room)
	assert.False(t, ok, "a change in the shard makes the entry stale")
	route2, ok := n.cat.LocalSpot(room)
	require.True(t, ok, "the index still has it")
	assert.Same(t, route.Spot(), route2.Spot())
	_, ok = n.cat.CachedSpot(room)
	assert.True(t, ok, "and the lookup filled the entry again")
}

func TestSpotCacheNeverHandsOutAClosedSpotNorKeepsIt(t *testing.T) {
	n := newNode(t, nodeOpts{})
	room := sdk.InstanceTarget(roomType, "reborn")
	out, err := n.call("reborn", "Join", "a")
	require.NoError(t, err)
	require.Equal(t, "a joined reborn #1", out)
	first, ok := n.cat.LocalSpot(room)
	require.True(t, ok)
	require.True(t, n.cat.CacheHolds(room))

	require.NoError(t, n.cat.CloseTarget(ctx, room))
	assert.False(t, n.cat.CacheHolds(room), "the close emptied the entry")
	_, ok = n.cat.LocalSpot(room)
	assert.False(t, ok, "a closed Spot is not found")

	out, err = n.call("reborn", "Join", "b")
	require.NoError(t, err)
	assert.Equal(t, "b joined reborn #1", out, "a new activation answers")
	second, ok := n.cat.LocalSpot(room)
	require.True(t, ok)
	assert.NotSame(t, first.Spot(), second.Spot())
	got, ok := n.cat.CachedSpot(room)
	require.True(t, ok)
	assert.Same(t, second.Spot(), got)
}

func TestSpotCacheLeavesAnActiveSpotItsEntry(t *testing.T) {
	// Two active Spots whose keys share an entry: the first keeps it, the second is found
	// through the index every time, and both are found.
	ids := collidingIDs(t)
	n := newNode(t, nodeOpts{})
	for _, id := range ids {
		_, err := n.call(id, "Join", "a")
		require.NoError(t, err)
	}
	a, b := sdk.InstanceTarget(roomType, ids[0]), sdk.InstanceTarget(roomType, ids[1])
	ra, ok := n.cat.LocalSpot(a)
	require.True(t, ok)
	for range 3 {
		rb, ok := n.cat.LocalSpot(b)
		require.True(t, ok)
		assert.Equal(t, ids[1], rb.Spot().ID())
	}
	got, ok := n.cat.CachedSpot(a)
	require.True(t, ok, "the first keeps the entry")
	assert.Same(t, ra.Spot(), got)
	_, ok = n.cat.CachedSpot(b)
	assert.False(t, ok)

	require.NoError(t, n.cat.CloseTarget(ctx, a))
	rb, ok := n.cat.LocalSpot(b)
	require.True(t, ok)
	got, ok = n.cat.CachedSpot(b)
	require.True(t, ok, "once the first closed, the second takes the entry")
	assert.Same(t, rb.Spot(), got)
}

// collidingIDs finds two IDs of roomType with the same Spot cache entry.
func collidingIDs(t *testing.T) [2]string {
	for i := range 1 << 20 {
		for j := range i {
			a, b := fmt.Sprint("c", i), fmt.Sprint("c", j)
			if catalog.ShareACacheEntry(roomType, a, b) {
				return [2]string{b, a}
			}
		}
		if i > 4096 {
			break
		}
	}
	t.Fatal("no two IDs share an entry")
	return [2]string{}
}

// BenchmarkLocalSpot finds one of 64 active Spots from every processor at once, through the
// index alone and through the Spot cache, as every message to a Spot does.
func BenchmarkLocalSpot(b *testing.B) {
	n := newNode(b, nodeOpts{})
	targets := make([]sdk.Target, 64)
	for i := range targets {
		id := fmt.Sprint("bench-", i)
		_, err := n.call(id, "Join", "a")
		require.NoError(b, err)
		targets[i] = sdk.InstanceTarget(roomType, id)
	}
	b.Run("index", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if !n.cat.IndexedSpot(targets[i%64]) {
					b.Error("not found")
				}
			}
		})
	})
	b.Run("cache", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if _, ok := n.cat.LocalSpot(targets[i%64]); !ok {
					b.Error("not found")
				}
			}
		})
	})
}
