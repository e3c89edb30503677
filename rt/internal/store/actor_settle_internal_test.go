package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

// The Actor writes are settled like the Spot writes (settle_internal_test.go): a write whose
// answer was lost after etcd applied it is reported as applied and not written again; one
// that etcd never saw is written again while its fence holds.

func actorKey(id string) ActorKey { return ActorKey{Type: "game.Pawn", ID: id} }

func readyHostOf(t *testing.T, s *Etcd, k SpotKey, owner Owner) Host {
	t.Helper()
	return SpotHost(k, mustReady(t, s, k, owner))
}

func lookupActor(t *testing.T, s *Etcd, k ActorKey) (ActorLocation, bool) {
	t.Helper()
	loc, ok, err := s.readActor(ctx, k)
	require.NoError(t, err)
	return loc, ok
}

func TestK1_AmbiguousSpawnIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)
	owner := registerNode(t, s, "n").Owner()
	host := readyHostOf(t, s, spot("host"), owner)

	for name, how := range map[string]fault{"applied, answer lost": loseAnswer, "not applied": failUnsent} {
		t.Run(name, func(t *testing.T) {
			k := actorKey(name)
			f.sent()
			f.add(step{fault: how})
			loc, err := s.Spawn(ctx, k, host)
			require.NoError(t, err)
			want := map[fault]int{loseAnswer: 1, failUnsent: 2}[how]
			assert.Equal(t, want, f.sent(), "an applied spawn is not written again")
			got, ok := lookupActor(t, s, k)
			require.True(t, ok)
			assert.Equal(t, got, loc)
		})
	}
	t.Run("not applied, another spawn won meanwhile: already exists", func(t *testing.T) {
		k := actorKey("raced")
		f.add(step{fault: failUnsent, then: func() {
			_, err := other.Spawn(ctx, k, host)
			require.NoError(t, err)
		}})
		_, err := s.Spawn(ctx, k, host)
		require.ErrorIs(t, err, sdk.ErrAlreadyExists)
	})
	for name, how := range map[string]fault{"applied": loseAnswer, "not applied": failUnsent} {
		t.Run(name+", caller gone: failed, no record left", func(t *testing.T) {
			k := actorKey("gone " + name)
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			f.add(step{fault: how, then: cancel})
			_, err := s.Spawn(cctx, k, host)
			require.ErrorIs(t, err, context.Canceled)
			_, ok := lookupActor(t, s, k)
			assert.False(t, ok)
			keys, err := s.HostActors(ctx, host.HostRef)
			require.NoError(t, err)
			assert.NotContains(t, keys, k)
		})
	}
	t.Run("no answer in time: outcome unknown, nothing written", func(t *testing.T) {
		f.setAlways(failUnsent)
		defer f.setAlways(pass)
		s.settle = 300 * time.Millisecond
		defer func() { s.settle = 5 * time.Second }()
		_, err := s.Spawn(ctx, actorKey("unknown"), host)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
		f.setAlways(pass)
		_, ok := lookupActor(t, s, actorKey("unknown"))
		assert.False(t, ok)
	})
}

func TestAmbiguousActorMoveIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)
	owner := registerNode(t, s, "n").Owner()
	from := readyHostOf(t, s, spot("from"), owner)
	to := readyHostOf(t, s, spot("to"), owner)

	for name, how := range map[string]fault{"applied, answer lost": loseAnswer, "not applied": failUnsent} {
		t.Run(name, func(t *testing.T) {
			loc, err := s.Spawn(ctx, actorKey(name), from)
			require.NoError(t, err)
			f.sent()
			f.add(step{fault: how})
			moved, err := s.MoveActor(ctx, loc, from, to)
			require.NoError(t, err)
			assert.Equal(t, map[fault]int{loseAnswer: 1, failUnsent: 2}[how], f.sent(), "one etcd write per move")
			got, _ := lookupActor(t, s, loc.Key)
			assert.Equal(t, got, moved)
			assert.Equal(t, uint64(2), moved.Generation)
		})
	}
	t.Run("not applied, moved elsewhere meanwhile: fenced", func(t *testing.T) {
		third := readyHostOf(t, s, spot("third"), owner)
		loc, err := s.Spawn(ctx, actorKey("raced"), from)
		require.NoError(t, err)
		var theirs ActorLocation
		f.add(step{fault: failUnsent, then: func() {
			var err error
			theirs, err = other.MoveActor(ctx, loc, from, third)
			require.NoError(t, err)
		}})
		_, err = s.MoveActor(ctx, loc, from, to)
		require.ErrorIs(t, err, ErrFenced)
		got, _ := lookupActor(t, s, loc.Key)
		assert.Equal(t, theirs, got)
	})
}

// A release of a Spot with Actors, whose transactions' answers are lost, leaves neither the
// record nor an Actor behind.
func TestD3_AmbiguousReleaseOfAHostIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	owner := registerNode(t, s, "n").Owner()
	for _, n := range []int{2, memberChunk + 5} {
		for name, how := range map[string]fault{"applied, answer lost": loseAnswer, "not applied": failUnsent} {
			t.Run(fmt.Sprintf("%d Actors, %s", n, name), func(t *testing.T) {
				k := spot(fmt.Sprintf("%d %s", n, name))
				host := readyHostOf(t, s, k, owner)
				for i := range n {
					_, err := s.Spawn(ctx, actorKey(fmt.Sprintf("%s-%d", k.ID, i)), host)
					require.NoError(t, err)
				}
				rec := lookup(t, s, k).Record
				rel, err := s.BeginRelease(ctx, k, rec, ReleaseExplicitClose)
				require.NoError(t, err)
				// The delete with the empty-index compare fails on the Actors; then the
				// transactions that delete them lose their answers.
				f.add(step{fault: pass}, step{fault: how}, step{fault: how})
				require.NoError(t, s.FinishRelease(ctx, k, rel))
				assert.Equal(t, StateMissing, lookup(t, s, k).State)
				keys, err := s.HostActors(ctx, host.HostRef)
				require.NoError(t, err)
				assert.Empty(t, keys)
				for i := range n {
					_, ok := lookupActor(t, s, actorKey(fmt.Sprintf("%s-%d", k.ID, i)))
					assert.False(t, ok)
				}
			})
		}
	}
}

func TestAmbiguousFenceActorIsSettled(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)
	owner := registerNode(t, s, "n").Owner()
	from := readyHostOf(t, s, spot("fence-from"), owner)
	to := readyHostOf(t, s, spot("fence-to"), owner)

	for name, how := range map[string]fault{"applied, answer lost": loseAnswer, "not applied": failUnsent} {
		t.Run(name, func(t *testing.T) {
			loc, err := s.Spawn(ctx, actorKey("fence-"+name), from)
			require.NoError(t, err)
			f.sent()
			f.add(step{fault: how})
			fenced, err := s.FenceActor(ctx, loc)
			require.NoError(t, err)
			assert.Equal(t, map[fault]int{loseAnswer: 1, failUnsent: 2}[how], f.sent(), "one etcd write per fence")
			got, _ := lookupActor(t, s, loc.Key)
			assert.Equal(t, got, fenced)
			assert.Greater(t, got.Revision, loc.Revision)
			assert.Equal(t, loc.Generation, got.Generation)
		})
	}
	t.Run("not applied, moved meanwhile: fenced", func(t *testing.T) {
		loc, err := s.Spawn(ctx, actorKey("fence-raced"), from)
		require.NoError(t, err)
		var theirs ActorLocation
		f.add(step{fault: failUnsent, then: func() {
			var err error
			theirs, err = other.MoveActor(ctx, loc, from, to)
			require.NoError(t, err)
		}})
		_, err = s.FenceActor(ctx, loc)
		require.ErrorIs(t, err, ErrFenced)
		got, _ := lookupActor(t, s, loc.Key)
		assert.Equal(t, theirs, got, "the move stands")
	})
}

// B8: a record of a dead host's Actor that is rewritten as it was while the reclaim deletes it
// (FenceActor, by a closing Spot) still names the dead host: the reclaim deletes it at its new
// revision rather than leaving it until another node dies.
func TestB8_AReclaimDeletesARecordFencedUnderIt(t *testing.T) {
	s, f := newFaultyStore(t)
	other := plainStore(t, s)
	dead := registerNode(t, s, "dead")
	live := registerNode(t, s, "live")
	loc, err := s.Spawn(ctx, actorKey("fenced-under-reclaim"), EntryHost("game.Lobby", dead.Owner()))
	require.NoError(t, err)
	require.NoError(t, dead.Close(ctx))
	f.sent()
	f.add(step{fault: failUnsent, then: func() {
		_, err := other.FenceActor(ctx, loc)
		require.NoError(t, err)
	}})
	stats, err := s.Reclaim(ctx, live.Owner())
	require.NoError(t, err)
	assert.Equal(t, 1, stats.ActorsReleased)
	_, ok := lookupActor(t, s, loc.Key)
	assert.False(t, ok, "the record of the dead host's Actor is gone")
}
