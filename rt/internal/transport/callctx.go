package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/wire"
)

// callCtx is the context of a peer's request: it ends at the caller's deadline, when the
// caller cancels, or when the stream ends. The context package's own deadline context arms a
// timer and registers with the stream's context for every request; most handlers never wait
// on Done, so callCtx makes that context only when Done is first asked for (or a context is
// derived from it), and until then answers Err by reading the clock and the stream. It is also
// the request's Replier and holds its Core HWM charge, and it carries the identity of the
// request's turn (exec.TurnCarrier): one allocation for all of a request's state on the stream.
// It is never pooled, and after admission only the request's turn makes requests with it: the
// identity, begun once, names that turn alone, and a handler may keep the context.
type callCtx struct {
	stream context.Context
	// expires is the caller's deadline (zero: none) on this process's monotonic clock, taken
	// once as the context package's timer would be: a step of the wall clock later does not
	// move it. Its wall clock reading is the caller's deadline.
	expires time.Time

	mu   sync.Mutex // serializes materialize, cancel and the first error Err answers
	made atomic.Pointer[madeCtx]
	// flags holds callCanceled, callAnswered and the error Err answered first, if any.
	flags atomic.Uint32
	// taking is set while the stream's reader takes the request in (Handle): its waits then
	// hold up the stream. held is what the stream knows of those waits (heldTooLong), under
	// the stream's mu.
	taking atomic.Bool
	held   heldReader
	// wallDeadline says the deadline came as a wall clock time alone (the caller's absolute
	// deadline), which Deadline answers as it came.
	wallDeadline bool

	// charge is the request's Core HWM charge when the node has a meter, which Value answers
	// for: the handler finds it without a value context around this one. Without a meter it is
	// never Init'ed, and a request's charge is never 0 bytes (capacity.Request counts its
	// envelope).
	charge capacity.Charge
	// turn is the identity of the request's turn, once it begins (exec.TurnCarrier).
	turn exec.RequestTurn

	// p and id are the stream and the call ID that the reply goes back with.
	p  *peerStream
	id uint64
}

// The flags of a callCtx.
const (
	callCanceled = 1 << iota // the caller gave up, or the call is done
	callAnswered             // set by the request's first reply; a later one is ignored
	// endedCanceled and endedDeadline hold the error Err answered first: it answers the same
	// from then on, whatever ends the context later.
	endedCanceled
	endedDeadline
)

// answered is the error that flags say Err answered first; nil before.
func answered(flags uint32) error {
	switch {
	case flags&endedCanceled != 0:
		return context.Canceled
	case flags&endedDeadline != 0:
		return context.DeadlineExceeded
	}
	return nil
}

// endLocked makes err the error Err answers, unless it answered one already, and returns the
// one it answers. c.mu is held: materialize reads the answer and makes the context Done reads
// in one critical section, so that the context never ends with another error than Err's.
func (c *callCtx) endLocked(err error) error {
	bit := uint32(endedCanceled)
	if err == context.DeadlineExceeded {
		bit = endedDeadline
	}
	for {
		f := c.flags.Load()
		if first := answered(f); first != nil {
			return first
		}
		if c.flags.CompareAndSwap(f, f|bit) {
			return err
		}
	}
}

// answer reports whether this is the request's first reply, which alone goes back.
func (c *callCtx) answer() bool { return c.flags.Or(callAnswered)&callAnswered == 0 }

// madeCtx is the context Done reads, once made.
type madeCtx struct {
	ctx  context.Context
	stop context.CancelFunc
}

// charged returns the context of a request whose Core HWM charge is n bytes, which to takes
// back.
func charged(n int64, to capacity.Releaser) *callCtx {
	c := &callCtx{}
	c.charge.Init(n, to)
	return c
}

// heldCharge is the request's charge; nil without a meter.
func (c *callCtx) heldCharge() *capacity.Charge {
	if c.charge.Bytes() == 0 {
		return nil
	}
	return &c.charge
}

// start begins the context of a request whose caller's deadline is deadline (zero: none), read
// at now, a reading of this process's clock; wall says deadline is the caller's absolute
// deadline, a wall clock time alone.
func (c *callCtx) start(stream context.Context, deadline time.Time, wall bool, now time.Time) {
	c.stream = stream
	if !deadline.IsZero() {
		c.expires = now.Add(deadline.Sub(now))
		c.wallDeadline = wall
	}
}

// Reply answers the request with r, which the transport then owns; only the first reply goes
// back.
func (c *callCtx) Reply(r *wire.Reply) { c.p.replyTo(c, r) }

// Answer answers an admitted message with its outcome, as Reply does.
func (c *callCtx) Answer(out proto.Message, err error) { c.p.replyTo(c, wire.MessageReply(out, err)) }

// RequestTurn implements exec.TurnCarrier: the request's turn needs no context of its own.
func (c *callCtx) RequestTurn() *exec.RequestTurn { return &c.turn }

// Deadline implements context.Context: the caller's deadline as it came, a wall clock time
// alone or expires itself.
func (c *callCtx) Deadline() (time.Time, bool) {
	if c.wallDeadline {
		return c.expires.Round(0), true
	}
	return c.expires, !c.expires.IsZero()
}

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
	err := answered(c.flags.Load())
	if err == nil {
		if err = c.ending(time.Time{}); err != nil {
			err = c.endLocked(err)
		}
	}
	switch {
	case err == context.DeadlineExceeded:
		// Ended already, with the error Err answers: a context that ends with it, whatever
		// the stream does (its deadline long past).
		m.ctx, m.stop = context.WithDeadline(context.WithoutCancel(c.stream), time.Time{})
	case err != nil:
		m.ctx, m.stop = context.WithCancel(c.stream)
		m.stop()
	case c.expires.IsZero():
		m.ctx, m.stop = context.WithCancel(c.stream)
	default:
		// Done and Err keep to the one expiry Err has already been answering from, whatever
		// the wall clock did meanwhile.
		m.ctx, m.stop = context.WithDeadline(c.stream, c.expires)
	}
	c.made.Store(m)
	return m.ctx
}

// Err implements context.Context. Once it answers an error, it answers that one for good, as
// the context package's contexts do: a cancel, the stream's end or the deadline that comes
// after does not change it.
func (c *callCtx) Err() error { return c.errAt(time.Time{}) }

// callCtx answers for a turn's reading of the clock (the catalog's errAt asks for ErrAt).
var _ interface{ ErrAt(time.Time) error } = (*callCtx)(nil)

// ErrAt is Err with the deadline checked at now, a reading of this process's clock (time.Now's,
// with its monotonic part) just taken, rather than at a reading of its own: a turn that has
// read the clock for its lease check reads it once.
func (c *callCtx) ErrAt(now time.Time) error { return c.errAt(now) }

// errAt is Err, with the deadline checked at now; the zero time reads the clock.
func (c *callCtx) errAt(now time.Time) error {
	if err := answered(c.flags.Load()); err != nil {
		return err
	}
	var err error
	if m := c.made.Load(); m != nil {
		err = m.ctx.Err()
	} else {
		err = c.ending(now)
	}
	if err == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.made.Load(); m != nil {
		// Made meanwhile: it answers, and it may not have ended yet.
		if err = m.ctx.Err(); err == nil {
			return nil
		}
	}
	return c.endLocked(err)
}

// ending is what ends the context at now (the zero time: when the clock is read), before Done
// made the context it reads: its cancel, the stream's end or its deadline; nil while none has.
func (c *callCtx) ending(now time.Time) error {
	if c.flags.Load()&callCanceled != 0 {
		return context.Canceled
	}
	if err := c.stream.Err(); err != nil {
		return err
	}
	if c.expires.IsZero() {
		return nil
	}
	// Since and Before read only the monotonic clock, as expires and now hold monotonic
	// readings.
	passed := !now.Before(c.expires)
	if now.IsZero() {
		passed = time.Since(c.expires) >= 0
	}
	if passed {
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements context.Context. Once Done made the context it reads, values come from it,
// so that a context derived from this one attaches to it as to any cancelable context.
func (c *callCtx) Value(key any) any {
	if v, ok := capacity.ReaderWaitValue(key, c); ok {
		return v
	}
	if v, ok := capacity.ChargeValue(key, c.heldCharge()); ok {
		return v
	}
	if v, ok := exec.RequestTurnValue(key, &c.turn); ok {
		return v
	}
	if m := c.made.Load(); m != nil {
		return m.ctx.Value(key)
	}
	return c.stream.Value(key)
}

// WaitAsReader implements capacity.ReaderWaiter: wait is a wait of the stream's reader
// (peerStream.waitReading) for as long as the reader takes this request in (Handle), and a
// plain wait(ctx) otherwise, such as one off the reader that outlives Handle.
func (c *callCtx) WaitAsReader(ctx context.Context, wait func(context.Context) error) error {
	if c.p == nil || !c.taking.Load() {
		return wait(ctx)
	}
	return c.p.waitReading(ctx, wait, c)
}

// cancel ends the context: the caller gave up, or the call is done.
func (c *callCtx) cancel() {
	c.mu.Lock()
	c.flags.Or(callCanceled)
	m := c.made.Load()
	c.mu.Unlock()
	if m != nil {
		m.stop()
	}
}
