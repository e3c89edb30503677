package capacity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

// Meter is one node's capacity accounting. Its hot paths — a charge, a release, a permit —
// are atomic adds; only waiting, a change of pressure and a reset take its lock. A nil *Meter
// accounts nothing and admits everything.
type Meter struct {
	s Settings

	// Core HWM: the inbound request bytes the node holds, from their receipt until their
	// reply is queued or, for one-way messages, their job ends; laneHeld of them are admitted
	// to a lane; completion are reply bytes queued to be sent back.
	current, laneHeld, peak    atomic.Int64
	completion, completionPeak atomic.Int64
	completionCount            atomic.Int64
	coreQueue                  atomic.Int64 // bytes in every send queue of the transport
	streams, completionStreams atomic.Int64
	senders, receivers         atomic.Int64
	roomWaiters                atomic.Int64

	// The application job queue. inUse is written for every job by senders and runners on
	// every processor: it has a cache line of its own, apart from what a job only reads
	// (paused, jobWaiters, jobsPeak while it stands).
	_                  [64]byte
	inUse              atomic.Int64
	_                  [64]byte
	reserved, jobsPeak atomic.Int64
	jobWaiters         atomic.Int64
	paused             atomic.Bool

	// reclaim returns the permits that runners hold back for jobs that ended (SetReclaim);
	// lastReclaim is when it last ran, on exec.Now's clock. Of the goroutines
	// that wait for a permit or for intake to resume, the one that holds pollToken reclaims
	// them every reclaimAfter, with pollTimer, which only the token's holder touches.
	reclaim     atomic.Pointer[func()]
	lastReclaim atomic.Int64
	pollToken   chan struct{}
	pollTimer   *time.Timer

	lanes exec.Gauges

	mu          sync.Mutex
	room        chan struct{}   // closed and replaced when Core HWM bytes return to waiters
	jobQueue    []chan struct{} // the jobs waiting for a permit, in arrival order; a Return wakes one
	resumed     chan struct{}   // closed when a pause ends; nil while not paused
	pausedSince time.Time
	epoch       uint64
	epochStart  time.Time
	blocked     int       // streams waiting for room or for the end of a pause now
	blockedFrom time.Time // when blocked turned nonzero
	blockedTime time.Duration
	waitCount   uint64
	waitTime    time.Duration
	changed     chan struct{} // a token when the pressure state changes
}

// New returns a meter for settings s.
func New(s Settings) *Meter {
	m := &Meter{
		s: s, room: make(chan struct{}),
		epoch: 1, epochStart: time.Now(), changed: make(chan struct{}, 1),
		pollToken: make(chan struct{}, 1),
	}
	m.pollToken <- struct{}{}
	return m
}

// Settings returns the settings in force.
func (m *Meter) Settings() Settings { return m.s }

// Lanes returns the gauges that the Spots' executors share, or nil for a nil meter.
func (m *Meter) Lanes() *exec.Gauges {
	if m == nil {
		return nil
	}
	return &m.lanes
}

// Changed delivers a token when the job queue's pressure state changes.
func (m *Meter) Changed() <-chan struct{} { return m.changed }

// Charge admits n bytes of an inbound request to the Core HWM, or reports that they do not
// fit: the bytes held plus n would exceed the budget. The first request is always admitted, so
// that one message of the largest size gets through. Replies queued for peers do not count
// here: each stream's replies count against that stream's share, so that a peer that does not
// take its replies holds up only its own stream.
func (m *Meter) Charge(n int64) bool {
	if m == nil {
		return true
	}
	for {
		cur := m.current.Load()
		if !m.fits(cur, n) {
			return false
		}
		if m.current.CompareAndSwap(cur, cur+n) {
			raise(&m.peak, cur+n+m.completion.Load())
			return true
		}
	}
}

func (m *Meter) fits(cur, n int64) bool { return cur == 0 || cur+n <= m.s.Budget }

// Release returns n bytes to the Core HWM.
func (m *Meter) Release(n int64) {
	if m == nil {
		return
	}
	m.current.Add(-n)
	if m.roomWaiters.Load() > 0 {
		m.wake(&m.room)
	}
}

// InLane moves n charged bytes from the not-yet-admitted part of the Core HWM to the part in
// lanes (n negative: back out, when the job ends).
func (m *Meter) InLane(n int64) {
	if m != nil {
		m.laneHeld.Add(n)
	}
}

// Queued counts an envelope of n bytes entering a send queue (n negative: leaving it); a
// completion is a reply to a peer's request, which the Core HWM holds until it is sent.
func (m *Meter) Queued(n int64, completion bool) {
	if m == nil {
		return
	}
	m.coreQueue.Add(n)
	if !completion {
		return
	}
	c := m.completion.Add(n)
	if n > 0 {
		m.completionCount.Add(1)
		raise(&m.completionPeak, c)
		raise(&m.peak, c+m.current.Load())
		return
	}
	m.completionCount.Add(-1)
}

// Left counts count envelopes of n bytes in all leaving a send queue at once: a batch taken
// to be sent, or what a closed stream dropped. It is Queued(-size) for each of them, in one
// add per counter instead of one per envelope.
func (m *Meter) Left(n, count int64, completion bool) {
	if m == nil || count == 0 {
		return
	}
	m.coreQueue.Add(-n)
	if completion {
		m.completion.Add(-n)
		m.completionCount.Add(-count)
	}
}

// StreamOpened counts a stream whose sender and receiver run now; served says that this node
// sends the completions on it (a peer's stream). The returned func counts its end.
func (m *Meter) StreamOpened(served bool) (closed func()) {
	if m == nil {
		return func() {}
	}
	m.streams.Add(1)
	m.senders.Add(1)
	m.receivers.Add(1)
	if served {
		m.completionStreams.Add(1)
	}
	return func() {
		m.streams.Add(-1)
		m.senders.Add(-1)
		m.receivers.Add(-1)
		if served {
			m.completionStreams.Add(-1)
		}
	}
}

// WaitRoom blocks a stream's reader until the Core HWM has room for a request of n bytes, or
// holds nothing. It returns ctx's error if ctx ends first.
func (m *Meter) WaitRoom(ctx context.Context, n int64) error {
	if m == nil || m.fits(m.current.Load(), n) {
		return nil
	}
	m.roomWaiters.Add(1)
	defer m.roomWaiters.Add(-1)
	m.block(1)
	defer m.block(-1)
	for {
		m.mu.Lock()
		room := m.room
		m.mu.Unlock()
		if m.fits(m.current.Load(), n) {
			return nil
		}
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Blocked counts a stream reader that waits for a reason of its own (its stream's share of
// the budget) in the blocked time, until the returned func is called.
func (m *Meter) Blocked() (unblock func()) {
	if m == nil {
		return func() {}
	}
	m.block(1)
	return func() { m.block(-1) }
}

// WaitIntake blocks a stream's reader while the application job queue is paused: above its
// pause threshold until it falls to the resume threshold. It returns ctx's error if ctx ends
// first.
func (m *Meter) WaitIntake(ctx context.Context) error {
	if m == nil || !m.paused.Load() {
		return nil
	}
	m.mu.Lock()
	resumed := m.resumed
	m.mu.Unlock()
	if resumed == nil {
		return nil
	}
	m.block(1)
	defer m.block(-1)
	m.reclaimHeld()
	p := poller{m: m}
	defer p.stop()
	if !p.await(ctx, resumed) {
		return ctx.Err()
	}
	return nil
}

// Busy reports whether the application job queue holds as many permits as its resume
// threshold or more: turns that start now mark their contexts so that the jobs they make are
// known as nested.
func (m *Meter) Busy() bool { return m != nil && m.inUse.Load() >= m.s.ResumeAt }

// Paused reports whether the application job queue is above its pause threshold.
func (m *Meter) Paused() bool { return m != nil && m.paused.Load() }

// Acquire takes a permit of the application job queue for one job. With none free, a job
// that nested reports as made by a running job takes one beyond the queue's size (a reserved
// supply permit: it must not wait for permits its own caller holds); any other job waits until
// a permit returns or ctx ends, and then fails with ErrCapacityExceeded{Scheduler} (and ctx's
// error). nested is called only when the queue is full.
func (m *Meter) Acquire(ctx context.Context, nested func(context.Context) bool) (reserved bool, err error) {
	if m == nil {
		return false, nil
	}
	if m.tryTake() {
		return false, nil
	}
	// Permits that runners hold back may make room: they are taken back, at most once in
	// reclaimAfter for the node, before a permit is taken beyond the size or waited for.
	m.reclaimHeld()
	if m.tryTake() {
		return false, nil
	}
	if nested(ctx) {
		m.takeReserved()
		return true, nil
	}
	return false, m.waitPermit(ctx)
}

// tryTake takes a permit if one is free.
func (m *Meter) tryTake() bool {
	for {
		n := m.inUse.Load()
		if n >= m.s.MaxJobs {
			return false
		}
		if m.inUse.CompareAndSwap(n, n+1) {
			m.took(n + 1)
			return true
		}
	}
}

// takeReserved takes a permit beyond the queue's size.
func (m *Meter) takeReserved() {
	m.reserved.Add(1)
	m.took(m.inUse.Add(1))
}

// took notes a permit taken with n in use.
func (m *Meter) took(n int64) {
	raise(&m.jobsPeak, n)
	if n >= m.s.PauseAt && !m.paused.Load() {
		m.updatePressure()
	}
}

// reclaimAfter is how often the permits that runners hold back are reclaimed while a job
// waits for a permit or a stream's reader for intake to resume; a job that finds no permit
// free, or a reader that starts to wait, reclaims them at once unless that was done less than
// reclaimAfter ago.
const reclaimAfter = time.Millisecond

// SetReclaim sets how the meter takes back the permits of jobs that ended which runners hold
// back to return them together (ReturnMany): fn returns them. A handler that blocks would hold
// them for as long; they are reclaimed when a job finds no permit free and while it waits, and
// while a stream's reader waits for intake to resume.
func (m *Meter) SetReclaim(fn func()) {
	if m != nil {
		m.reclaim.Store(&fn)
	}
}

// reclaimHeld has the permits that runners hold back returned, unless that was done less than
// reclaimAfter ago.
func (m *Meter) reclaimHeld() {
	fn := m.reclaim.Load()
	if fn == nil {
		return
	}
	now := exec.Now()
	last := m.lastReclaim.Load()
	if now-last < int64(reclaimAfter) || !m.lastReclaim.CompareAndSwap(last, now) {
		return
	}
	(*fn)()
}

// poller is one waiting goroutine's share in reclaiming the permits that runners hold back:
// one waiter at a time polls, whichever takes the meter's token, so that many waiters do not
// all wake every reclaimAfter.
type poller struct {
	m       *Meter
	polling bool
}

// token is ready when this waiter may become the poller; nil (never ready) once it is, or
// when nothing is reclaimed.
func (p *poller) token() <-chan struct{} {
	if p.polling || p.m.reclaim.Load() == nil {
		return nil
	}
	return p.m.pollToken
}

// tick is ready when the poller is to reclaim.
func (p *poller) tick() <-chan time.Time {
	if !p.polling {
		return nil
	}
	return p.m.pollTimer.C
}

// await waits until ready is, or ctx ends, and meanwhile takes its turn at polling; it reports
// whether ready was.
func (p *poller) await(ctx context.Context, ready <-chan struct{}) bool {
	for {
		select {
		case <-ready:
			return true
		case <-p.token():
			p.start()
		case <-p.tick():
			p.poll() // wakes the first waiting job if it returns a permit
		case <-ctx.Done():
			return false
		}
	}
}

// start makes this waiter the poller: it took the token.
func (p *poller) start() {
	p.polling = true
	if p.m.pollTimer == nil {
		p.m.pollTimer = time.NewTimer(reclaimAfter)
	} else {
		p.m.pollTimer.Reset(reclaimAfter)
	}
}

// poll reclaims and arms the next tick.
func (p *poller) poll() {
	p.m.reclaimHeld()
	p.m.pollTimer.Reset(reclaimAfter)
}

// stop hands the token on when this waiter stops waiting.
func (p *poller) stop() {
	if p.polling {
		p.polling = false
		p.m.pollTimer.Stop()
		p.m.pollToken <- struct{}{} // the token's one place is free: it was taken
	}
}

func (m *Meter) waitPermit(ctx context.Context) error {
	// The waiter is counted and queued before it tries again: a Return that frees a permit
	// after that try then sees it and wakes it, so no wakeup is lost.
	m.jobWaiters.Add(1)
	began := time.Now()
	defer func() {
		m.jobWaiters.Add(-1)
		m.mu.Lock()
		m.waitCount++
		m.waitTime += time.Since(began)
		m.mu.Unlock()
	}()
	wake := make(chan struct{}, 1)
	p := poller{m: m}
	defer p.stop()
	for {
		m.mu.Lock()
		m.jobQueue = append(m.jobQueue, wake)
		m.mu.Unlock()
		if m.tryTake() {
			m.leaveQueue(wake)
			return nil
		}
		// On a peer's stream's reader, the peer is told meanwhile that the stream is read.
		waited := AsReader(ctx, func(c context.Context) error {
			if p.await(c, wake) {
				return nil
			}
			return c.Err()
		})
		if waited != nil {
			m.leaveQueue(wake)
			if errors.Is(waited, ErrReaderHeldUp) {
				return fmt.Errorf("the node's application job queue stayed full (%d jobs queued or running): %w",
					m.s.MaxJobs, waited)
			}
			return fmt.Errorf("the node's application job queue stayed full (%d jobs queued or running) until the caller's context ended: %w (%w)",
				m.s.MaxJobs, &sdk.CapacityError{Where: sdk.CapacityScheduler, Limit: m.s.MaxJobs}, ctx.Err())
		}
	}
}

// leaveQueue takes a waiter that no longer waits out of the queue. One that a Return woke
// meanwhile passes the wakeup on, since the permit it announced may still be free.
func (m *Meter) leaveQueue(wake chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.jobQueue) - 1; i >= 0; i-- { // a waiter that got a permit at once is last
		if m.jobQueue[i] == wake {
			m.jobQueue = append(m.jobQueue[:i], m.jobQueue[i+1:]...)
			return
		}
	}
	select {
	case <-wake:
		m.wakeOneLocked()
	default:
	}
}

// wakeOneLocked wakes the longest waiting job, if any; m.mu is held. Waking one waiter per
// returned permit, rather than all of them, spares a full queue a stampede on every Return.
// It reports whether there was one.
func (m *Meter) wakeOneLocked() bool {
	if len(m.jobQueue) == 0 {
		return false
	}
	w := m.jobQueue[0]
	m.jobQueue[0] = nil
	m.jobQueue = m.jobQueue[1:]
	w <- struct{}{} // buffered, and a waiter is queued at most once: never blocks
	return true
}

// Return gives back a job's permit when the job ends.
func (m *Meter) Return(reserved bool) {
	if m == nil {
		return
	}
	if reserved {
		m.reserved.Add(-1)
	}
	m.returnPermits(1)
}

// ReturnMany gives back the permits, none of them reserved, of n jobs that ended. A Spot's
// runner returns the permits of the jobs it ran together, so that every job writes the shared
// count once rather than twice.
func (m *Meter) ReturnMany(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.returnPermits(n)
}

func (m *Meter) returnPermits(k int64) {
	n := m.inUse.Add(-k)
	if m.jobWaiters.Load() > 0 {
		m.mu.Lock()
		for range k {
			if !m.wakeOneLocked() {
				break
			}
		}
		m.mu.Unlock()
	}
	if n <= m.s.ResumeAt && m.paused.Load() {
		m.updatePressure()
	}
}

// updatePressure pauses or resumes intake as the permits in use call for it, under the lock.
// It checks again after each change: a Return that read the state before the change took
// effect may have passed the resume threshold unseen.
func (m *Meter) updatePressure() {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for {
		n := m.inUse.Load()
		switch {
		case !m.paused.Load() && n >= m.s.PauseAt:
			m.resumed = make(chan struct{})
			m.pausedSince = time.Now()
			m.paused.Store(true)
		case m.paused.Load() && n <= m.s.ResumeAt:
			m.paused.Store(false)
			close(m.resumed)
			m.resumed = nil
			m.pausedSince = time.Time{}
		default:
			if changed {
				select {
				case m.changed <- struct{}{}:
				default:
				}
			}
			return
		}
		changed = true
	}
}

// wake closes and replaces the channel *ch, waking everyone who waits on it.
func (m *Meter) wake(ch *chan struct{}) {
	m.mu.Lock()
	close(*ch)
	*ch = make(chan struct{})
	m.mu.Unlock()
}

// block counts a stream reader that starts (d = 1) or stops (d = -1) waiting, and the time
// during which at least one waits.
func (m *Meter) block(d int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d > 0 && m.blocked == 0 {
		m.blockedFrom = time.Now()
	}
	m.blocked += d
	if d < 0 && m.blocked == 0 {
		m.blockedTime += time.Since(maxTime(m.blockedFrom, m.epochStart))
	}
}

// Reset resets every peak and cumulative figure and starts a new measurement epoch; current
// figures stay as they are.
func (m *Meter) Reset() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch++
	m.epochStart = time.Now()
	m.blockedTime, m.waitCount, m.waitTime = 0, 0, 0
	m.peak.Store(m.current.Load() + m.completion.Load())
	m.completionPeak.Store(m.completion.Load())
	m.jobsPeak.Store(m.inUse.Load())
}

// raise makes *peak at least v.
func raise(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
