package transport

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contents lists a table's entries through each, which must visit every entry once.
func contents(t *testing.T, tab *callTable[int]) map[uint64]int {
	t.Helper()
	got := map[uint64]int{}
	tab.each(func(id uint64, v int) {
		_, twice := got[id]
		require.False(t, twice, "each visited call %d twice", id)
		got[id] = v
	})
	return got
}

func TestCallTableAgreesWithAMapWhateverTheIDs(t *testing.T) {
	// Consecutive IDs as a link sends them, IDs that all share a slot, and IDs a peer picked at
	// random, with calls that end in any order and some that outlive many later ones.
	patterns := map[string]func(r *rand.Rand, i int) uint64{
		"consecutive": func(_ *rand.Rand, i int) uint64 { return uint64(i + 1) },
		"one slot":    func(_ *rand.Rand, i int) uint64 { return uint64(i) * minCallSlots },
		"random":      func(r *rand.Rand, _ int) uint64 { return r.Uint64N(1 << 12) },
		"edges": func(r *rand.Rand, _ int) uint64 { // near 0 and near the largest ID
			if r.IntN(2) == 0 {
				return r.Uint64N(256)
			}
			return math.MaxUint64 - r.Uint64N(256)
		},
	}
	for name, next := range patterns {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var tab callTable[int]
			model := map[uint64]int{}
			for i := range 20_000 {
				id := next(r, i)
				_, in := model[id]
				require.Equal(t, !in, tab.put(id, i), "put %d", id)
				if !in {
					model[id] = i
				}
				// Ends a call in flight, mostly a recent one, sometimes one long open.
				if len(model) > 0 && r.IntN(100) < 48+len(model)/40 {
					for victim := range model {
						v, ok := tab.remove(victim)
						require.True(t, ok, "remove %d", victim)
						require.Equal(t, model[victim], v)
						delete(model, victim)
						break
					}
				}
				probe := next(r, r.IntN(i+1))
				v, ok := tab.get(probe)
				mv, mok := model[probe]
				require.Equal(t, mok, ok, "get %d", probe)
				require.Equal(t, mv, v)
				require.Equal(t, len(model), tab.len())
			}
			assert.Equal(t, model, contents(t, &tab))
			_, ok := tab.remove(1 << 40)
			assert.False(t, ok, "an ID never entered is not removed")
		})
	}
}

func TestCallTableRefusesAnIDStillInFlight(t *testing.T) {
	var tab callTable[int]
	require.True(t, tab.put(7, 1))
	assert.False(t, tab.put(7, 2), "a second call under an ID in flight")
	v, ok := tab.get(7)
	assert.True(t, ok)
	assert.Equal(t, 1, v, "the first call keeps the ID")
	// One that shares its slot with a call in flight is another call.
	require.True(t, tab.put(7+minCallSlots, 3))
	assert.False(t, tab.put(7+minCallSlots, 4))
	_, ok = tab.remove(7)
	require.True(t, ok)
	require.True(t, tab.put(7, 5), "the ID is free once its call ended")
	assert.Equal(t, map[uint64]int{7: 5, 7 + minCallSlots: 3}, contents(t, &tab))
}

func TestCallTableGrowsWithTheCallsInFlightNotWithTheIDs(t *testing.T) {
	var tab callTable[int]
	// One call stays open while a million later ones come and go: the table stays at its
	// first size.
	require.True(t, tab.put(1, 0))
	for id := uint64(2); id < 1_000_000; id++ {
		require.True(t, tab.put(id, int(id)))
		_, ok := tab.remove(id)
		require.True(t, ok)
	}
	assert.Len(t, tab.slots, minCallSlots)
	assert.Equal(t, 1, tab.len())
	// Many calls at once: it grows to hold them in their slots, and no further than its bound.
	for id := uint64(2); id < 2+2*maxCallSlots; id++ {
		require.True(t, tab.put(id, 0))
	}
	assert.Len(t, tab.slots, maxCallSlots)
	assert.Equal(t, 1+2*maxCallSlots, tab.len())
	assert.Len(t, contents(t, &tab), 1+2*maxCallSlots)
}

func TestCallTableLetsGoOfABurstsMemoryOnceEmpty(t *testing.T) {
	var tab callTable[int]
	for id := uint64(1); id <= 2*shrinkAfter; id++ {
		require.True(t, tab.put(id, 0))
	}
	require.Greater(t, len(tab.slots), minCallSlots)
	for id := uint64(1); id <= 2*shrinkAfter; id++ {
		_, ok := tab.remove(id)
		require.True(t, ok)
	}
	assert.Nil(t, tab.slots, "an empty table keeps no slots of its burst")
	assert.Zero(t, tab.len())
	require.True(t, tab.put(1, 1), "and takes calls again")
}
