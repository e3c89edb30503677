package exec

import (
	"context"
	"sync/atomic"
)

// RequestTurn is the identity of a request's turn, which its handler's context carries: a
// request made with that context, or one derived from it, of the turn's own Spot would wait
// for the turn itself, and is recognised by it. It also says whether the jobs the turn makes
// are nested: the job queue was busy as the turn began, and the turn may hold permits its
// jobs would wait for. A context carries it from the turn's start on; its address is the
// identity.
type RequestTurn struct {
	state atomic.Uint32
}

// The states of a RequestTurn.
const (
	turnUnset = iota
	turnSet
	turnSetNested
)

// Begin makes t a running turn's identity, nested or not, and reports whether it was unset:
// a context names at most one turn.
func (t *RequestTurn) Begin(nested bool) bool {
	s := uint32(turnSet)
	if nested {
		s = turnSetNested
	}
	return t.state.CompareAndSwap(turnUnset, s)
}

// Nested reports whether the jobs of the turn t names are nested.
func (t *RequestTurn) Nested() bool { return t.state.Load() == turnSetNested }

// TurnCarrier is a context that can carry the identity of the turn it was made for, so that
// the turn needs no context of its own around it: the context of a peer's request.
type TurnCarrier interface {
	context.Context
	// RequestTurn returns the identity the context carries, unset until a turn begins it.
	RequestTurn() *RequestTurn
}

// requestTurnKey is the key under which a context answers for the request turn it names, so
// that a context derived from it (a client span, a timeout the handler adds) is known as the
// turn's.
type requestTurnKey struct{}

// RequestTurnValue is what a context that carries t answers for key: t, once a turn began it,
// for the key RequestTurnOf looks up; false for any other key or while t is unset. A nil t
// answers nil for that key: a context that names no turn even where its parent names one.
func RequestTurnValue(key any, t *RequestTurn) (any, bool) {
	if _, ok := key.(requestTurnKey); !ok {
		return nil, false
	}
	if t == nil {
		return nil, true
	}
	if t.state.Load() == turnUnset {
		return nil, false
	}
	return t, true
}

// RequestTurnOf returns the identity of the request turn that ctx names, or derives from a
// context that names, or nil.
func RequestTurnOf(ctx context.Context) *RequestTurn {
	if c, ok := ctx.(TurnCarrier); ok {
		if t := c.RequestTurn(); t.state.Load() != turnUnset {
			return t
		}
	}
	t, _ := ctx.Value(requestTurnKey{}).(*RequestTurn)
	return t
}
