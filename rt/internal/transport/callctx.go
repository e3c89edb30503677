package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/capacity"
)

// callCtx is the context of a peer's request: it ends at the caller's deadline, when the
// caller cancels, or when the stream ends. The context package's own deadline context arms a
// timer and registers with the stream's context for every request; most handlers never wait
// on Done, so callCtx makes that context only when Done is first asked for (or a context is
// derived from it), and until then answers Err by reading the clock and the stream.
type callCtx struct {
	stream   context.Context
	deadline time.Time // zero: none
	// expires is the deadline on this process's monotonic clock, taken once as the context
	// package's timer would be: a step of the wall clock later does not move it.
	expires time.Time

	mu       sync.Mutex // serializes materialize and cancel
	made     atomic.Pointer[madeCtx]
	canceled atomic.Bool

	// charge, when set, is the request's Core HWM charge, which Value answers for: the handler
	// finds it without a value context around this one: &own when the node has a meter.
	charge *capacity.Charge
	own    capacity.Charge
	// answered is set by the request's first reply; a later one is ignored.
	answered atomic.Bool
}

// madeCtx is the context Done reads, once made.
type madeCtx struct {
	ctx  context.Context
	stop context.CancelFunc
}

// charged returns the context of a request whose Core HWM charge is n bytes, which to takes
// back: one allocation for both. start begins it.
func charged(n int64, to capacity.Releaser) *callCtx {
	c := &callCtx{}
	c.own.Init(n, to)
	c.charge = &c.own
	return c
}

// start begins the context of a request whose caller's deadline is deadline (zero: none), read
// at now, a reading of this process's clock.
func (c *callCtx) start(stream context.Context, deadline, now time.Time) {
	c.stream, c.deadline = stream, deadline
	if !deadline.IsZero() {
		c.expires = now.Add(deadline.Sub(now))
	}
}

// Deadline implements context.Context.
func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

// Done implements context.Context.
func (c *callCtx) Done() <-chan struct{} { return c.materialize().Done() }

// materialize returns the context that Done reads, making it once.
func (c *callCtx) materialize() context.Context {
	if m := c.made.Load(); m != nil {
		return m.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.made.Load(); m != nil {
		return m.ctx
	}
	m := &madeCtx{}
	if c.deadline.IsZero() {
		m.ctx, m.stop = context.WithCancel(c.stream)
	} else {
		// expires, not deadline: Done and Err keep to the one expiry Err has already been
		// answering from, whatever the wall clock did meanwhile.
		m.ctx, m.stop = context.WithDeadline(c.stream, c.expires)
	}
	if c.canceled.Load() {
		m.stop()
	}
	c.made.Store(m)
	return m.ctx
}

// Err implements context.Context.
func (c *callCtx) Err() error {
	if m := c.made.Load(); m != nil {
		return m.ctx.Err()
	}
	if c.canceled.Load() {
		return context.Canceled
	}
	if err := c.stream.Err(); err != nil {
		return err
	}
	// Since reads only the monotonic clock, as expires holds a monotonic reading.
	if !c.expires.IsZero() && time.Since(c.expires) >= 0 {
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements context.Context. Once Done made the context it reads, values come from it,
// so that a context derived from this one attaches to it as to any cancelable context.
func (c *callCtx) Value(key any) any {
	if v, ok := capacity.ChargeValue(key, c.charge); ok {
		return v
	}
	if m := c.made.Load(); m != nil {
		return m.ctx.Value(key)
	}
	return c.stream.Value(key)
}

// cancel ends the context: the caller gave up, or the call is done.
func (c *callCtx) cancel() {
	c.mu.Lock()
	c.canceled.Store(true)
	m := c.made.Load()
	c.mu.Unlock()
	if m != nil {
		m.stop()
	}
}
