package catalog

import (
	"context"
	"errors"
	"testing"

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
