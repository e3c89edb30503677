package catalog_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// hangStore leaves moves unanswered (their outcome unknown, nothing written) while dark is
// set, and, while hang is set, Actor record reads unanswered until their context ends: an etcd
// that cannot be reached.
type hangStore struct {
	*store.Etcd
	dark, hang atomic.Bool
}

func (h *hangStore) wrap(e *store.Etcd) store.Store {
	h.Etcd = e
	return h
}

func (h *hangStore) MoveActor(ctx context.Context, loc store.ActorLocation, from, to store.Host) (store.ActorLocation, error) {
	if h.dark.Load() {
		return store.ActorLocation{}, fmt.Errorf("%w: the store is dark", store.ErrOutcomeUnknown)
	}
	return h.Etcd.MoveActor(ctx, loc, from, to)
}

func (h *hangStore) LookupActor(ctx context.Context, key store.ActorKey) (store.ActorLocation, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return store.ActorLocation{}, fmt.Errorf("%w: %v", sdk.ErrStoreUnavailable, ctx.Err())
	}
	return h.Etcd.LookupActor(ctx, key)
}

func (h *hangStore) HostActors(ctx context.Context, host store.HostRef) ([]store.ActorKey, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return nil, fmt.Errorf("%w: %v", sdk.ErrStoreUnavailable, ctx.Err())
	}
	return h.Etcd.HostActors(ctx, host)
}

// D9, single activation: a move whose commit answer was lost committed, and its new Spot
// ended the Actor (its OnClose ran there) and released its record. The source, once the
// store answers again, finds the record gone: it does not take the Actor back. Its timers stay
// stopped, and its old Spot's close runs no second OnClose.
func TestD9_ASourceThatFindsItsActorsRecordGoneDoesNotServeIt(t *testing.T) {
	var ticks atomic.Int64
	lossy := &lossyStore{}
	n, sp := roomsNode(t, &ticks, 200*time.Millisecond, lossy.wrap, "room-1", "room-2")
	const id = "d9-lost"
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, id))
	_, err := n.callT(pawnAt(id), "Tick", "")
	require.NoError(t, err)
	closesBefore := pawnCloses.Load()

	lossy.lose.Store(true)
	err = catClient{n.cat}.MoveActor(ctx, pawnAt(id), sdk.InstanceTarget(roomType, "room-2"))
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable, "the outcome is not known yet")
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "room-2")))
	require.Equal(t, closesBefore+1, pawnCloses.Load(), "the Actor ended with its new Spot")

	lossy.dark.Store(false) // the source learns the outcome now
	require.Eventually(t, func() bool { return n.cat.ActiveActors() == 0 }, 5*time.Second, 5*time.Millisecond)
	before := ticks.Load()
	time.Sleep(100 * time.Millisecond) // 100 ticks of a timer that still ran
	assert.Equal(t, before, ticks.Load(), "no timer of the ended Actor runs")
	_, here := n.cat.LocalActor(pawnAt(id))
	assert.False(t, here)
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "room-1")))
	assert.Equal(t, closesBefore+1, pawnCloses.Load(), "its OnClose ran once")
}

// D3: a Spot that closes with many members still arriving, while etcd cannot be reached,
// learns which are its own in one read with one budget, not one each: its close keeps to a few
// budgets.
func TestD3_ArrivalsRecordsAreReadWithinOneBudget(t *testing.T) {
	const op, arrivals = 200 * time.Millisecond, 20
	var ticks atomic.Int64
	hs := &hangStore{}
	n, sp := roomsNode(t, &ticks, op, hs.wrap, "room-1", "room-2")
	for i := range arrivals {
		require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, fmt.Sprintf("d3-arriving-%d", i)))
	}
	hs.dark.Store(true)
	for i := range arrivals {
		err := catClient{n.cat}.MoveActor(ctx, pawnAt(fmt.Sprintf("d3-arriving-%d", i)), sdk.InstanceTarget(roomType, "room-2"))
		require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	}
	hs.hang.Store(true)
	t.Cleanup(func() {
		hs.hang.Store(false)
		hs.dark.Store(false)
	})
	start := time.Now()
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "room-2")))
	// The turn's wait, the members' wait, their reads, their callbacks and the Spot's own:
	// far less than one budget per arrival (20).
	assert.Less(t, time.Since(start), 10*op)
}

// F8: the node's close keeps to its context even when its Entry Spot has members arriving
// whose records cannot be read: neither the wait for them nor the reads outlast it.
func TestF8_ANodesCloseKeepsToItsContextWithArrivalsInItsEntrySpot(t *testing.T) {
	const op, arrivals, closeWithin = 2 * time.Second, 20, 100 * time.Millisecond
	var ticks atomic.Int64
	hs := &hangStore{}
	n := newNode(t, nodeOpts{
		wrap: hs.wrap,
		cfg:  func(c *catalog.Config) { c.OperationTimeout = op },
		register: func(ts *catalog.Types, f *fixture) {
			must(ts.RegisterSpot(&sdk.SpotDesc{Name: lobbyType, Kind: sdk.KindEntry, Methods: methods}, factory(f)))
			must(ts.RegisterActor(pawnDesc, func(ac sdk.ActorContext) (any, error) {
				return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
			}))
		},
	})
	lobby := sdk.EntryTarget(lobbyType, "node-a")
	_, err := n.callT(lobby, "Join", "x")
	require.NoError(t, err)
	for i := range arrivals {
		_, err := n.cat.PrepareArrival(ctx, pawnAt(fmt.Sprintf("f8-arriving-%d", i)), lobby, nil, uint64(2*i+1))
		require.NoError(t, err)
	}
	hs.hang.Store(true)
	t.Cleanup(func() { hs.hang.Store(false) })
	cctx, cancel := context.WithTimeout(ctx, closeWithin)
	defer cancel()
	start := time.Now()
	_ = n.cat.Close(cctx)
	assert.Less(t, time.Since(start), op, "the close kept to its context, far less than one budget")
	assert.Zero(t, n.cat.ActiveActors(), "no arrival is left behind")
}
