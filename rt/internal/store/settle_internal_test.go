package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

// Each fenced write is tried with its answer lost after etcd applied it (it must be reported as
// applied, with the record as stored, and not written twice) and with an ambiguous failure
// that etcd never saw (it must be written again while its fence holds, and be fenced
// otherwise).

func TestB5_AmbiguousReserveIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)

	t.Run("applied, answer lost: won as stored", func(t *testing.T) {
		owner := registerNode(t, s, "a1").Owner()
		f.add(step{fault: loseAnswer})
		r, err := s.Reserve(ctx, spot("a1"), sdk.KindInstance, owner)
		require.NoError(t, err)
		require.True(t, r.Won)
		assert.Equal(t, 1, f.sent(), "the applied reservation is not written again")
		got := lookup(t, s, spot("a1"))
		require.Equal(t, StateCreating, got.State)
		assert.Equal(t, wonFrom(spot("a1"), got.Record).Reservation, r.Reservation)
	})
	t.Run("not applied: written again", func(t *testing.T) {
		owner := registerNode(t, s, "a2").Owner()
		f.add(step{fault: failUnsent})
		r, err := s.Reserve(ctx, spot("a2"), sdk.KindInstance, owner)
		require.NoError(t, err)
		require.True(t, r.Won)
		assert.Equal(t, 2, f.sent())
		got := lookup(t, s, spot("a2"))
		require.Equal(t, StateCreating, got.State)
		assert.Equal(t, wonFrom(spot("a2"), got.Record).Reservation, r.Reservation)
	})
	t.Run("not applied, another creator won meanwhile: lost", func(t *testing.T) {
		owner := registerNode(t, s, "a3").Owner()
		var theirs Reservation
		f.add(step{fault: failUnsent, then: func() { theirs = mustReserve(t, other, spot("a3"), owner) }})
		r, err := s.Reserve(ctx, spot("a3"), sdk.KindInstance, owner)
		require.NoError(t, err)
		require.False(t, r.Won)
		assert.Equal(t, StateCreating, r.Current.State)
		assert.Equal(t, theirs.Attempt, r.Current.Record.Attempt)
	})
	t.Run("not applied, owner lease ended meanwhile: fenced, nothing written", func(t *testing.T) {
		reg := registerNode(t, s, "a4")
		f.add(step{fault: failUnsent, then: endLease(t, s, reg)})
		_, err := s.Reserve(ctx, spot("a4"), sdk.KindInstance, reg.Owner())
		require.ErrorIs(t, err, ErrFenced)
		assert.NotErrorIs(t, err, sdk.ErrStoreUnavailable)
		assert.Equal(t, StateMissing, lookup(t, s, spot("a4")).State)
	})
	// A Reserve that fails leaves no record, whether or not its first write was applied.
	for name, how := range map[string]fault{"applied": loseAnswer, "not applied": failUnsent} {
		t.Run(name+", caller gone: failed, no record left", func(t *testing.T) {
			owner := registerNode(t, s, "gone").Owner()
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			f.add(step{fault: how, then: cancel})
			_, err := s.Reserve(cctx, spot("gone"), sdk.KindInstance, owner)
			require.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, StateMissing, lookup(t, s, spot("gone")).State)
		})
	}
	t.Run("no answer in time: outcome unknown, nothing written", func(t *testing.T) {
		owner := registerNode(t, s, "a5").Owner()
		f.setAlways(failUnsent)
		defer f.setAlways(pass)
		s.settle = 300 * time.Millisecond
		defer func() { s.settle = 5 * time.Second }()
		_, err := s.Reserve(ctx, spot("a5"), sdk.KindInstance, owner)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
		f.setAlways(pass)
		assert.Equal(t, StateMissing, lookup(t, s, spot("a5")).State)
	})
}

func TestB7_AmbiguousCommitReadyIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)

	t.Run("applied, answer lost: Ready as stored", func(t *testing.T) {
		owner := registerNode(t, s, "r1").Owner()
		res := mustReserve(t, s, spot("r1"), owner)
		f.sent()
		f.add(step{fault: loseAnswer})
		rec, err := s.CommitReady(ctx, res)
		require.NoError(t, err)
		assert.Equal(t, 1, f.sent(), "the applied commit is not written again")
		got := lookup(t, s, spot("r1"))
		require.Equal(t, StateReady, got.State)
		assert.Equal(t, got.Record, rec)
	})
	t.Run("not applied, again and again: written until applied", func(t *testing.T) {
		owner := registerNode(t, s, "r2").Owner()
		res := mustReserve(t, s, spot("r2"), owner)
		f.sent()
		f.add(step{fault: failUnsent}, step{fault: failUnsent}, step{fault: failUnsent}, step{fault: failUnsent}, step{fault: failUnsent})
		rec, err := s.CommitReady(ctx, res)
		require.NoError(t, err)
		assert.Equal(t, 6, f.sent())
		got := lookup(t, s, spot("r2"))
		require.Equal(t, StateReady, got.State)
		assert.Equal(t, got.Record, rec)
	})
	t.Run("not applied, owner lease ended meanwhile: fenced", func(t *testing.T) {
		reg := registerNode(t, s, "r3")
		res := mustReserve(t, s, spot("r3"), reg.Owner())
		f.add(step{fault: failUnsent, then: endLease(t, s, reg)})
		_, err := s.CommitReady(ctx, res)
		require.ErrorIs(t, err, ErrFenced)
		got := lookup(t, s, spot("r3"))
		assert.Equal(t, PhaseCreating, got.Record.Phase, "nothing was committed")
	})
	t.Run("not applied, record released meanwhile: fenced", func(t *testing.T) {
		owner := registerNode(t, s, "r4").Owner()
		res := mustReserve(t, s, spot("r4"), owner)
		creating := Record{Kind: res.Kind, Phase: PhaseCreating, Owner: owner, Attempt: res.Attempt,
			Incarnation: res.Incarnation, Revision: res.Revision}
		f.add(step{fault: failUnsent, then: func() {
			require.NoError(t, other.Release(ctx, spot("r4"), creating, ReleaseCreationFailed))
		}})
		_, err := s.CommitReady(ctx, res)
		require.ErrorIs(t, err, ErrFenced)
		assert.Equal(t, StateMissing, lookup(t, s, spot("r4")).State)
	})
	t.Run("no answer before the caller's deadline: outcome unknown", func(t *testing.T) {
		owner := registerNode(t, s, "r5").Owner()
		res := mustReserve(t, s, spot("r5"), owner)
		f.setAlways(failUnsent)
		defer f.setAlways(pass)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := s.CommitReady(cctx, res)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestD3_AmbiguousBeginReleaseIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)

	for name, how := range map[string]fault{"applied, answer lost": loseAnswer, "not applied": failUnsent} {
		t.Run(name+": Releasing as stored", func(t *testing.T) {
			owner := registerNode(t, s, "b1").Owner()
			rec := mustReady(t, s, spot("b1"), owner)
			f.sent()
			f.add(step{fault: how})
			rel, err := s.BeginRelease(ctx, spot("b1"), rec, ReleaseExplicitClose)
			require.NoError(t, err)
			want := map[fault]int{loseAnswer: 1, failUnsent: 2}[how]
			assert.Equal(t, want, f.sent(), "written again only when it was not applied")
			got := lookup(t, s, spot("b1"))
			require.Equal(t, EvidenceReleasing, got.Evidence)
			assert.Equal(t, got.Record, rel, "the record as stored, with its current revision")
			assert.Equal(t, ReleaseExplicitClose, rel.ReleaseTag)
			require.NoError(t, s.FinishRelease(ctx, spot("b1"), rel), "the returned record fences the next step")
		})
	}
	t.Run("not applied, owner lease ended meanwhile: fenced", func(t *testing.T) {
		reg := registerNode(t, s, "b2")
		rec := mustReady(t, s, spot("b2"), reg.Owner())
		f.add(step{fault: failUnsent, then: endLease(t, s, reg)})
		_, err := s.BeginRelease(ctx, spot("b2"), rec, ReleaseExplicitClose)
		require.ErrorIs(t, err, ErrFenced)
		assert.Equal(t, PhaseReady, lookup(t, s, spot("b2")).Record.Phase)
	})
	t.Run("not applied, released by another operation meanwhile: fenced", func(t *testing.T) {
		owner := registerNode(t, s, "b3").Owner()
		rec := mustReady(t, s, spot("b3"), owner)
		f.add(step{fault: failUnsent, then: func() {
			_, err := other.BeginRelease(ctx, spot("b3"), rec, ReleaseIdle)
			require.NoError(t, err)
		}})
		_, err := s.BeginRelease(ctx, spot("b3"), rec, ReleaseExplicitClose)
		require.ErrorIs(t, err, ErrFenced)
		assert.Equal(t, ReleaseIdle, lookup(t, s, spot("b3")).Record.ReleaseTag)
	})
	t.Run("caller cancelled: outcome unknown, not store unavailability", func(t *testing.T) {
		owner := registerNode(t, s, "b4").Owner()
		rec := mustReady(t, s, spot("b4"), owner)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		f.add(step{fault: failUnsent, then: cancel})
		_, err := s.BeginRelease(cctx, spot("b4"), rec, ReleaseExplicitClose)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, sdk.ErrStoreUnavailable)
	})
}

func TestD3_AmbiguousFinishReleaseIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)
	releasing := func(t *testing.T, id string, owner Owner) Record {
		t.Helper()
		rel, err := s.BeginRelease(ctx, spot(id), mustReady(t, s, spot(id), owner), ReleaseExplicitClose)
		require.NoError(t, err)
		f.sent()
		return rel
	}

	for name, how := range map[string]fault{"applied, answer lost": loseAnswer, "not applied": failUnsent} {
		t.Run(name+": released", func(t *testing.T) {
			owner := registerNode(t, s, "f1").Owner()
			rel := releasing(t, "f1", owner)
			f.add(step{fault: how})
			require.NoError(t, s.FinishRelease(ctx, spot("f1"), rel))
			want := map[fault]int{loseAnswer: 1, failUnsent: 2}[how]
			assert.Equal(t, want, f.sent(), "written again only when it was not applied")
			assert.Equal(t, StateMissing, lookup(t, s, spot("f1")).State)
		})
	}
	t.Run("applied, and created again meanwhile: released, the new record untouched", func(t *testing.T) {
		owner := registerNode(t, s, "f2").Owner()
		rel := releasing(t, "f2", owner)
		var again Reservation
		f.add(step{fault: loseAnswer, then: func() { again = mustReserve(t, other, spot("f2"), owner) }})
		require.NoError(t, s.FinishRelease(ctx, spot("f2"), rel))
		got := lookup(t, s, spot("f2"))
		require.Equal(t, StateCreating, got.State)
		assert.Equal(t, again.Attempt, got.Record.Attempt)
	})
	t.Run("not applied, owner lease ended meanwhile: fenced", func(t *testing.T) {
		reg := registerNode(t, s, "f3")
		rel := releasing(t, "f3", reg.Owner())
		f.add(step{fault: failUnsent, then: endLease(t, s, reg)})
		require.ErrorIs(t, s.FinishRelease(ctx, spot("f3"), rel), ErrFenced)
		assert.Equal(t, PhaseReleasing, lookup(t, s, spot("f3")).Record.Phase, "the record stays for the reclaimer")
	})
	t.Run("no answer before the caller's deadline: outcome unknown", func(t *testing.T) {
		owner := registerNode(t, s, "f4").Owner()
		rel := releasing(t, "f4", owner)
		f.setAlways(failUnsent)
		defer f.setAlways(pass)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		err := s.FinishRelease(cctx, spot("f4"), rel)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	})
}

func TestD3_AmbiguousReleaseIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	owner := registerNode(t, s, "node").Owner()
	rec := mustReady(t, s, spot("r"), owner)
	f.add(step{fault: loseAnswer}, step{fault: loseAnswer})
	require.NoError(t, s.Release(ctx, spot("r"), rec, ReleaseIdle))
	assert.Equal(t, StateMissing, lookup(t, s, spot("r")).State)
}

// The reclaimer's two steps (Releasing with OwnerLost, then the delete) are settled like the
// owner's.
func TestB8_AmbiguousReclaimWritesAreSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	dead := registerNode(t, s, "dead")
	live := registerNode(t, s, "live")
	mustReady(t, s, spot("c1"), dead.Owner())
	mustReserve(t, s, spot("c2"), dead.Owner()) // left Creating by a creator that dies (B8)
	require.NoError(t, dead.Close(ctx))
	f.sent()
	f.add(
		step{fault: loseAnswer}, // c1 Releasing: applied
		step{fault: loseAnswer}, // c1 delete: applied
		step{fault: failUnsent}, // c2 Releasing: not applied, so written again
		step{fault: pass},
		step{fault: failUnsent}, // c2 delete: not applied, so written again
	)
	stats, err := s.Reclaim(ctx, live.Owner())
	require.NoError(t, err)
	assert.Equal(t, 2, stats.Released)
	assert.Equal(t, 6, f.sent(), "applied writes are not written again")
	for _, id := range []string{"c1", "c2"} {
		assert.Equal(t, StateMissing, lookup(t, s, spot(id)).State, id)
	}
}
