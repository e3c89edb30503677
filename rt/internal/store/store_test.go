package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

var ctx = context.Background()

func key(id string) store.SpotKey { return store.SpotKey{Type: "chat.Room", ID: id} }

func reserve(t *testing.T, s store.Store, k store.SpotKey, o store.Owner) store.Reservation {
	t.Helper()
	r, err := s.Reserve(ctx, k, sdk.KindInstance, o)
	require.NoError(t, err)
	require.True(t, r.Won, "reservation of %s", k)
	return r.Reservation
}

func TestB5_SixtyFourReserversOneWinner(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	const callers, trials = 64, 200
	for trial := range trials {
		k := key("room-" + strings.Repeat("x", trial%7) + string(rune('a'+trial%26)) + string(rune('0'+trial/26)))
		results := make([]store.ReserveResult, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.Reserve(ctx, k, sdk.KindInstance, reg.Owner())
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		var winner store.Reservation
		for i := range callers {
			require.NoError(t, errs[i])
			if results[i].Won {
				winners++
				winner = results[i].Reservation
			}
		}
		require.Equal(t, 1, winners, "trial %d: exactly one winner", trial)
		for i, r := range results {
			if r.Won {
				continue
			}
			require.Equal(t, store.StateCreating, r.Current.State, "trial %d caller %d", trial, i)
			require.Equal(t, winner.Attempt, r.Current.Record.Attempt, "trial %d caller %d sees the winner's attempt", trial, i)
			require.Equal(t, winner.Revision, r.Current.Record.Revision)
		}
	}
}

func TestB7_CommitReadyByStaleAttemptFails(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	res := reserve(t, s, key("r1"), reg.Owner())

	stale := res
	stale.Revision-- // an older reservation of the same key
	_, err := s.CommitReady(ctx, stale)
	require.ErrorIs(t, err, store.ErrFenced)

	rec, err := s.CommitReady(ctx, res)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseReady, rec.Phase)
	assert.Equal(t, uint64(1), rec.Generation)
	assert.Equal(t, res.Attempt, rec.Attempt)

	_, err = s.CommitReady(ctx, res)
	require.ErrorIs(t, err, store.ErrFenced, "the same reservation cannot commit twice")

	got, err := s.Lookup(ctx, key("r1"))
	require.NoError(t, err)
	assert.Equal(t, store.StateReady, got.State)
	assert.Equal(t, reg.Owner(), got.Record.Owner)
	assert.Equal(t, res.Incarnation, got.Record.Incarnation)
}

func TestD3_ReleaseWithStaleRevisionFails(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	rec, err := s.CommitReady(ctx, reserve(t, s, key("r1"), reg.Owner()))
	require.NoError(t, err)

	stale := rec
	stale.Revision--
	_, err = s.BeginRelease(ctx, key("r1"), stale, store.ReleaseExplicitClose)
	require.ErrorIs(t, err, store.ErrFenced)

	releasing, err := s.BeginRelease(ctx, key("r1"), rec, store.ReleaseExplicitClose)
	require.NoError(t, err)
	require.ErrorIs(t, s.FinishRelease(ctx, key("r1"), withRevision(releasing, rec.Revision)), store.ErrFenced)

	got, err := s.Lookup(ctx, key("r1"))
	require.NoError(t, err)
	assert.Equal(t, store.StateUnavailable, got.State, "a releasing record gives out no route (D4)")
	assert.Equal(t, store.EvidenceReleasing, got.Evidence)
}

func withRevision(r store.Record, rev int64) store.Record { r.Revision = rev; return r }

func TestB3_ReleaseThenLookupIsMissing(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	first, err := s.CommitReady(ctx, reserve(t, s, key("r1"), reg.Owner()))
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, key("r1"), first, store.ReleaseIdle))

	got, err := s.Lookup(ctx, key("r1"))
	require.NoError(t, err)
	assert.Equal(t, store.StateMissing, got.State)
	assert.Positive(t, got.Revision, "Missing keeps the lookup version")

	// Missing can be created again; the new incarnation is distinct and later.
	second, err := s.CommitReady(ctx, reserve(t, s, key("r1"), reg.Owner()))
	require.NoError(t, err)
	assert.Greater(t, second.Incarnation, first.Incarnation)
}

func TestB3_RevokedOwnerIsUnavailableUntilReclaimed(t *testing.T) {
	s := newStore(t)
	dead := register(t, s, "node-dead", store.LeaseOptions{})
	live := register(t, s, "node-live", store.LeaseOptions{})
	ready, err := s.CommitReady(ctx, reserve(t, s, key("ready"), dead.Owner()))
	require.NoError(t, err)
	reserve(t, s, key("creating"), dead.Owner())
	_, err = s.CommitReady(ctx, reserve(t, s, key("other"), live.Owner()))
	require.NoError(t, err)

	require.NoError(t, dead.Close(ctx)) // revokes the owner lease

	for _, id := range []string{"ready", "creating"} {
		got, err := s.Lookup(ctx, key(id))
		require.NoError(t, err)
		assert.Equal(t, store.StateUnavailable, got.State, "%s: a dead owner's record is Unavailable, never Missing", id)
		assert.Equal(t, store.EvidenceOwnerLeaseEnded, got.Evidence, id)
		assert.Equal(t, dead.Owner(), got.Record.Owner, "%s keeps the invalid owner evidence", id)
		r, err := s.Reserve(ctx, key(id), sdk.KindInstance, live.Owner())
		require.NoError(t, err)
		assert.False(t, r.Won, "%s: no creation starts while Unavailable (K5)", id)
	}
	// A record the dead owner no longer writes cannot be released by it either.
	require.ErrorIs(t, s.Release(ctx, key("ready"), ready, store.ReleaseExplicitClose), store.ErrFenced)

	stats, err := s.Reclaim(ctx, live.Owner())
	require.NoError(t, err)
	assert.Equal(t, 1, stats.DeadIncarnations)
	assert.Equal(t, 2, stats.Released)
	assert.Equal(t, 3, stats.Scanned)

	for _, id := range []string{"ready", "creating"} {
		got, err := s.Lookup(ctx, key(id))
		require.NoError(t, err)
		assert.Equal(t, store.StateMissing, got.State, "%s is Missing after the formal release", id)
	}
	other, err := s.Lookup(ctx, key("other"))
	require.NoError(t, err)
	assert.Equal(t, store.StateReady, other.State, "a live owner's record is untouched")

	stats, err = s.Reclaim(ctx, live.Owner())
	require.NoError(t, err)
	assert.Equal(t, store.ReclaimStats{}, stats, "the dead registration was forgotten")
}

func TestD5_WaiterSeesReleaseTag(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	rec, err := s.CommitReady(ctx, reserve(t, s, key("r1"), reg.Owner()))
	require.NoError(t, err)
	before, err := s.Lookup(ctx, key("r1"))
	require.NoError(t, err)

	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = s.Release(ctx, key("r1"), rec, store.ReleaseIdle)
	}()
	res := before
	for res.State != store.StateMissing {
		res, err = s.WaitChange(ctx, res)
		require.NoError(t, err)
	}
	assert.Equal(t, store.ReleaseIdle, res.ReleasedBy, "the waiter learns that idle cleanup released the authority")
}

func TestB5_WaiterOfAttemptSeesReady(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	res := reserve(t, s, key("r1"), reg.Owner())
	lost, err := s.Reserve(ctx, key("r1"), sdk.KindInstance, reg.Owner())
	require.NoError(t, err)
	require.False(t, lost.Won)
	require.Equal(t, store.StateCreating, lost.Current.State)

	done := make(chan store.Resolution, 1)
	go func() {
		r, err := s.WaitChange(ctx, lost.Current)
		if err == nil {
			done <- r
		}
		close(done)
	}()
	_, err = s.CommitReady(ctx, res)
	require.NoError(t, err)
	select {
	case r, ok := <-done:
		require.True(t, ok, "WaitChange failed")
		assert.Equal(t, store.StateReady, r.State)
		assert.Equal(t, res.Attempt, r.Record.Attempt)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never woke")
	}
}

func TestWaitChangeRereadsWhenCompacted(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	res := reserve(t, s, key("r1"), reg.Owner())
	rec, err := s.CommitReady(ctx, res)
	require.NoError(t, err)
	_, err = s.Client().Compact(ctx, rec.Revision)
	require.NoError(t, err)

	got, err := s.WaitChange(ctx, store.Resolution{Key: key("r1"), Revision: res.Revision - 1})
	require.NoError(t, err)
	assert.Equal(t, store.StateReady, got.State)
}

// A node watch whose history was compacted lists the membership again and reports it as one
// resync: the whole listing at once, with the revision it was read at, so that a watcher can
// compare it with what it knows instead of forgetting every node.
func TestWatchNodesResyncsAfterCompaction(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	_, from, err := s.Nodes(ctx)
	require.NoError(t, err)
	c := register(t, s, "node-c", store.LeaseOptions{})
	require.NoError(t, a.Close(ctx))
	nodes, now, err := s.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	_, err = s.Client().Compact(ctx, now)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var events []store.NodeEvent
	_ = s.WatchNodes(wctx, from, func(ev store.NodeEvent) {
		if ev.Progress {
			return
		}
		events = append(events, ev)
		if ev.Resync {
			cancel()
		}
	})
	require.Len(t, events, 1, "the listing is one event: %+v", events)
	ev := events[0]
	require.True(t, ev.Resync)
	assert.GreaterOrEqual(t, ev.Revision, now)
	require.Len(t, ev.Snapshot, 2, "every live node, and only those")
	assert.Equal(t, []sdk.NodeID{"node-b", "node-c"}, []sdk.NodeID{ev.Snapshot[0].ID, ev.Snapshot[1].ID})
	assert.Equal(t, []int64{b.Owner().Lease, c.Owner().Lease}, []int64{ev.Snapshot[0].Lease, ev.Snapshot[1].Lease})
	assert.Equal(t, "node-b", ev.Snapshot[0].Desc.GetNodeId())
}

func TestWaitChangeHonoursContext(t *testing.T) {
	s := newStore(t)
	c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	got, err := s.Lookup(ctx, key("nobody"))
	require.NoError(t, err)
	_, err = s.WaitChange(c, got)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestIDsRoundTripThroughKeys(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node/with%slash", store.LeaseOptions{})
	ids := []string{"a/b", "/leading", "trailing/", "a//b", "with space", "방-1", "100%", "%2F", "emoji 🎲", strings.Repeat("é", 512)}
	for _, id := range ids {
		k := store.SpotKey{Type: "game/Room v2", ID: id}
		_, err := s.CommitReady(ctx, reserve(t, s, k, reg.Owner()))
		require.NoError(t, err, "%q", id)
	}
	for _, id := range ids {
		k := store.SpotKey{Type: "game/Room v2", ID: id}
		got, err := s.Lookup(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, store.StateReady, got.State, "%q", id)
		assert.Equal(t, k, got.Key)
	}
	// Distinct IDs never alias: "a/b" and "a%2Fb" are different objects.
	got, err := s.Lookup(ctx, store.SpotKey{Type: "game/Room v2", ID: "a%2Fb"})
	require.NoError(t, err)
	assert.Equal(t, store.StateMissing, got.State)

	// The reclaimer parses every key back.
	require.NoError(t, reg.Close(ctx))
	stats, err := s.Reclaim(ctx, store.Owner{})
	require.NoError(t, err)
	assert.Equal(t, len(ids), stats.Released)
}

func TestBadIDsAreRefusedWithAReason(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	cases := map[string]struct {
		key  store.SpotKey
		want string
	}{
		"empty id":       {store.SpotKey{Type: "T", ID: ""}, "spot ID is empty"},
		"empty type":     {store.SpotKey{Type: "", ID: "x"}, "spot type name is empty"},
		"too long":       {store.SpotKey{Type: "T", ID: strings.Repeat("a", sdk.MaxIDBytes+1)}, "1025 bytes, over the limit of 1024"},
		"invalid utf-8":  {store.SpotKey{Type: "T", ID: "bad\xff"}, "not valid UTF-8"},
		"nul":            {store.SpotKey{Type: "T", ID: "a\x00b"}, "contains a NUL byte at offset 1"},
		"nul in type":    {store.SpotKey{Type: "T\x00", ID: "x"}, "spot type name"},
		"max is allowed": {store.SpotKey{Type: "T", ID: strings.Repeat("a", sdk.MaxIDBytes)}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := s.Reserve(ctx, tc.key, sdk.KindInstance, reg.Owner())
			_, lerr := s.Lookup(ctx, tc.key)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, lerr)
				return
			}
			require.ErrorIs(t, err, sdk.ErrInvalidID)
			assert.Contains(t, err.Error(), tc.want)
			require.ErrorIs(t, lerr, sdk.ErrInvalidID)
		})
	}
	_, err := s.Register(ctx, nil, store.LeaseOptions{})
	require.ErrorIs(t, err, sdk.ErrInvalidID, "a node needs an ID")
}

func TestReserveRefusesKindsWithoutRecords(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	for _, k := range []sdk.SpotKind{sdk.KindEntry, sdk.KindInvalid, sdk.SpotKind(9)} {
		_, err := s.Reserve(ctx, key("x"), k, reg.Owner())
		require.Error(t, err, "%v", k)
	}
}

func TestNodeIDInUseByLiveNode(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	_, err := s.Register(ctx, reg.Descriptor(), store.LeaseOptions{})
	require.ErrorIs(t, err, store.ErrNodeIDInUse)
	var taken *store.NodeIDInUseError
	assert.False(t, errors.As(err, &taken), "this process's own live registration holds the ID: %v", err)
	assert.True(t, reg.Guard().Valid(), "the live registration keeps its lease")
	require.NoError(t, reg.Close(ctx))
	again := register(t, s, "node-a", store.LeaseOptions{})
	assert.NotEqual(t, reg.Owner().Lease, again.Owner().Lease, "a restarted node gets a new owner lease")
}

// DESIGN §4: a registration that finds the node ID held by another process's registration
// names it: its owner lease and the address its peers dial.
func TestNodeIDInUseByAnotherProcessNamesIt(t *testing.T) {
	s := newStore(t)
	desc := nodeDesc("node-a")
	desc.Endpoint = "127.0.0.1:4711"
	reg, err := s.Register(ctx, desc, store.LeaseOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })

	other, err := store.New(newClient(t), meshOf(t, s)) // another process's store
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = other.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{})
	require.ErrorIs(t, err, store.ErrNodeIDInUse)
	var taken *store.NodeIDInUseError
	require.ErrorAs(t, err, &taken)
	assert.Equal(t, sdk.NodeID("node-a"), taken.Node)
	assert.Equal(t, reg.Owner().Lease, taken.Lease)
	assert.Equal(t, "127.0.0.1:4711", taken.Endpoint)
	assert.Equal(t, 10*time.Second, taken.TTL, "the holder's lease was granted the default TTL")
	assert.Contains(t, err.Error(), "another live process")
	assert.True(t, reg.Guard().Valid(), "the holder keeps its lease")
}

// C1: the guard trips before etcd expires the lease, and so does its lost flag, which the
// keep-alive sets at the deadline: admission reads the flag alone, without the clock.
func TestLeaseGuardTripsBeforeServerExpiry(t *testing.T) {
	s := newStore(t)
	// The node's own client: closing it stops the keep-alives, as a partition from etcd would.
	nodeClient := newClient(t)
	nodeStore, err := store.New(nodeClient, meshOf(t, s))
	require.NoError(t, err)
	defer nodeStore.Close()
	reg, err := nodeStore.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{TTL: 2 * time.Second, KeepAliveInterval: 300 * time.Millisecond})
	require.NoError(t, err)
	defer reg.Close(ctx)
	require.True(t, reg.Guard().Valid())

	// Let a few keep-alives extend the guard, then cut the node off.
	time.Sleep(700 * time.Millisecond)
	require.True(t, reg.Guard().Valid())
	watch := s.Client().Watch(ctx, nodeKeyOf(t, s, "node-a"))
	require.NoError(t, nodeClient.Close())
	cutAt := time.Now()

	var tripped, lost time.Time
	for (tripped.IsZero() || lost.IsZero()) && time.Since(cutAt) < 10*time.Second {
		if tripped.IsZero() && !reg.Guard().Valid() {
			tripped = time.Now()
		}
		if lost.IsZero() && reg.Guard().Lost() {
			lost = time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	require.False(t, tripped.IsZero(), "the guard never tripped")
	require.False(t, lost.IsZero(), "the guard was never marked lost")
	select {
	case wr := <-watch:
		require.NotEmpty(t, wr.Events)
		require.Equal(t, clientv3.EventTypeDelete, wr.Events[0].Type)
		expired := time.Now()
		assert.True(t, tripped.Before(expired), "guard tripped %v after the cut, the server expired the lease %v after it",
			tripped.Sub(cutAt), expired.Sub(cutAt))
		assert.True(t, lost.Before(expired), "guard marked lost %v after the cut, the server expired the lease %v after it",
			lost.Sub(cutAt), expired.Sub(cutAt))
	case <-time.After(10 * time.Second):
		t.Fatal("the server never expired the lease")
	}
}

func TestLeaseLossIsReported(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{TTL: 2 * time.Second, KeepAliveInterval: 100 * time.Millisecond})
	_, err := s.Client().Revoke(ctx, clientv3.LeaseID(reg.Owner().Lease))
	require.NoError(t, err)
	select {
	case <-reg.Lost():
		assert.False(t, reg.Guard().Valid())
		assert.True(t, reg.Guard().Lost())
	case <-time.After(5 * time.Second):
		t.Fatal("lease loss not reported")
	}
}

func TestCommitReadyFailsAfterOwnerLeaseEnded(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	res := reserve(t, s, key("r1"), reg.Owner())
	require.NoError(t, reg.Close(ctx))
	_, err := s.CommitReady(ctx, res)
	require.ErrorIs(t, err, store.ErrFenced, "every owner write is fenced on the owner lease")
}

func TestB2_WaiterOfCreatingSeesOwnerEnd(t *testing.T) {
	s := newStore(t)
	creator := register(t, s, "creator", store.LeaseOptions{})
	other := register(t, s, "other", store.LeaseOptions{})
	reserve(t, s, key("r1"), creator.Owner())
	lost, err := s.Reserve(ctx, key("r1"), sdk.KindInstance, other.Owner())
	require.NoError(t, err)
	require.Equal(t, store.StateCreating, lost.Current.State)

	done := make(chan store.Resolution, 1)
	go func() {
		defer close(done)
		if r, err := s.WaitChange(ctx, lost.Current); err == nil {
			done <- r
		}
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, creator.Close(ctx))
	select {
	case r, ok := <-done:
		require.True(t, ok, "WaitChange failed")
		assert.Equal(t, store.StateUnavailable, r.State, "the creator's end wakes the waiter (B2, B8)")
		assert.Equal(t, store.EvidenceOwnerLeaseEnded, r.Evidence)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never woke")
	}
}

func TestB8_OneReclaimerClaimsADeadRegistration(t *testing.T) {
	s := newStore(t)
	dead := register(t, s, "dead", store.LeaseOptions{})
	a := register(t, s, "a", store.LeaseOptions{})
	b := register(t, s, "b", store.LeaseOptions{})
	for i := range 20 {
		k := key("c" + string(rune('a'+i)))
		if i%2 == 0 {
			reserve(t, s, k, dead.Owner()) // left Creating by a creator that dies (B8)
		} else {
			_, err := s.CommitReady(ctx, reserve(t, s, k, dead.Owner()))
			require.NoError(t, err)
		}
	}
	require.NoError(t, dead.Close(ctx))

	var wg sync.WaitGroup
	stats := make([]store.ReclaimStats, 2)
	for i, by := range []*store.Registration{a, b} {
		wg.Go(func() {
			st, err := s.Reclaim(ctx, by.Owner())
			assert.NoError(t, err)
			stats[i] = st
		})
	}
	wg.Wait()
	assert.Equal(t, 20, stats[0].Released+stats[1].Released, "every record released exactly once")
	assert.Equal(t, 1, stats[0].DeadIncarnations+stats[1].DeadIncarnations, "one reclaimer took the registration")
	for i := range 20 {
		got, err := s.Lookup(ctx, key("c"+string(rune('a'+i))))
		require.NoError(t, err)
		assert.Equal(t, store.StateMissing, got.State)
	}
}

func TestReclaimLeavesARecordThatChangedHands(t *testing.T) {
	s := newStore(t)
	dead := register(t, s, "dead", store.LeaseOptions{})
	live := register(t, s, "live", store.LeaseOptions{})
	rec, err := s.CommitReady(ctx, reserve(t, s, key("r1"), dead.Owner()))
	require.NoError(t, err)
	require.NoError(t, dead.Close(ctx))
	// A formal release by the reclaimer, then a fresh creation by a live node.
	_, err = s.Reclaim(ctx, live.Owner())
	require.NoError(t, err)
	_, err = s.CommitReady(ctx, reserve(t, s, key("r1"), live.Owner()))
	require.NoError(t, err)
	// The old record's fence no longer holds for anyone.
	require.ErrorIs(t, s.Release(ctx, key("r1"), rec, store.ReleaseOwnerLost), store.ErrFenced)
	got, err := s.Lookup(ctx, key("r1"))
	require.NoError(t, err)
	assert.Equal(t, store.StateReady, got.State)
	assert.Equal(t, live.Owner(), got.Record.Owner)
}

func TestGroupCommitSharesRoundTrips(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	const n = 256
	revs := make([]int64, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := s.Reserve(ctx, key(fmt.Sprint("gc-", i)), sdk.KindInstance, reg.Owner())
			if assert.NoError(t, err) && assert.True(t, r.Won) {
				revs[i] = r.Reservation.Revision
			}
		})
	}
	close(start)
	wg.Wait()
	distinct := map[int64]bool{}
	for _, r := range revs {
		distinct[r] = true
	}
	// Writes of one transaction share its revision.
	assert.Less(t, len(distinct), n/2, "%d creations took %d transactions", n, len(distinct))
	t.Logf("%d creations in %d transactions", n, len(distinct))
}

func TestGroupCommitOneLoserNeverFailsAnother(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	taken := reserve(t, s, key("taken"), reg.Owner())
	for trial := range 20 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]store.ReserveResult, 32)
		for i := range results {
			wg.Go(func() {
				<-start
				k := key(fmt.Sprintf("fresh-%d-%d", trial, i))
				if i%4 == 0 {
					k = key("taken")
				}
				r, err := s.Reserve(ctx, k, sdk.KindInstance, reg.Owner())
				assert.NoError(t, err)
				results[i] = r
			})
		}
		close(start)
		wg.Wait()
		for i, r := range results {
			if i%4 == 0 {
				assert.False(t, r.Won)
				assert.Equal(t, taken.Attempt, r.Current.Record.Attempt)
			} else {
				assert.True(t, r.Won, "trial %d: a fresh key is won beside losers", trial)
			}
		}
	}
}

// An owner whose lease ended has every write of a batch fail as it would have alone, and the
// writes of another owner batched beside them are unaffected.
func TestGroupCommitOwnerWithoutLeaseFailsEachOfItsWrites(t *testing.T) {
	s := newStore(t)
	gone := register(t, s, "node-gone", store.LeaseOptions{})
	alive := register(t, s, "node-alive", store.LeaseOptions{})
	const n = 48
	reservations := make([]store.Reservation, n)
	for i := range reservations {
		reservations[i] = reserve(t, s, key(fmt.Sprint("held-", i)), gone.Owner())
	}
	owner := gone.Owner()
	require.NoError(t, gone.Close(ctx))

	for _, mixed := range []bool{false, true} {
		var wg sync.WaitGroup
		start := make(chan struct{})
		commitErrs := make([]error, n)
		reserveErrs := make([]error, n)
		others := make([]store.ReserveResult, n)
		for i := range n {
			wg.Go(func() {
				<-start
				_, commitErrs[i] = s.CommitReady(ctx, reservations[i])
			})
			wg.Go(func() {
				<-start
				_, reserveErrs[i] = s.Reserve(ctx, key(fmt.Sprint("fresh-", mixed, "-", i)), sdk.KindInstance, owner)
			})
			if mixed {
				wg.Go(func() {
					<-start
					var err error
					others[i], err = s.Reserve(ctx, key(fmt.Sprint("other-", i)), sdk.KindInstance, alive.Owner())
					assert.NoError(t, err)
				})
			}
		}
		close(start)
		wg.Wait()
		for i := range n {
			assert.ErrorIs(t, commitErrs[i], store.ErrFenced, "mixed=%v: commit %d", mixed, i)
			assert.ErrorIs(t, reserveErrs[i], store.ErrFenced, "mixed=%v: reserve %d", mixed, i)
			if mixed {
				assert.True(t, others[i].Won, "reserve %d by the live owner", i)
			}
		}
	}
	for i := range n {
		res, err := s.Lookup(ctx, key(fmt.Sprint("fresh-false-", i)))
		require.NoError(t, err)
		assert.Equal(t, store.StateMissing, res.State, "a fenced reservation wrote nothing")
	}
}

func TestClosedStoreRefusesWrites(t *testing.T) {
	s := newStore(t)
	reg := register(t, s, "node-a", store.LeaseOptions{})
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err := s.Reserve(ctx, key("x"), sdk.KindInstance, reg.Owner())
	require.ErrorIs(t, err, store.ErrStoreClosed)
}
