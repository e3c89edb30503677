package store_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/store"
)

// A relocation's commit gives the record to the target in one write, generation + 1, keeping
// its incarnation; any change of the record or of either lease fences it (F7: nothing is
// half-done).
func TestF7_MoveSpotIsOneFencedWrite(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	k := key("moving")
	rec, err := s.CommitReady(ctx, reserve(t, s, k, a.Owner()))
	require.NoError(t, err)

	_, err = s.MoveSpot(ctx, k, rec, b.Owner(), 7)
	require.ErrorIs(t, err, store.ErrFenced, "no consent of the target")
	require.NoError(t, s.ConsentArrival(ctx, k, b.Owner(), 6))
	_, err = s.MoveSpot(ctx, k, rec, b.Owner(), 7)
	require.ErrorIs(t, err, store.ErrFenced, "the target consented to another unit")
	require.NoError(t, s.ConsentArrival(ctx, k, b.Owner(), 7))

	stale := rec
	stale.Revision--
	_, err = s.MoveSpot(ctx, k, stale, b.Owner(), 7)
	require.ErrorIs(t, err, store.ErrFenced, "an older revision of the record")
	wrongLease := b.Owner()
	wrongLease.Lease++
	_, err = s.MoveSpot(ctx, k, rec, wrongLease, 7)
	require.ErrorIs(t, err, store.ErrFenced, "a target registration that does not hold its node")
	_, err = s.MoveSpot(ctx, k, rec, a.Owner(), 7)
	require.Error(t, err, "a move to its own owner")

	moved, err := s.MoveSpot(ctx, k, rec, b.Owner(), 7)
	require.NoError(t, err)
	assert.Equal(t, b.Owner(), moved.Owner)
	assert.Equal(t, rec.Generation+1, moved.Generation)
	assert.Equal(t, rec.Incarnation, moved.Incarnation, "the same incarnation: its Actors' records still name it")
	assert.EqualValues(t, 7, moved.Attempt)
	res, err := s.Lookup(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, store.StateReady, res.State)
	assert.Equal(t, moved, res.Record)

	_, err = s.MoveSpot(ctx, k, rec, b.Owner(), 7)
	require.ErrorIs(t, err, store.ErrFenced, "the same move again: the record moved on")
	withdrawn, err := s.WithdrawArrival(ctx, k, 7)
	require.NoError(t, err)
	assert.False(t, withdrawn, "the commit took the consent")
}

// A target that withdraws its consent cannot be given the Spot by a commit that comes later
// (the source's answer was lost, and it asks again).
func TestF7_WithdrawnConsentFencesALateCommit(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	k := key("late")
	rec, err := s.CommitReady(ctx, reserve(t, s, k, a.Owner()))
	require.NoError(t, err)
	require.NoError(t, s.ConsentArrival(ctx, k, b.Owner(), 5))
	withdrawn, err := s.WithdrawArrival(ctx, k, 5)
	require.NoError(t, err)
	assert.True(t, withdrawn)
	_, err = s.MoveSpot(ctx, k, rec, b.Owner(), 5)
	require.ErrorIs(t, err, store.ErrFenced)
	res, err := s.Lookup(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, a.Owner(), res.Record.Owner, "it stayed with its source")
}

// The source's lease is part of the fence: a source whose lease ended moves nothing.
func TestF7_MoveSpotOfAnEndedOwnerIsFenced(t *testing.T) {
	s := newStore(t)
	a := register(t, s, "node-a", store.LeaseOptions{})
	b := register(t, s, "node-b", store.LeaseOptions{})
	k := key("orphan")
	rec, err := s.CommitReady(ctx, reserve(t, s, k, a.Owner()))
	require.NoError(t, err)
	require.NoError(t, s.ConsentArrival(ctx, k, b.Owner(), 9))
	require.NoError(t, a.Revoke(ctx))
	_, err = s.MoveSpot(ctx, k, rec, b.Owner(), 9)
	require.ErrorIs(t, err, store.ErrFenced)
}
