package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

func actor(id string) store.ActorKey { return store.ActorKey{Type: "game.Pawn", ID: id} }

// readyHost commits a Ready User Spot k owned by owner and returns it as a host.
func readyHost(t *testing.T, s *store.Etcd, k store.SpotKey, owner store.Owner) store.Host {
	t.Helper()
	r, err := s.Reserve(ctx, k, sdk.KindUser, owner)
	require.NoError(t, err)
	require.True(t, r.Won)
	rec, err := s.CommitReady(ctx, r.Reservation)
	require.NoError(t, err)
	return store.SpotHost(k, rec)
}

func spawn(t *testing.T, s *store.Etcd, a store.ActorKey, host store.Host) store.ActorLocation {
	t.Helper()
	loc, err := s.Spawn(ctx, a, host)
	require.NoError(t, err)
	return loc
}

// members lists host's Actors by ID.
func members(t *testing.T, s *store.Etcd, host store.Host) []string {
	t.Helper()
	keys, err := s.HostActors(ctx, host.HostRef)
	require.NoError(t, err)
	ids := []string{}
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	return ids
}

// storeRevision is etcd's current revision: every applied write transaction adds one.
func storeRevision(t *testing.T, s *store.Etcd) int64 {
	t.Helper()
	resp, err := s.Client().Get(ctx, "/zlink/"+s.Mesh()+"/none")
	require.NoError(t, err)
	return resp.Header.Revision
}

func TestK1_SpawnRaceHasOneWinner(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	hosts := map[string]store.Host{
		"user":  readyHost(t, s, key("room"), reg.Owner()),
		"entry": store.EntryHost("game.Lobby", reg.Owner()),
	}
	const callers = 32
	for name, host := range hosts {
		t.Run(name, func(t *testing.T) {
			a := actor("pawn-" + name)
			locs := make([]store.ActorLocation, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range callers {
				wg.Go(func() {
					<-start
					locs[i], errs[i] = s.Spawn(ctx, a, host)
				})
			}
			close(start)
			wg.Wait()
			var won []store.ActorLocation
			for i, err := range errs {
				if err == nil {
					won = append(won, locs[i])
					continue
				}
				require.ErrorIs(t, err, sdk.ErrAlreadyExists, "caller %d", i)
			}
			require.Len(t, won, 1, "exactly one spawn wins")
			assert.Equal(t, uint64(1), won[0].Generation)
			assert.Equal(t, host.HostRef, won[0].Host)

			got, err := s.LookupActor(ctx, a)
			require.NoError(t, err)
			assert.Equal(t, won[0], got)
			assert.Equal(t, []string{a.ID}, members(t, s, host))
		})
	}
}

func TestActorSpawnIsFencedOnItsHost(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	other := register(t, s, "node-b", store.LeaseOptions{})
	host := readyHost(t, s, key("room"), reg.Owner())

	stale := host
	stale.Revision--
	_, err := s.Spawn(ctx, actor("p1"), stale)
	require.ErrorIs(t, err, store.ErrFenced, "the host record's revision as read is the fence")

	otherLease := host
	otherLease.Owner.Lease = other.Owner().Lease
	_, err = s.Spawn(ctx, actor("p1"), otherLease)
	require.ErrorIs(t, err, store.ErrFenced, "the owner's lease as read is the fence")

	r, err := s.Reserve(ctx, key("creating"), sdk.KindUser, reg.Owner())
	require.NoError(t, err)
	creating := store.SpotHost(key("creating"), store.Record{Kind: sdk.KindUser, Phase: store.PhaseCreating,
		Owner: reg.Owner(), Incarnation: r.Reservation.Incarnation, Revision: r.Reservation.Revision})
	_, err = s.Spawn(ctx, actor("p1"), creating)
	require.ErrorIs(t, err, store.ErrHostNotReady)

	_, err = s.Spawn(ctx, actor("p1"), store.Host{HostRef: store.HostRef{Kind: sdk.KindActor, Type: "x"}})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)

	// An Entry host is fenced on its node's registration.
	gone := register(t, s, "node-gone", store.LeaseOptions{})
	entry := store.EntryHost("game.Lobby", gone.Owner())
	require.NoError(t, gone.Close(ctx))
	_, err = s.Spawn(ctx, actor("p1"), entry)
	require.ErrorIs(t, err, store.ErrFenced)

	_, err = s.LookupActor(ctx, actor("p1"))
	require.ErrorIs(t, err, sdk.ErrNotFound, "no fenced spawn left a record")
	assert.Empty(t, members(t, s, host))
}

func TestActorMoveIsFencedAndBumpsTheGeneration(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	from := readyHost(t, s, key("from"), a.Owner())
	to := readyHost(t, s, key("to"), b.Owner())
	loc := spawn(t, s, actor("p"), from)

	stale := loc
	stale.Revision--
	_, err := s.MoveActor(ctx, stale, from, to)
	require.ErrorIs(t, err, store.ErrFenced, "the Actor record's revision as read is the fence")

	staleFrom := from
	staleFrom.Revision--
	_, err = s.MoveActor(ctx, loc, staleFrom, to)
	require.ErrorIs(t, err, store.ErrFenced, "the source host record's revision as read is the fence")
	staleFrom = from
	staleFrom.Owner.Lease = b.Owner().Lease
	_, err = s.MoveActor(ctx, loc, staleFrom, to)
	require.ErrorIs(t, err, store.ErrFenced, "the source owner's lease is the fence")
	staleTo := to
	staleTo.Revision--
	_, err = s.MoveActor(ctx, loc, from, staleTo)
	require.ErrorIs(t, err, store.ErrFenced, "the target host record's revision as read is the fence")

	_, err = s.MoveActor(ctx, loc, to, from)
	require.ErrorIs(t, err, store.ErrNotMember)
	_, err = s.MoveActor(ctx, loc, from, from)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)

	before := storeRevision(t, s)
	moved, err := s.MoveActor(ctx, loc, from, to)
	require.NoError(t, err)
	assert.Equal(t, before+1, moved.Revision, "a move is one etcd write")
	assert.Equal(t, before+1, storeRevision(t, s))
	assert.Equal(t, uint64(2), moved.Generation)
	assert.Equal(t, to.HostRef, moved.Host)
	assert.Equal(t, loc.Incarnation, moved.Incarnation)
	got, err := s.LookupActor(ctx, actor("p"))
	require.NoError(t, err)
	assert.Equal(t, moved, got)
	assert.Empty(t, members(t, s, from))
	assert.Equal(t, []string{"p"}, members(t, s, to))

	_, err = s.MoveActor(ctx, loc, from, to)
	require.ErrorIs(t, err, store.ErrFenced, "the old location moves nothing")

	// Actors of an Entry Spot move (A4, K1): to another node's Entry Spot and back into a Spot.
	entryB := store.EntryHost("game.Lobby", b.Owner())
	entryA := store.EntryHost("game.Lobby", a.Owner())
	moved, err = s.MoveActor(ctx, moved, to, entryB)
	require.NoError(t, err)
	moved, err = s.MoveActor(ctx, moved, entryB, entryA)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), moved.Generation)
	assert.Equal(t, []string{"p"}, members(t, s, entryA))
	assert.Empty(t, members(t, s, entryB))
	from = readyHost(t, s, key("back"), a.Owner())
	moved, err = s.MoveActor(ctx, moved, entryA, from)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), moved.Generation)
	assert.Empty(t, members(t, s, entryA))
	assert.Equal(t, []string{"p"}, members(t, s, from))
}

func TestActorMoveRaceHasOneWinner(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	from := readyHost(t, s, key("from"), a.Owner())
	targets := []store.Host{readyHost(t, s, key("to-1"), b.Owner()), store.EntryHost("game.Lobby", b.Owner())}
	for trial := range 20 {
		id := fmt.Sprintf("p%d", trial)
		loc := spawn(t, s, actor(id), from)
		var wg sync.WaitGroup
		start := make(chan struct{})
		locs := make([]store.ActorLocation, len(targets))
		errs := make([]error, len(targets))
		for i, to := range targets {
			wg.Go(func() {
				<-start
				locs[i], errs[i] = s.MoveActor(ctx, loc, from, to)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "trial %d: two moves won", trial)
				winner = i
				continue
			}
			require.ErrorIs(t, err, store.ErrFenced, "trial %d: the losing move fails cleanly", trial)
		}
		require.NotEqual(t, -1, winner, "trial %d: one move wins", trial)
		got, err := s.LookupActor(ctx, actor(id))
		require.NoError(t, err)
		assert.Equal(t, locs[winner], got)
		assert.Equal(t, uint64(2), got.Generation)
		for i, to := range targets {
			assert.Equal(t, i == winner, contains(members(t, s, to), id), "trial %d: the index follows the record", trial)
		}
		assert.NotContains(t, members(t, s, from), id)
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestActorMoveIntoAHostThatIsNotReadyFails(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	from := readyHost(t, s, key("from"), a.Owner())
	loc := spawn(t, s, actor("p"), from)

	r, err := s.Reserve(ctx, key("creating"), sdk.KindUser, b.Owner())
	require.NoError(t, err)
	creating := store.SpotHost(key("creating"), store.Record{Kind: sdk.KindUser, Phase: store.PhaseCreating,
		Owner: b.Owner(), Incarnation: r.Reservation.Incarnation, Revision: r.Reservation.Revision})
	_, err = s.MoveActor(ctx, loc, from, creating)
	require.ErrorIs(t, err, store.ErrHostNotReady, "a Creating host takes no Actor")

	// Read Ready, then Releasing: the target's revision as read no longer holds.
	releasing := readyHost(t, s, key("releasing"), b.Owner())
	rec, err := s.Lookup(ctx, key("releasing"))
	require.NoError(t, err)
	_, err = s.BeginRelease(ctx, key("releasing"), rec.Record, store.ReleaseExplicitClose)
	require.NoError(t, err)
	_, err = s.MoveActor(ctx, loc, from, releasing)
	require.ErrorIs(t, err, store.ErrFenced)

	// Read Ready, then its owner's lease ended.
	c := register(t, s, "node-c", store.LeaseOptions{})
	orphaned := readyHost(t, s, key("orphaned"), c.Owner())
	require.NoError(t, c.Close(ctx))
	_, err = s.MoveActor(ctx, loc, from, orphaned)
	require.ErrorIs(t, err, store.ErrFenced)
	_, err = s.MoveActor(ctx, loc, from, store.EntryHost("game.Lobby", c.Owner()))
	require.ErrorIs(t, err, store.ErrFenced, "an Entry host of an ended registration takes no Actor")

	got, err := s.LookupActor(ctx, actor("p"))
	require.NoError(t, err)
	assert.Equal(t, loc, got, "no failed move changed the record")
	assert.Equal(t, []string{"p"}, members(t, s, from))
}

func TestActorRecordsGoWithTheirHost(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})

	t.Run("one Actor", func(t *testing.T) {
		host := readyHost(t, s, key("one"), reg.Owner())
		loc := spawn(t, s, actor("solo"), host)
		stale := host
		stale.Revision--
		require.ErrorIs(t, s.ReleaseActor(ctx, loc, stale), store.ErrFenced)
		stale = host
		stale.Incarnation--
		require.ErrorIs(t, s.ReleaseActor(ctx, loc, stale), store.ErrNotMember)
		stale = host
		stale.Owner.Lease++
		require.ErrorIs(t, s.ReleaseActor(ctx, loc, stale), store.ErrFenced)
		require.NoError(t, s.ReleaseActor(ctx, loc, host))
		_, err := s.LookupActor(ctx, actor("solo"))
		require.ErrorIs(t, err, sdk.ErrNotFound)
		assert.Empty(t, members(t, s, host))
		require.ErrorIs(t, s.ReleaseActor(ctx, loc, host), store.ErrFenced, "released once")
	})
	// More Actors than one transaction deletes: the record goes with the last of them.
	for _, n := range []int{0, 3, 130} {
		t.Run(fmt.Sprintf("Spot release with %d Actors", n), func(t *testing.T) {
			k := key(fmt.Sprintf("host-%d", n))
			host := readyHost(t, s, k, reg.Owner())
			var ids []string
			for i := range n {
				ids = append(ids, fmt.Sprintf("m%d-%03d", n, i))
				spawn(t, s, actor(ids[i]), host)
			}
			assert.Len(t, members(t, s, host), n)
			res, err := s.Lookup(ctx, k)
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, k, res.Record, store.ReleaseExplicitClose))

			assert.Equal(t, store.StateMissing, lookupState(t, s, k))
			assert.Empty(t, members(t, s, host))
			for _, id := range ids {
				_, err := s.LookupActor(ctx, actor(id))
				require.ErrorIs(t, err, sdk.ErrNotFound, id)
			}
			// The key's next Spot is a new host with no Actors.
			again := readyHost(t, s, k, reg.Owner())
			assert.Empty(t, members(t, s, again))
		})
	}
	t.Run("a Releasing host takes no Actor", func(t *testing.T) {
		host := readyHost(t, s, key("closing"), reg.Owner())
		res, err := s.Lookup(ctx, key("closing"))
		require.NoError(t, err)
		releasing, err := s.BeginRelease(ctx, key("closing"), res.Record, store.ReleaseExplicitClose)
		require.NoError(t, err)
		_, err = s.Spawn(ctx, actor("late"), host)
		require.ErrorIs(t, err, store.ErrFenced)
		_, err = s.Spawn(ctx, actor("late"), store.SpotHost(key("closing"), releasing))
		require.ErrorIs(t, err, store.ErrHostNotReady)
	})
	t.Run("Entry host", func(t *testing.T) {
		host := store.EntryHost("game.Lobby", reg.Owner())
		for i := range 70 {
			spawn(t, s, actor(fmt.Sprintf("e%02d", i)), host)
		}
		other := store.EntryHost("game.Lobby", register(t, s, "node-b", store.LeaseOptions{}).Owner())
		kept := spawn(t, s, actor("kept"), other)
		require.NoError(t, s.ReleaseHostActors(ctx, host))
		assert.Empty(t, members(t, s, host))
		_, err := s.LookupActor(ctx, actor("e00"))
		require.ErrorIs(t, err, sdk.ErrNotFound)
		got, err := s.LookupActor(ctx, actor("kept"))
		require.NoError(t, err)
		assert.Equal(t, kept, got, "another host's Actors stay")
	})
}

func lookupState(t *testing.T, s *store.Etcd, k store.SpotKey) store.State {
	t.Helper()
	res, err := s.Lookup(ctx, k)
	require.NoError(t, err)
	return res.State
}

func TestReclaimRemovesActorsOfADeadOwner(t *testing.T) {
	s := newStore(t)
	dead := register(t, s, "node-dead", store.LeaseOptions{})
	live := register(t, s, "node-live", store.LeaseOptions{})
	deadSpot := readyHost(t, s, key("dead-room"), dead.Owner())
	deadEntry := store.EntryHost("game.Lobby", dead.Owner())
	liveSpot := readyHost(t, s, key("live-room"), live.Owner())
	liveEntry := store.EntryHost("game.Lobby", live.Owner())
	spawn(t, s, actor("in-dead-spot"), deadSpot)
	spawn(t, s, actor("in-dead-entry"), deadEntry)
	inLiveSpot := spawn(t, s, actor("in-live-spot"), liveSpot)
	inLiveEntry := spawn(t, s, actor("in-live-entry"), liveEntry)

	require.NoError(t, dead.Close(ctx))
	stats, err := s.Reclaim(ctx, live.Owner())
	require.NoError(t, err)
	assert.Equal(t, 1, stats.DeadIncarnations)
	assert.Equal(t, 1, stats.Released, "the dead owner's Spot, with its Actor")
	assert.Equal(t, 3, stats.ActorsScanned, "what the Spot's release left")
	assert.Equal(t, 1, stats.ActorsReleased, "the dead registration's Entry Actor")

	for _, id := range []string{"in-dead-spot", "in-dead-entry"} {
		_, err := s.LookupActor(ctx, actor(id))
		require.ErrorIs(t, err, sdk.ErrNotFound, id)
	}
	assert.Empty(t, members(t, s, deadSpot))
	assert.Empty(t, members(t, s, deadEntry))
	for _, want := range []store.ActorLocation{inLiveSpot, inLiveEntry} {
		got, err := s.LookupActor(ctx, want.Key)
		require.NoError(t, err)
		assert.Equal(t, want, got, "a live host's Actors stay")
	}
}

// A fenced record is the record it was at a later revision: a move fenced on the revision read
// before can no longer land, its host and index stay, and a stale fence fails.
func TestFenceActorKeepsTheRecordAndEndsWritesFencedOnItsRevision(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	from := readyHost(t, s, key("fence-from"), a.Owner())
	to := readyHost(t, s, key("fence-to"), a.Owner())
	loc := spawn(t, s, actor("fenced"), from)

	fenced, err := s.FenceActor(ctx, loc)
	require.NoError(t, err)
	assert.Greater(t, fenced.Revision, loc.Revision)
	got, err := s.LookupActor(ctx, actor("fenced"))
	require.NoError(t, err)
	assert.Equal(t, fenced, got)
	assert.Equal(t, loc.Host, got.Host)
	assert.Equal(t, loc.Generation, got.Generation)
	assert.Equal(t, loc.Attempt, got.Attempt)
	assert.Equal(t, loc.Incarnation, got.Incarnation)
	assert.Equal(t, []string{"fenced"}, members(t, s, from))

	_, err = s.MoveActor(ctx, loc, from, to)
	require.ErrorIs(t, err, store.ErrFenced, "a move read before the fence never lands")
	_, err = s.FenceActor(ctx, loc)
	require.ErrorIs(t, err, store.ErrFenced, "a fence at a revision past")
	_, err = s.MoveActor(ctx, got, from, to)
	require.NoError(t, err, "a move read after it does")
}
