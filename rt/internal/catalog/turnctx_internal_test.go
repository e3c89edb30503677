package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A one-way turn's context ends with its Spot, never with its sender, and its cause is the
// Spot's end: the sender's cancellation, with a cause of its own once Send returned, is not
// this turn's, for the turn's context and for those derived from it.
func TestF10_AOneWayTurnsCauseIsItsSpotsEndNotItsSenders(t *testing.T) {
	a := &activation{cat: &Catalog{ctx: context.Background()}}
	sender, cancelSender := context.WithCancelCause(context.WithValue(context.Background(), senderKey{}, "request"))
	turn := a.turnContext(sender)
	derived, cancelDerived := context.WithCancel(turn)
	defer cancelDerived()
	cancelSender(errors.New("the sender's request ended"))
	require.NoError(t, turn.Err(), "the turn's context does not end with its sender")
	require.Equal(t, "request", turn.Value(senderKey{}), "it carries the sender's values")

	a.teardown() // the Spot closes
	<-derived.Done()
	for _, ctx := range []context.Context{turn, derived} {
		require.ErrorIs(t, ctx.Err(), context.Canceled)
		require.Equal(t, context.Canceled, context.Cause(ctx), "the turn ended because its Spot did")
	}
}

type senderKey struct{}

// deadlineAt is a request context that answers for a reading of the clock it is given, as the
// transport's does.
type deadlineAt struct {
	context.Context
	deadline time.Time
}

func (c deadlineAt) ErrAt(now time.Time) error {
	if !now.Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// A turn asks whether its caller gave up at the reading of the clock its lease check took: a
// context that can answer for that reading is asked for it, any other for its Err.
func TestATurnChecksItsCallersDeadlineAtItsLeaseChecksReading(t *testing.T) {
	now := time.Now()
	ctx := deadlineAt{Context: context.Background(), deadline: now.Add(time.Second)}
	require.NoError(t, errAt(ctx, now))
	require.ErrorIs(t, errAt(ctx, now.Add(time.Second)), context.DeadlineExceeded, "the reading decides, not a clock of its own")

	canceled, cancel := context.WithCancel(context.Background())
	require.NoError(t, errAt(canceled, now.Add(time.Hour)), "a plain context answers its Err")
	cancel()
	require.ErrorIs(t, errAt(canceled, now), context.Canceled)
}
