package exec_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/exec"
)

// carrier is a context that carries a request turn's identity, as a peer's request's does.
type carrier struct {
	context.Context
	turn exec.RequestTurn
}

func (c *carrier) RequestTurn() *exec.RequestTurn { return &c.turn }

func (c *carrier) Value(key any) any {
	if v, ok := exec.RequestTurnValue(key, &c.turn); ok {
		return v
	}
	return c.Context.Value(key)
}

// hider names no turn, even where its parent names one, as a one-way message's turn does.
type hider struct{ context.Context }

func (h hider) Value(key any) any {
	if v, ok := exec.RequestTurnValue(key, nil); ok {
		return v
	}
	return h.Context.Value(key)
}

type otherKey struct{}

// F8: a context names at most one turn, from the turn's start on.
func TestF8_AContextNamesOneTurnFromItsStart(t *testing.T) {
	c := &carrier{Context: context.Background()}
	assert.Nil(t, exec.RequestTurnOf(c), "no turn began with it yet")
	require.True(t, c.turn.Begin(true))
	assert.Same(t, &c.turn, exec.RequestTurnOf(c))
	assert.True(t, c.turn.Nested())
	assert.False(t, c.turn.Begin(false), "a second turn does not take it over")
	assert.True(t, c.turn.Nested(), "the refused Begin changed nothing")

	plain := &carrier{Context: context.Background()}
	require.True(t, plain.turn.Begin(false))
	assert.False(t, plain.turn.Nested())
}

// F8: a context derived from a turn's (a timeout, a value) names the turn; the nearest turn
// is the one named; a context that hides its parent's turn names none.
func TestF8_ATurnIsFoundThroughDerivedContexts(t *testing.T) {
	outer := &carrier{Context: context.WithValue(context.Background(), otherKey{}, "v")}
	require.True(t, outer.turn.Begin(false))
	derived, cancel := context.WithTimeout(context.WithValue(outer, otherKey{}, "w"), time.Minute)
	defer cancel()
	assert.Same(t, &outer.turn, exec.RequestTurnOf(derived))
	assert.Equal(t, "w", derived.Value(otherKey{}), "other keys pass through")
	assert.Equal(t, "v", outer.Value(otherKey{}))

	inner := &carrier{Context: derived}
	assert.Same(t, &outer.turn, exec.RequestTurnOf(inner), "an unset carrier passes its parent's turn on")
	require.True(t, inner.turn.Begin(false))
	assert.Same(t, &inner.turn, exec.RequestTurnOf(inner), "the nearest turn is named")
	assert.Same(t, &inner.turn, exec.RequestTurnOf(context.WithValue(inner, otherKey{}, "x")))

	hidden := hider{derived}
	assert.Nil(t, exec.RequestTurnOf(hidden))
	assert.Nil(t, exec.RequestTurnOf(context.WithValue(hidden, otherKey{}, "y")))
	assert.Equal(t, "w", hidden.Value(otherKey{}))

	v, ok := exec.RequestTurnValue(otherKey{}, &outer.turn)
	assert.False(t, ok, "a carrier answers only for its turn's key")
	assert.Nil(t, v)
}
