package catalog

import (
	"context"
	"reflect"
	"time"
	"unsafe"

	"github.com/zlink-go/zlink/rt/internal/exec"
)

// turnKey marks a context as a Spot's own: its value is the activation.
type turnKey struct{}

// spotCtx is the context of a one-way message's turn and of a timer's run. It carries the
// sender's values but none of its deadline or cancellation — an admitted one-way message runs
// on after its sender has gone — and it ends when the Spot ends: a close, the end of the owner
// lease, a forced stop. It names the activation, so that a request the turn makes of its own
// Spot, which would wait for the turn itself, is refused instead of hanging.
//
// A request's turn runs with its caller's context instead, which bounds it, under an identity
// of the turn's (requestTurn) by which a request of the Spot to itself is recognised.
type spotCtx struct {
	values context.Context
	// lookup answers for the sender's values: values without its cancellation, which this
	// context does not have, so that context.Cause, and the contexts derived from this one
	// when it ends, never find the sender's cause.
	lookup context.Context
	a      *activation
}

// newSpotCtx is the Spot context of a for a sender's context values.
func newSpotCtx(values context.Context, a *activation) *spotCtx {
	return &spotCtx{values: values, lookup: context.WithoutCancel(values), a: a}
}

// Deadline implements context.Context: none.
func (c *spotCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context: the Spot's end.
func (c *spotCtx) Done() <-chan struct{} { return c.a.context().Done() }

// Err implements context.Context.
func (c *spotCtx) Err() error { return c.a.context().Err() }

// Value implements context.Context. The sender's request turn, if it sent from one, is not
// this turn's: sending did not make it wait for this one, so a request this turn makes of the
// sender's Spot waits for that turn rather than being taken for a request of a Spot to itself.
// Should the sender's turn then wait for this one (a request of its own that queues behind
// it), the two make a cycle of requests, which its caller's deadline ends as it ends any.
func (c *spotCtx) Value(key any) any {
	if key == (turnKey{}) {
		return c.a
	}
	if v, ok := exec.RequestTurnValue(key, nil); ok {
		return v
	}
	return c.lookup.Value(key)
}

// AfterFunc lets contexts derived from this one hang off the Spot's end directly, without the
// goroutine the context package starts for a parent it does not know.
func (c *spotCtx) AfterFunc(f func()) func() bool { return context.AfterFunc(c.a.context(), f) }

// spotContext is the context for a turn of a whose sender's context is values: one shared by
// every such turn when values carries nothing (a timer, a Send with a background context), so
// that those turns allocate nothing.
//
// A sender's context that is itself a Spot context (a one-way handler or a timer that sends
// with its own) gives its values, not itself: a chain of such sends would otherwise nest one
// context in the next, each keeping its sender's record alive and lengthening every lookup.
// Nothing is lost, since a Spot context adds only its turn's mark, which the new one replaces.
func (a *activation) spotContext(values context.Context) context.Context {
	values = sendersValues(values)
	if !bare(values) {
		return newSpotCtx(values, a)
	}
	if sc := a.bare.Load(); sc != nil {
		return sc
	}
	a.bare.CompareAndSwap(nil, &spotCtx{values: context.Background(), lookup: context.Background(), a: a})
	return a.bare.Load()
}

// turnContext is spotContext for a message's turn, which runs on a's serial queue: the turns
// of one run whose senders' context is the same pointer share one (activation.sent), so that
// a burst of one sender's messages allocates none.
func (a *activation) turnContext(values context.Context) context.Context {
	values = sendersValues(values)
	if bare(values) {
		return a.spotContext(values)
	}
	if c := a.sent; c != nil && c.values == values {
		return c
	}
	if reflect.TypeOf(values).Kind() != reflect.Pointer {
		// A context of a value type may not be comparable (a struct that holds a slice), and
		// == on two of its values would panic: only pointers are kept, which == compares.
		return newSpotCtx(values, a)
	}
	a.sent = newSpotCtx(values, a)
	return a.sent
}

// sendersValues is the context whose values a turn sent with ctx carries: ctx, or the values
// of the Spot context ctx is.
func sendersValues(ctx context.Context) context.Context {
	if sc, ok := ctx.(*spotCtx); ok {
		return sc.values
	}
	return ctx
}

// turnOf returns the activation whose Spot context ctx is, or derives from, if any.
func turnOf(ctx context.Context) *activation {
	if sc, ok := ctx.(*spotCtx); ok {
		return sc.a
	}
	a, _ := ctx.Value(turnKey{}).(*activation)
	return a
}

// requestCtx is the context of a request's turn made with a context that cannot carry the
// turn's identity itself (see requestTurn): its caller's context — values, deadline and
// cancellation — under an identity of its own. A request of the Spot to itself made with it,
// or with a context derived from it, would wait for the turn that makes it, and is recognised
// by that identity; another goroutine that shares the caller's context is not mistaken for the
// turn.
type requestCtx struct {
	context.Context
	turn exec.RequestTurn
}

// RequestTurn implements exec.TurnCarrier.
func (c *requestCtx) RequestTurn() *exec.RequestTurn { return &c.turn }

// Value implements context.Context.
func (c *requestCtx) Value(key any) any {
	if v, ok := exec.RequestTurnValue(key, &c.turn); ok {
		return v
	}
	return c.Context.Value(key)
}

// requestTurn returns the context of a request's turn made with ctx, and the turn's identity,
// begun nested or not. The context of a peer's request, made for that request alone, carries
// the identity itself when the turn is that request's (own): no goroutine but the turn's
// makes requests with it. Any other context gets one of its own around it. The caller keeps
// the identity alive (runtime.KeepAlive) until the activation no longer holds its address.
func requestTurn(ctx context.Context, nested, own bool) (context.Context, *exec.RequestTurn) {
	if own {
		if c, ok := ctx.(exec.TurnCarrier); ok && c.RequestTurn().Begin(nested) {
			return ctx, c.RequestTurn()
		}
	}
	rc := &requestCtx{Context: ctx}
	rc.turn.Begin(nested)
	return rc, &rc.turn
}

// ownContext reports whether ctx is the context of the very request that done answers: a
// peer's request, whose context can carry its turn's identity (requestTurn).
func ownContext(ctx context.Context, done Answer) bool {
	c, ok := ctx.(exec.TurnCarrier)
	if !ok {
		return false
	}
	d, ok := done.(exec.TurnCarrier)
	return ok && d.RequestTurn() == c.RequestTurn()
}

// nestedRequestTurn reports whether ctx names, or derives from a context that names, a
// request's turn that began while the job queue was busy.
func nestedRequestTurn(ctx context.Context) bool {
	t := exec.RequestTurnOf(ctx)
	return t != nil && t.Nested()
}

// requestTurnOf returns the identity of the request turn that ctx names or derives from, or
// 0.
func requestTurnOf(ctx context.Context) uintptr {
	return uintptr(unsafe.Pointer(exec.RequestTurnOf(ctx)))
}

// bare reports whether ctx carries nothing: no values, no deadline, no cancellation.
func bare(ctx context.Context) bool { return ctx == context.Background() || ctx == context.TODO() }
