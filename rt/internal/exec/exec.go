// Package exec is the serial executor of one activation: two FIFO lanes, application and
// lifecycle, each bounded by an item count and a byte reservation (digest E2–E6).
//
// Work on one executor runs one item at a time. Lifecycle work runs before queued application
// work. Every admitted item reserves its payload bytes plus ItemOverhead on its lane, and the
// reservation returns when the item's Run returns: its terminal completion. An executor with
// nothing queued holds no goroutine: a runner is started when work arrives and ends when the
// lanes are empty.
package exec

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/sdk"
	"google.golang.org/protobuf/proto"
)

// ItemOverhead is the fixed retained cost that every work item reserves on top of its payload:
// an empty payload still consumes the byte limit (E2, E3, K15).
const ItemOverhead = 256

// Limits bounds one lane on both axes (E3, E4).
type Limits struct {
	// Count is the most items the lane holds, queued or running.
	Count int
	// Bytes is the most bytes the lane reserves: the sum of payload + ItemOverhead.
	Bytes int64
}

// Config holds the limits of both lanes.
type Config struct {
	Application Limits
	Lifecycle   Limits
}

// DefaultConfig returns the E2 defaults: application 1,024 items / 64 MiB, lifecycle 128 items
// / 4 MiB.
func DefaultConfig() Config {
	return Config{
		Application: Limits{Count: 1024, Bytes: 64 << 20},
		Lifecycle:   Limits{Count: 128, Bytes: 4 << 20},
	}
}

// Validate refuses a lane without a positive count and byte limit: there is no unbounded
// execution queue (E4, K16).
func (c Config) Validate() error {
	var errs []error
	for _, l := range []struct {
		lane sdk.Lane
		lim  Limits
	}{{sdk.LaneApplication, c.Application}, {sdk.LaneLifecycle, c.Lifecycle}} {
		if l.lim.Count <= 0 {
			errs = append(errs, fmt.Errorf("%w: %s lane count limit must be positive, got %d (no lane is unbounded)", sdk.ErrConfig, l.lane, l.lim.Count))
		}
		if l.lim.Bytes < ItemOverhead {
			errs = append(errs, fmt.Errorf("%w: %s lane byte limit must be at least %d, got %d (no lane is unbounded)", sdk.ErrConfig, l.lane, ItemOverhead, l.lim.Bytes))
		}
	}
	return errors.Join(errs...)
}

// Work is one item of an executor.
type Work interface {
	// Run runs the item on the executor's turn. Its return is the item's terminal completion.
	Run()
	// Drop completes the item without running it: the executor was closed with err.
	Drop(err error)
}

// Message is an item carried by value in its lane: a one-way message, which needs no record of
// its own, so that admitting one allocates nothing. The executor's Owner runs it.
type Message struct {
	// Ctx is the sender's context; its values reach the handler, its end does not.
	Ctx context.Context
	// Method is the handler to run.
	Method *sdk.MethodDesc
	// Req is the message.
	Req proto.Message
	// Reserved says that the message holds a reserved permit of the host's job queue rather
	// than an ordinary one.
	Reserved bool
}

// ErrAdmissionClosed is returned by Submit for application work while admission is closed,
// and for any work once the executor is closed.
var ErrAdmissionClosed = errors.New("exec: admission closed")

// Gauges are the totals of many executors: the bytes reserved on their lanes by items that
// were queued, until they complete, and the application items admitted and not yet started.
// Nothing outside an executor's own lock is written for each item: an executor lists itself
// here when work is first queued on it and leaves the list when its lanes are empty and its
// runner stops, so that reading the totals visits only the executors with queued work. The
// lists are striped, each stripe two cache lines apart, so that executors that start and end
// their runs on different processors seldom take the same lock.
type Gauges struct {
	_       [128]byte // off the cache lines of whatever it is embedded after
	stripes [gaugeStripes]gaugeStripe
	next    atomic.Uint32 // the stripe of the next executor

	reading sync.Mutex
	seen    []*Executor // the listed executors of the reading in progress, reused
}

const gaugeStripes = 16

type gaugeStripe struct {
	mu   sync.Mutex
	busy map[*Executor]struct{}
	_    [128 - 16]byte
}

// stripe assigns a new executor its stripe.
func (g *Gauges) stripe() uint8 {
	return uint8(g.next.Add(1) % gaugeStripes)
}

// Totals are the gauges' figures at one reading.
type Totals struct {
	// ApplicationBytes and LifecycleBytes are the bytes reserved on the executors' lanes by
	// items that were queued, until they complete; an item that ran at once on its caller's
	// goroutine (Item.Inline) was never queued and is left out.
	ApplicationBytes, LifecycleBytes int64
	// QueuedApplication is the application items admitted and not yet started.
	QueuedApplication int64
}

// Totals reads the figures of every executor with queued work, each under its own lock: an
// executor's figures are exact at the instant it is read, and the totals sum such instants.
func (g *Gauges) Totals() Totals {
	g.reading.Lock()
	defer g.reading.Unlock()
	// The stripes' locks are not held while an executor's is taken: an executor lists itself
	// under its own lock.
	seen := g.seen[:0]
	for i := range g.stripes {
		st := &g.stripes[i]
		st.mu.Lock()
		for e := range st.busy {
			seen = append(seen, e)
		}
		st.mu.Unlock()
	}
	var t Totals
	for _, e := range seen {
		e.mu.Lock()
		if e.listed { // an executor that left the list since holds nothing queued
			app, life := e.app.bytes, e.life.bytes
			if e.inlineLife {
				life -= e.inline
			} else {
				app -= e.inline
			}
			t.ApplicationBytes += app
			t.LifecycleBytes += life
			t.QueuedApplication += int64(e.app.n)
		}
		e.mu.Unlock()
	}
	clear(seen) // keep no executor alive
	g.seen = seen[:0]
	return t
}

// Executor runs the work of one activation serially. Its zero value is not usable: use New.
//
// A sender and the runner write the executor from different processors for every item, so
// its layout counts: what Submit touches (the lock, the flags, the application lane, the
// limits, the gauges and the owner) fills its first two cache lines, and the whole is 192
// bytes, an allocation class whose objects start on a line.
type Executor struct {
	mu         sync.Mutex
	running    bool
	appGate    bool // application admission closed
	closed     bool
	active     bool  // an activity-counting item ran since lastActivity was stamped
	sinceYield uint8 // items run with company since the last yield (Item.Company)
	stripe     uint8 // the index of gauges' stripe
	listed     bool  // in the gauges' list of executors with queued work
	inlineLife bool  // the item running inline now is lifecycle work
	app        lane
	cfg        *Config // shared and read-only
	gauges     *Gauges // the totals this executor counts in, or nil
	owner      Owner
	life       lane
	// inline is the reservation of the item running on its caller's goroutine now
	// (Item.Inline), or 0: it is in a lane's bytes, and the gauges leave it out.
	inline int64
	// lastActivity is when the last activity-counting application item finished, on the
	// monotonic clock (nanoseconds since origin). It is read only while the executor is
	// quiescent, so it is stamped when a run of work ends rather than after every item.
	lastActivity int64
}

// New returns an idle executor. cfg must have passed Validate and must not change afterwards;
// g, when not nil, counts the executor in its totals.
func New(cfg *Config, g *Gauges) *Executor {
	e := &Executor{cfg: cfg, gauges: g, lastActivity: Now(), owner: noOwner{}}
	if g != nil {
		e.stripe = g.stripe()
	}
	return e
}

// Stripe is the index of this executor's stripe of the shared gauges (0 without gauges): a
// counter of its own that other totals may stripe by, so that the work of one executor keeps
// to one cache line.
func (e *Executor) Stripe() uint32 { return uint32(e.stripe) }

// Owner is what an executor's runner tells beside its items: on the goroutine that runs the
// items, outside the executor's lock, so that it may keep state that only the items touch.
type Owner interface {
	// BeforeItem is told before each queued item runs.
	BeforeItem()
	// RunEnd is told after the last item of each run of queued work, before the executor goes
	// idle. Work admitted meanwhile runs after it, and RunEnd is told again after that work.
	RunEnd()
	// Panicked is told of a Run that panicked, with the stack where it did; the panic is
	// contained either way. For an item that ran inline it is told on the caller's goroutine.
	Panicked(v any, stack []byte)
	// RunMessage runs a Message (SubmitMessage) on its turn, as Work.Run does an item's.
	RunMessage(m Message)
	// DropMessage completes a Message without running it: the executor was closed with err,
	// or its queued application work was dropped.
	DropMessage(m Message, err error)
}

// noOwner is the owner of an executor that was given none.
type noOwner struct{}

func (noOwner) BeforeItem()                {}
func (noOwner) RunEnd()                    {}
func (noOwner) Panicked(any, []byte)       {}
func (noOwner) RunMessage(Message)         {}
func (noOwner) DropMessage(Message, error) {}

// SetOwner sets what the runner tells beside the items (nil: nothing). Set it before the
// work that relies on it is submitted, and do not replace it while messages are queued: the
// owner at their turn runs or drops them, and without one they would be lost.
func (e *Executor) SetOwner(o Owner) {
	if o == nil {
		o = noOwner{}
	}
	e.mu.Lock()
	e.owner = o
	e.mu.Unlock()
}

var origin = time.Now()

// Now is the monotonic clock the executor measures activity on: nanoseconds since the
// process's origin. A reading costs one read of the monotonic clock; time.Now reads the wall
// clock as well.
func Now() int64 { return int64(time.Since(origin)) }

// Item describes one submission.
type Item struct {
	// Lane is LaneApplication or LaneLifecycle.
	Lane sdk.Lane
	// Payload is the payload size in bytes; ItemOverhead is added to it.
	Payload int64
	// Activity marks application work that counts as activity for idle eviction (D2). Timer
	// ticks do not, unless asked.
	Activity bool
	// AfterApplication holds lifecycle work until the application lane is empty: the close of
	// an activation runs after its queued application work (D3).
	AfterApplication bool
	// Inline lets the caller's goroutine run the item at once when the executor is idle and
	// both lanes are empty; Submit then returns after Run. A request/reply caller waits anyway,
	// so this saves a goroutine hand-off.
	Inline bool
	// InlineOnly, with Inline, makes Submit run the item at once or not at all: when the
	// executor is busy it returns ErrNotInline and admits nothing.
	InlineOnly bool
	// Company says that other callers wait on this executor's work, and that the goroutine
	// running it should not keep its processor for the scheduler's whole time slice while the
	// callers its turns answered wait behind it: an inline caller yields after every
	// yieldEvery-th such item, the runner of the queue only while drain's condition holds.
	Company bool
	// Unbounded admits the item whatever the lane's limits: work that was admitted once
	// already, held while its Actor moved, and that must not be refused now (E5). It counts in
	// the lane like any other item.
	Unbounded bool
}

// ErrNotInline is Submit's answer to an InlineOnly item that could not run at once.
var ErrNotInline = errors.New("exec: the executor is busy")

// Submit admits w to its lane or refuses it. A refusal on a full lane is a
// *sdk.QueueFullError naming the lane and the axis that was hit first (E3, E6); application
// work while admission is closed, and any work after Close, get ErrAdmissionClosed.
func (e *Executor) Submit(it Item, w Work) error {
	if w == nil {
		return fmt.Errorf("%w: nil work", sdk.ErrInvalidArgument)
	}
	return e.admit(it, w, nil)
}

// ErrNoOwner is SubmitMessage's answer on an executor that was given no Owner to run messages.
var ErrNoOwner = errors.New("exec: no owner runs messages")

// SubmitMessage admits m to its lane, as Submit does an item of work, or refuses it with
// Submit's errors; the executor's Owner runs it (RunMessage) or drops it (DropMessage). A
// message is never run inline.
func (e *Executor) SubmitMessage(it Item, m Message) error {
	if it.Inline {
		return fmt.Errorf("%w: a message is never run inline", sdk.ErrInvalidArgument)
	}
	if m.Method == nil {
		return fmt.Errorf("%w: a message without a method", sdk.ErrInvalidArgument)
	}
	return e.admit(it, nil, &m)
}

// admit admits the work w or, without it, the message m to the lane that it names.
func (e *Executor) admit(it Item, w Work, m *Message) error {
	if it.Payload < 0 || it.Payload > maxItemBytes-ItemOverhead {
		return fmt.Errorf("%w: payload size %d is outside 0..%d", sdk.ErrInvalidArgument, it.Payload, maxItemBytes-ItemOverhead)
	}
	bytes := it.Payload + ItemOverhead
	e.mu.Lock()
	if e.closed || (e.appGate && it.Lane == sdk.LaneApplication) {
		e.mu.Unlock()
		return ErrAdmissionClosed
	}
	if w == nil && e.owner == (noOwner{}) {
		e.mu.Unlock()
		return ErrNoOwner
	}
	l, lim := &e.app, e.cfg.Application
	if it.Lane == sdk.LaneLifecycle {
		l, lim = &e.life, e.cfg.Lifecycle
	} else if it.Lane != sdk.LaneApplication {
		e.mu.Unlock()
		return fmt.Errorf("%w: unknown lane %v", sdk.ErrInvalidArgument, it.Lane)
	}
	// Both axes are enforced; the count is checked first, so a burst of empty payloads reports
	// the count and a burst of large ones the bytes, whichever limit they reach first.
	// The error is built under the lock: the lane's figures change as soon as it is released.
	if !it.Unbounded && l.count+1 > lim.Count {
		err := &sdk.QueueFullError{Lane: it.Lane, Axis: sdk.AxisCount, Limit: int64(lim.Count), Queued: int64(l.count), Requested: 1}
		e.mu.Unlock()
		return err
	}
	if !it.Unbounded && l.bytes+bytes > lim.Bytes {
		err := &sdk.QueueFullError{Lane: it.Lane, Axis: sdk.AxisBytes, Limit: lim.Bytes, Queued: l.bytes, Requested: bytes}
		e.mu.Unlock()
		return err
	}
	ent := entryOf(it, w, m, bytes)
	if it.Inline && !e.running && e.app.empty() && e.life.empty() {
		// Run at once on the caller's goroutine: it is never queued, so the shared gauges,
		// which measure what waits in lanes, leave it out.
		l.count++
		l.bytes += bytes
		e.running = true
		e.inline, e.inlineLife = bytes, it.Lane == sdk.LaneLifecycle
		e.mu.Unlock()
		p := e.runItem(l, ent, nil, true)
		e.mu.Lock()
		e.inline = 0
		e.complete(l, ent, p)
		yield := e.yieldDue(ent)
		e.continueOrStop()
		if yield {
			gosched()
		}
		return nil
	}
	if it.InlineOnly {
		e.mu.Unlock()
		return ErrNotInline
	}
	l.count++
	l.bytes += bytes
	l.push(ent)
	if !e.listed && e.gauges != nil {
		e.list()
	}
	if !e.running {
		e.running = true
		go e.drain(false)
	}
	e.mu.Unlock()
	return nil
}

// yieldEvery is how many items with company (Item.Company) run between yields of the
// processor.
const yieldEvery = 8

// runnableGoroutines counts the process's goroutines that are ready to run and wait for a
// processor; tests replace it.
var runnableGoroutines = readRunnableGoroutines

// runnableMetric is the runtime's count of runnable goroutines: its run queues, read under the
// scheduler's lock, approximate since the queues change as they are read.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// runnableSample is where readRunnableGoroutines reads the metric: one sample for the
// process, so that a read allocates nothing.
var runnableSample = struct {
	sync.Mutex
	s []metrics.Sample
}{s: []metrics.Sample{{Name: runnableMetric}}}

// readRunnableGoroutines reads runnableMetric; a runtime that does not offer it is answered
// with the count of all goroutines.
func readRunnableGoroutines() int {
	runnableSample.Lock()
	defer runnableSample.Unlock()
	metrics.Read(runnableSample.s)
	if v := runnableSample.s[0].Value; v.Kind() == metrics.KindUint64 {
		return int(v.Uint64())
	}
	return runtime.NumGoroutine()
}

// yieldDue counts ent, which ran, and reports whether the processor is to be yielded after it;
// e.mu is held.
func (e *Executor) yieldDue(ent entry) bool {
	if !ent.company() {
		return false
	}
	if e.sinceYield++; e.sinceYield == yieldEvery {
		e.sinceYield = 0
		return true
	}
	return false
}

// gosched yields the processor; tests count the yields through it.
var gosched = runtime.Gosched

// continueOrStop is called with mu held after an inline run: it hands the queued work to a
// runner, or marks the executor idle.
func (e *Executor) continueOrStop() {
	if e.app.empty() && e.life.empty() {
		e.stop()
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	go e.drain(false)
}

// drain runs queued work until both lanes are empty. It owns e.running while it runs, and
// while it yields the processor (Item.Company) the executor's work waits for it. It yields
// only while yieldEvery or more application items are queued and they are a quarter or more
// of the process's runnable goroutines: a yield waits behind every runnable goroutine, and the
// queued callers wait with it. One critical section per item both completes the item that ran
// and takes the next. ran says that the runner it takes over from ran an item of this run of
// work, so that RunEnd is told after it.
func (e *Executor) drain(ran bool) {
	e.mu.Lock()
	yield := false
	for {
		l := e.next()
		if l == nil && ran {
			ran = false
			owner := e.owner
			e.mu.Unlock()
			owner.RunEnd()
			e.mu.Lock()
			continue
		}
		if l == nil {
			e.stop()
			e.app.release()
			e.life.release()
			e.mu.Unlock()
			return
		}
		if yield && e.app.n >= yieldEvery {
			// The callers that the last turns answered run before the runner goes on. The
			// count of runnable goroutines is read without the lock: the runtime's metrics
			// lock may be held by a whole read of every metric elsewhere in the process.
			yield = false
			queued := int(e.app.n)
			e.mu.Unlock()
			if 4*queued >= runnableGoroutines() {
				gosched()
			}
			e.mu.Lock()
			continue
		}
		ent := l.pop()
		owner := e.owner
		e.mu.Unlock()
		owner.BeforeItem()
		p := e.runItem(l, ent, owner, false)
		e.mu.Lock()
		e.complete(l, ent, p)
		yield, ran = e.yieldDue(ent), true
	}
}

// next picks the lane of the next item: lifecycle first, unless its head waits for the
// application lane to empty.
func (e *Executor) next() *lane {
	if !e.life.empty() && (!e.life.peek().afterApp() || e.app.empty()) {
		return &e.life
	}
	if !e.app.empty() {
		return &e.app
	}
	return nil
}

// recovered is a panic that a Run raised and runItem contained.
type recovered struct {
	value any
	stack []byte
}

// runItem runs one item of lane l outside the lock, a message by its owner, on the runner or
// inline on its caller; a panic is contained and returned. A Run that ends its goroutine
// (runtime.Goexit: t.FailNow in a test's handler) is not a panic, and nothing after runItem
// runs on that goroutine: runItem completes the item then (exited) and lets the exit go on.
func (e *Executor) runItem(l *lane, ent entry, owner Owner, inline bool) (p *recovered) {
	returned := false
	defer func() {
		if v := recover(); v != nil {
			p = &recovered{value: v, stack: debug.Stack()}
		} else if !returned {
			e.exited(l, ent, inline)
		}
	}()
	if ent.w != nil {
		ent.w.Run()
	} else {
		owner.RunMessage(ent.message())
	}
	returned = true
	return nil
}

// ErrExited is what Owner.Panicked is told of a Run that ended its goroutine (runtime.Goexit)
// instead of returning.
var ErrExited = errors.New("exec: the work ended its goroutine (runtime.Goexit) before it returned")

// exited completes ent, whose Run ended its goroutine, as one that panicked, so that its
// reservation returns (E2), and hands the queued work on as after an inline run, or to a new
// runner that goes on where this one stopped.
func (e *Executor) exited(l *lane, ent entry, inline bool) {
	p := &recovered{value: ErrExited, stack: debug.Stack()}
	e.mu.Lock()
	if inline {
		e.inline = 0
		e.complete(l, ent, p)
		e.continueOrStop()
		return
	}
	e.complete(l, ent, p)
	e.mu.Unlock()
	go e.drain(true)
}

// drop completes items that were taken off their lanes without running them.
func drop(taken []entry, owner Owner, err error) {
	for _, ent := range taken {
		if ent.w != nil {
			ent.w.Drop(err)
		} else {
			owner.DropMessage(ent.message(), err)
		}
	}
}

// complete returns the reservation of an item whose Run has returned: its terminal completion.
// e.mu is held; it is released while the panic handler, if any, is told of p.
func (e *Executor) complete(l *lane, ent entry, p *recovered) {
	l.count--
	l.bytes -= ent.bytes()
	e.active = e.active || ent.activity()
	if p != nil {
		owner := e.owner
		e.mu.Unlock()
		owner.Panicked(p.value, p.stack)
		e.mu.Lock()
	}
}

// stop marks the executor idle, its lanes empty; e.mu is held.
func (e *Executor) stop() {
	e.running = false
	e.stampActivity()
	if e.listed {
		e.unlist()
	}
}

// list enters the executor in its gauges' list of executors with queued work; e.mu is held.
func (e *Executor) list() {
	st := &e.gauges.stripes[e.stripe]
	st.mu.Lock()
	if st.busy == nil {
		st.busy = make(map[*Executor]struct{})
	}
	st.busy[e] = struct{}{}
	st.mu.Unlock()
	e.listed = true
}

// unlist takes the executor off its gauges' list; e.mu is held.
func (e *Executor) unlist() {
	st := &e.gauges.stripes[e.stripe]
	st.mu.Lock()
	delete(st.busy, e)
	st.mu.Unlock()
	e.listed = false
}

// stampActivity records the end of a run of work that counted as activity; e.mu is held.
func (e *Executor) stampActivity() {
	if e.active {
		e.lastActivity, e.active = Now(), false
	}
}

// CloseApplication stops application admission if the executor is quiescent: nothing queued
// or running on either lane. It reports whether it did; the idle cleanup re-checks serial
// quiescence this way before it closes a Spot (D3).
func (e *Executor) CloseApplication(requireQuiescent bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	if requireQuiescent && (e.running || !e.app.empty() || !e.life.empty()) {
		return false
	}
	e.appGate = true
	return true
}

// OpenApplication reopens application admission after CloseApplication (a close that could
// not complete).
func (e *Executor) OpenApplication() {
	e.mu.Lock()
	e.appGate = false
	e.mu.Unlock()
}

// DropApplication closes application admission and drops the queued application work with err:
// each dropped item's Drop runs and its reservation returns. The item running now finishes;
// queued lifecycle work stays. It reports how many items it dropped.
func (e *Executor) DropApplication(err error) int {
	e.mu.Lock()
	e.appGate = true
	dropped, owner := e.app.takeAll(), e.owner
	e.mu.Unlock()
	drop(dropped, owner, err)
	return len(dropped)
}

// Close refuses all further work and drops what is queued with err. An item that is running
// finishes.
func (e *Executor) Close(err error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	dropped, owner := append(e.life.takeAll(), e.app.takeAll()...), e.owner
	e.mu.Unlock()
	drop(dropped, owner, err)
}

// Quiescent reports whether nothing is queued or running on either lane.
func (e *Executor) Quiescent() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.running && e.app.empty() && e.life.empty()
}

// IdleSince returns when the last activity-counting application work finished (monotonic, see
// Now), and whether the executor is quiescent now.
func (e *Executor) IdleSince() (since int64, quiescent bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastActivity, !e.running && e.app.empty() && e.life.empty()
}

// Touch records activity now, as if application work had just finished.
func (e *Executor) Touch() {
	e.mu.Lock()
	e.lastActivity = Now()
	e.mu.Unlock()
}

// Stats is a snapshot of an executor's lanes.
type Stats struct {
	Application, Lifecycle LaneStats
	Running                bool
}

// LaneStats is the reservation of one lane.
type LaneStats struct {
	Count int
	Bytes int64
}

// Stats returns a snapshot of both lanes' reservations.
func (e *Executor) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{
		Application: LaneStats{Count: e.app.count, Bytes: e.app.bytes},
		Lifecycle:   LaneStats{Count: e.life.count, Bytes: e.life.bytes},
		Running:     e.running,
	}
}
