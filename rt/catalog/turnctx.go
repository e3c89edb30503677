package catalog

import (
	"context"
	"sync"
	"time"
)

// turnKey marks a context as a turn's: its value is the activation whose turn it is.
type turnKey struct{}

// turnCtx is the context a turn runs with. It carries its caller's values and, for a request,
// the caller's deadline and cancellation (a one-way message runs on after its sender has gone,
// so it takes none of the sender's); it also ends when the Spot ends — a close, the end of the
// owner lease, a forced stop — and when the turn itself ends, as a request's context does in
// gRPC. It names the activation whose turn it is, so that a request of a Spot to itself, which
// would wait for its own turn, is refused instead of hanging.
//
// Its cancellation is made only when someone asks for it (Done, or a context derived from
// it): most turns never do, and then a turn costs one small allocation.
type turnCtx struct {
	caller context.Context // values; deadline and cancellation unless oneWay
	oneWay bool
	a      *activation

	mu     sync.Mutex
	ended  bool
	inner  context.Context // made on first Done: the caller's (or values only) + the Spot's end
	cancel context.CancelFunc
	stop   func() bool // stops the Spot's end from cancelling inner
}

func newTurnCtx(caller context.Context, oneWay bool, a *activation) *turnCtx {
	return &turnCtx{caller: caller, oneWay: oneWay, a: a}
}

// Deadline implements context.Context.
func (c *turnCtx) Deadline() (time.Time, bool) {
	if c.oneWay {
		return time.Time{}, false
	}
	return c.caller.Deadline()
}

// Done implements context.Context.
func (c *turnCtx) Done() <-chan struct{} { return c.arm().Done() }

// Err implements context.Context.
func (c *turnCtx) Err() error {
	c.mu.Lock()
	inner, ended := c.inner, c.ended
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case ended:
		return context.Canceled
	case !c.oneWay && c.caller.Err() != nil:
		return c.caller.Err()
	case c.a.ended():
		return context.Canceled
	}
	return nil
}

// Value implements context.Context. Once armed, the inner context answers, so that contexts
// derived from this one hang off its cancellation directly.
func (c *turnCtx) Value(key any) any {
	if key == (turnKey{}) {
		return c.a
	}
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Value(key)
	}
	return c.caller.Value(key)
}

// arm makes the cancellation: the caller's context (a one-way message: its values only),
// cancelled too when the Spot ends or the turn has ended.
func (c *turnCtx) arm() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner != nil {
		return c.inner
	}
	base := c.caller
	if c.oneWay {
		base = context.WithoutCancel(base)
	}
	c.inner, c.cancel = context.WithCancel(base)
	if c.ended {
		c.cancel()
		return c.inner
	}
	c.stop = context.AfterFunc(c.a.context(), c.cancel)
	return c.inner
}

// end marks the turn over: its context is done from now on, and no longer hangs off the Spot.
func (c *turnCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.cancel != nil {
		c.stop()
		c.cancel()
	}
}

// turnOf returns the activation whose turn ctx belongs to, if any.
func turnOf(ctx context.Context) *activation {
	if tc, ok := ctx.(*turnCtx); ok {
		return tc.a
	}
	a, _ := ctx.Value(turnKey{}).(*activation)
	return a
}
