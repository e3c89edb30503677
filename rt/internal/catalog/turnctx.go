package catalog

import (
	"context"
	"time"
	"unsafe"
)

// turnKey marks a context as a Spot's own: its value is the activation.
type turnKey struct{}

// spotCtx is the context of a one-way message's turn and of a timer's run. It carries the
// sender's values but none of its deadline or cancellation — an admitted one-way message runs
// on after its sender has gone — and it ends when the Spot ends: a close, the end of the owner
// lease, a forced stop. It names the activation, so that a request the turn makes of its own
// Spot, which would wait for the turn itself, is refused instead of hanging.
//
// A request's turn runs with its caller's context instead, which bounds it; a request of the
// Spot to itself is recognised by that very context (see deliver).
type spotCtx struct {
	values context.Context
	a      *activation
}

// Deadline implements context.Context: none.
func (c *spotCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context: the Spot's end.
func (c *spotCtx) Done() <-chan struct{} { return c.a.context().Done() }

// Err implements context.Context.
func (c *spotCtx) Err() error { return c.a.context().Err() }

// Value implements context.Context.
func (c *spotCtx) Value(key any) any {
	if key == (turnKey{}) {
		return c.a
	}
	return c.values.Value(key)
}

// AfterFunc lets contexts derived from this one hang off the Spot's end directly, without the
// goroutine the context package starts for a parent it does not know.
func (c *spotCtx) AfterFunc(f func()) func() bool { return context.AfterFunc(c.a.context(), f) }

// spotContext is the context for a turn of a whose sender's context is values: one shared by
// every such turn when values carries nothing (a timer, a Send with a background context), so
// that those turns allocate nothing.
func (a *activation) spotContext(values context.Context) context.Context {
	if !bare(values) {
		return &spotCtx{values: values, a: a}
	}
	if sc := a.bare.Load(); sc != nil {
		return sc
	}
	a.bare.CompareAndSwap(nil, &spotCtx{values: context.Background(), a: a})
	return a.bare.Load()
}

// turnOf returns the activation whose Spot context ctx is, or derives from, if any.
func turnOf(ctx context.Context) *activation {
	if sc, ok := ctx.(*spotCtx); ok {
		return sc.a
	}
	a, _ := ctx.Value(turnKey{}).(*activation)
	return a
}

// requestTurnKey marks the context of a request's turn that telemetry gave a span: the calls the
// handler makes derive new contexts from it (their client spans), so the turn is recognised by
// this mark, which lives as long as the turn, instead of by the context's identity.
type requestTurnKey struct{}

// requestTurn is the mark; its address is the turn's identity while the turn runs.
type requestTurn struct{ _ byte }

// markRequestTurn returns ctx marked as a request's turn, and the identity to store for it.
func markRequestTurn(ctx context.Context) (context.Context, uintptr, *requestTurn) {
	m := &requestTurn{}
	return context.WithValue(ctx, requestTurnKey{}, m), uintptr(unsafe.Pointer(m)), m
}

// requestTurnOf returns the identity of the request turn whose context ctx derives from, or 0.
func requestTurnOf(ctx context.Context) uintptr {
	if m, ok := ctx.Value(requestTurnKey{}).(*requestTurn); ok {
		return uintptr(unsafe.Pointer(m))
	}
	return 0
}

// identity is what tells two contexts apart without holding either: the address of the value
// an interface holds. Two live contexts with the same identity are the same context, and
// reading it allocates nothing, which keeps the request path free of allocations.
func identity(ctx context.Context) uintptr {
	return uintptr((*[2]unsafe.Pointer)(unsafe.Pointer(&ctx))[1])
}

// bare reports whether ctx carries nothing: no values, no deadline, no cancellation.
func bare(ctx context.Context) bool { return ctx == context.Background() || ctx == context.TODO() }
