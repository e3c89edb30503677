package transport

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/wire"
)

// The bound of one send queue: a request waits for room beyond it, and a peer's stream is not
// read while the replies it should take exceed it.
const (
	sendQueueMinBytes = 16 << 20 // or four of the largest messages, whichever is more
	sendQueueMaxCount = 4096
)

// maxSentEnvelopes bounds the envelopes of one batch. A node announces it in its stream
// metadata (maxBatchHeader), and its peer refuses a batch of more messages than it announced
// (inBatch.decode), since an envelope of a few bytes decodes to a message of hundreds that the
// Core HWM charges only once it is admitted (E1, E7).
const maxSentEnvelopes = sendQueueMaxCount

// sender batches envelopes onto one stream: everything queued when the stream is free goes in
// one Batch, up to the byte budget, so envelopes share sends under load and wait for nothing
// when idle. Its queue is bounded (full): requests wait for room (pushWait); replies and
// cancels never wait (push), and the stream that makes replies stops reading instead; a
// reply that would pass the bound goes as a small error (pushWithin, peerStream.reply).
type sender struct {
	send       func(*wire.Batch) error
	maxBytes   int
	meter      *capacity.Meter
	completion bool // the queue carries replies to a peer's requests
	fullBytes  int

	// taken, when set, is told of the bytes of envelopes that leave the queue: sent, or dropped
	// with the stream. Set it before the sender runs.
	taken func(n int)

	mu    sync.Mutex
	queue []queued // its backing array is kept: a busy stream queues without allocating
	// atBound mirrors fullLocked for full, which reads it without the lock; it changes under
	// the lock, with the queue.
	atBound atomic.Bool
	// envs are the envelopes of the batch being sent, reused from batch to batch: a queued
	// message gets its envelope only as its batch is taken. Only run touches them.
	envs []wire.Envelope
	// reuse are the messages of the batch being sent that go back for reuse once it is sent:
	// its replies (the handlers let go of them, Handler) and its requests queued once. Only
	// run touches them.
	reuse   []queued
	bytes   int // of the queued envelopes
	waiters int
	room    chan struct{} // closed and replaced when envelopes leave the queue and someone waits
	closed  bool
	// ending, once set (finish), refuses new requests; run calls it once what is queued has
	// been sent and mayEnd agrees, and from then on (ended) nothing is queued.
	ending  func()
	mayEnd  func() bool
	ended   bool
	sending bool          // a batch is being sent
	moved   time.Time     // the last sign of progress: a send completed, or work arrived at an idle queue
	wake    chan struct{} // buffered 1

	// woken counts the callers that a batch of replies woke (wokeCallers) and that have not
	// taken their replies yet (tookReply). Callers usually call again once they have their
	// reply, so the sender holds its next batch until every one of them has (holdForCallers):
	// their next requests then share one batch, one write and one read and one wake-up on each
	// side, rather than leaving in a batch of their own each as the first of them call.
	woken    atomic.Int64
	caughtUp chan struct{} // buffered 1: woken fell to 0, a batch's worth is queued, or finish
	// hold bounds one hold: a woken caller that does not get a processor soon delays the
	// requests queued meanwhile by no more than that. holdTimer times it, made at the first
	// hold; only run touches it.
	hold      time.Duration
	holdTimer *time.Timer
}

// holdForWokenCallers is the longest a sender holds its batch for callers that a batch of
// replies woke. Longer holds gather more of them into one batch, but between two processes of
// a machine the calls then move in one batch that each process takes in turn, and a processor
// idles while its process waits; 50 µs lets most of a few dozen callers join and leaves the
// rest for the next batch, so that two batches are under way (remote request/reply with 64
// callers, make bench's row e: at 200 µs, 0.13 system calls per call and fewer calls a
// second; at 50 µs, 0.17 and as many as without a hold, with less processor time per call).
const holdForWokenCallers = 50 * time.Microsecond

// queued is one message of the queue, a request, a reply or a cancel, and its encoded size as
// an envelope, measured by the pusher outside the lock.
type queued struct {
	req    *wire.Request
	reply  *wire.Reply
	cancel *wire.Cancel
	size   int
	// once marks a request that its caller let go of when it queued it (Transport.CallOnce):
	// the sender reuses it once it is sent.
	once bool
	// notice is set for a message that holds nothing: Reading or Probe.
	notice notice
}

// notice is a message of the stream's read watch, which holds nothing.
type notice uint8

// The notices; the zero notice is none.
const (
	// noticeReading says that the stream is read (wire.Reading).
	noticeReading notice = iota + 1
	// noticeProbe asks whether it is (wire.Probe).
	noticeProbe
)

func queuedRequest(r *wire.Request) queued { return queued{req: r, size: fieldSize(r.SizeVT())} }
func queuedReply(r *wire.Reply) queued     { return queued{reply: r, size: fieldSize(r.SizeVT())} }
func queuedCancel(c *wire.Cancel) queued   { return queued{cancel: c, size: fieldSize(c.SizeVT())} }

// queuedReading says that the stream is read, and queuedProbe asks whether it is.
func queuedReading() queued { return queued{notice: noticeReading, size: fieldSize(0)} }
func queuedProbe() queued   { return queued{notice: noticeProbe, size: fieldSize(0)} }

// readingNotice and probeNotice hold nothing, so one of each serves every stream.
var (
	readingNotice = &wire.Reading{}
	probeNotice   = &wire.Probe{}
)

// fieldSize is the encoded size of a message field of n bytes: its tag (one byte for the
// fields of an envelope and of a batch), its length and the message. An envelope is such a
// field around its message, and a batch holds each envelope as one.
func fieldSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// wrap makes e the envelope of q, and only of q.
func wrap(e *wire.Envelope, q queued) *wire.Envelope {
	e.Request, e.Reply, e.Cancel, e.Reading, e.Probe = q.req, q.reply, q.cancel, nil, nil
	switch q.notice {
	case noticeReading:
		e.Reading = readingNotice
	case noticeProbe:
		e.Probe = probeNotice
	}
	return e
}

func newSender(send func(*wire.Batch) error, maxMessage int, meter *capacity.Meter, completion bool) *sender {
	return &sender{
		send: send, maxBytes: maxMessage + envelopeOverhead/2, meter: meter, completion: completion,
		fullBytes: max(sendQueueMinBytes, 4*maxMessage), room: make(chan struct{}), wake: make(chan struct{}, 1),
		caughtUp: make(chan struct{}, 1), hold: holdForWokenCallers,
	}
}

// push queues q at once, however full the queue is, and returns its size: 0 when the stream
// is gone or ended (finish), and with it what it would carry.
func (s *sender) push(q queued) int {
	n, _ := s.pushWithin(q, math.MaxInt)
	return n
}

// pushWithin is push for a q that the queue takes only within its bound if it is larger than
// small: such a q that would take a queue that holds anything past its bytes, or a queue at its
// count, is not queued, and full is true.
func (s *sender) pushWithin(q queued, small int) (n int, full bool) {
	s.mu.Lock()
	if s.closed || s.ended {
		s.mu.Unlock()
		return 0, false
	}
	if q.size > small && len(s.queue) > 0 && (s.bytes+q.size > s.fullBytes || len(s.queue) >= sendQueueMaxCount) {
		s.mu.Unlock()
		return 0, true
	}
	batchWorth := s.enqueue(q)
	s.mu.Unlock()
	if batchWorth {
		s.notifyCaughtUp()
	}
	s.signal()
	return q.size, false
}

// pushWait queues q once the queue has room, and reports false if ctx ended first or the
// stream ended or is finishing: q was not queued.
func (s *sender) pushWait(ctx context.Context, q queued) (ok bool, ctxErr error) {
	s.mu.Lock()
	if err := s.awaitRoomLocked(ctx); err != nil || s.closed || s.ending != nil {
		s.mu.Unlock()
		return false, err
	}
	batchWorth := s.enqueue(q)
	s.mu.Unlock()
	if batchWorth {
		s.notifyCaughtUp()
	}
	s.signal()
	return true, nil
}

// full reports whether the queue is at its bound. A served stream's reader asks before each
// request, without the lock that the replies' pushes and the sends take.
func (s *sender) full() bool { return s.atBound.Load() }

// noteBound records in atBound whether the queue is at its bound; s.mu is held.
func (s *sender) noteBound() {
	if full := s.fullLocked(); full != s.atBound.Load() {
		s.atBound.Store(full)
	}
}

// waitRoom waits until the queue is not full, the stream ends or ctx ends.
func (s *sender) waitRoom(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.awaitRoomLocked(ctx)
}

// awaitRoomLocked waits until the queue is not full or the stream ended, and returns ctx's
// error if ctx ends first. s.mu is held when it is called and when it returns, and released
// while it waits.
func (s *sender) awaitRoomLocked(ctx context.Context) error {
	for s.fullLocked() && !s.closed && s.ending == nil {
		room := s.room
		s.waiters++
		s.mu.Unlock()
		var err error
		select {
		case <-room:
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.mu.Lock()
		s.waiters--
		if err != nil {
			return err
		}
	}
	return nil
}

// fullLocked reports whether the queue is at its bound; s.mu is held. An empty queue is never
// full, so that one envelope of any size goes.
func (s *sender) fullLocked() bool {
	return len(s.queue) > 0 && (s.bytes >= s.fullBytes || len(s.queue) >= sendQueueMaxCount)
}

// enqueue queues q and reports whether the queue now holds a batch's worth of envelopes or is
// full, for which no hold waits; s.mu is held.
func (s *sender) enqueue(q queued) (batchWorth bool) {
	if len(s.queue) == 0 && !s.sending {
		s.moved = time.Now()
	}
	s.queue = append(s.queue, q)
	s.bytes += q.size
	s.meter.Queued(int64(q.size), s.completion)
	s.noteBound()
	return s.bytes >= s.maxBytes || s.fullLocked()
}

func (s *sender) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wokeCallers counts n callers that a batch of replies is about to wake; it is called before
// any of them can run.
func (s *sender) wokeCallers(n int) { s.woken.Add(int64(n)) }

// tookReply tells that one of the callers counted by wokeCallers has taken its reply. A hold
// that ran out reset the count, so a caller may find it at 0: it is never taken below.
func (s *sender) tookReply() {
	for {
		n := s.woken.Load()
		if n <= 0 {
			return
		}
		if s.woken.CompareAndSwap(n, n-1) {
			if n == 1 {
				s.notifyCaughtUp()
			}
			return
		}
	}
}

func (s *sender) notifyCaughtUp() {
	select {
	case s.caughtUp <- struct{}{}:
	default:
	}
}

// holdForCallers waits until every caller that replies woke has taken its reply (woken is 0),
// a batch's worth is queued or the queue is full, the queue is finishing, ctx ends, or the hold's time runs out;
// then the count starts again from 0, so that a caller slow to take its reply holds no later
// batch.
func (s *sender) holdForCallers(ctx context.Context) {
	if s.woken.Load() <= 0 || s.batchWorthOrEnding() {
		return
	}
	if s.holdTimer == nil {
		s.holdTimer = time.NewTimer(s.hold)
	} else {
		s.holdTimer.Reset(s.hold)
	}
	defer s.holdTimer.Stop()
	for s.woken.Load() > 0 {
		select {
		case <-s.caughtUp:
			if s.batchWorthOrEnding() {
				return
			}
		case <-s.holdTimer.C:
			s.woken.Store(0)
			return
		case <-ctx.Done():
			return
		}
	}
}

// batchWorthOrEnding reports whether the queue holds a batch's worth of envelopes, is full
// (requests wait for room) or is finishing: a hold no longer waits.
func (s *sender) batchWorthOrEnding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes >= s.maxBytes || s.fullLocked() || s.ending != nil || s.closed
}

// close ends the queue with its stream: what it holds is dropped and whoever waits for room
// gives up. It returns the call IDs of the requests it dropped, which were never sent.
func (s *sender) close() (unsent []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, q := range s.queue {
		if q.req != nil {
			unsent = append(unsent, q.req.CallId)
		}
	}
	s.meter.Left(int64(s.bytes), int64(len(s.queue)), s.completion)
	if s.taken != nil && s.bytes > 0 {
		s.taken(s.bytes)
	}
	clear(s.queue)
	s.queue, s.bytes = s.queue[:0], 0
	s.noteBound()
	close(s.room)
	return unsent
}

// finish ends the queue for new requests (pushWait); what it holds is still sent, and so are
// the cancels and replies pushed until it ends. It ends once it is empty and mayEnd, which
// must stay true once it is, reports true; whoever makes it true then wakes the sender
// (signal). Then run calls end, on the goroutine that sends, and nothing is queued any more.
// Whoever waits for room gives up.
func (s *sender) finish(end func(), mayEnd func() bool) {
	s.mu.Lock()
	if s.closed || s.ending != nil {
		s.mu.Unlock()
		return
	}
	s.ending, s.mayEnd = end, mayEnd
	if s.waiters > 0 {
		close(s.room)
		s.room = make(chan struct{})
	}
	s.mu.Unlock()
	s.notifyCaughtUp()
	s.signal()
}

// takeEnd returns the function that finish set, once, when nothing is left to send.
func (s *sender) takeEnd() func() {
	s.mu.Lock()
	may := s.mayEnd
	s.mu.Unlock()
	if may == nil || !may() { // called without s.mu: it may take its owner's lock
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending == nil || s.ended || len(s.queue) > 0 {
		return nil
	}
	s.ended = true
	return s.ending
}

// idle reports whether nothing is queued or being sent.
func (s *sender) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) == 0 && !s.sending
}

// stalled reports whether the sender has had work, queued or being sent, and completed no
// send for longer than d: the stream does not take what it sends.
func (s *sender) stalled(d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return (len(s.queue) > 0 || s.sending) && time.Since(s.moved) > d
}

// run sends batches until ctx ends or a send fails. One Batch is reused: the stream encodes a
// message before its send returns.
func (s *sender) run(ctx context.Context) error {
	batch := &wire.Batch{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake:
		}
		// Let the goroutines that are about to push do so: under load the batch grows, and an
		// idle stream loses only a yield. Callers that replies woke are waited for.
		runtime.Gosched()
		s.holdForCallers(ctx)
		if err := ctx.Err(); err != nil {
			// The stream ended during the hold: what is queued stays queued, and close
			// names its requests as never sent.
			return err
		}
		for {
			s.take(batch)
			if len(batch.Envelopes) == 0 {
				break
			}
			err := s.send(batch)
			s.recycleSent()
			s.mu.Lock()
			s.sending, s.moved = false, time.Now()
			s.mu.Unlock()
			s.releaseEnvelopes(len(batch.Envelopes))
			clear(batch.Envelopes)
			batch.Envelopes = batch.Envelopes[:0]
			if err != nil {
				return err
			}
		}
		if end := s.takeEnd(); end != nil {
			end()
		}
	}
}

// recycleSent gives back the messages of the batch just sent, or that failed to be, that no
// one else holds (reuse): the stream encoded them before its send returned. gRPC lets a stats
// handler or its tracing (grpc.EnableTracing) read a sent message later: the mesh's streams
// have no stats handler, and a process that turns gRPC's tracing on would see its batches
// reused already.
func (s *sender) recycleSent() {
	for _, q := range s.reuse {
		if q.reply != nil {
			recycleReply(q.reply)
		} else {
			recycleRequest(q.req)
		}
	}
	clear(s.reuse)
	s.reuse = s.reuse[:0]
	if cap(s.reuse) > keptEnvelopes {
		s.reuse = nil
	}
}

// recycleRequest and recycleReply give messages back for reuse; tests see what goes back
// through them.
var recycleRequest, recycleReply = wire.RecycleRequest, wire.RecycleReply

// keptEnvelopes is the most envelopes a sender keeps for its next batches: a burst's larger
// array goes to the collector.
const keptEnvelopes = 256

// releaseEnvelopes lets go of what the n envelopes of the batch just sent held.
func (s *sender) releaseEnvelopes(n int) {
	clear(s.envs[:n])
	if cap(s.envs) > keptEnvelopes {
		s.envs = nil
	}
}

// take moves the queued envelopes into b, up to the byte budget and maxSentEnvelopes, and at
// least one if any is queued.
func (s *sender) take(b *wire.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// size is what the taken envelopes were accounted at; encoded is what the batch encodes
	// to, which the budget bounds: each envelope also costs its field's tag and length there.
	size, encoded, n := 0, 0, 0
	for n < len(s.queue) && n < maxSentEnvelopes {
		q := s.queue[n]
		framed := fieldSize(q.size)
		if n > 0 && encoded+framed > s.maxBytes {
			break
		}
		size, encoded = size+q.size, encoded+framed
		if (q.reply != nil && s.completion) || (q.req != nil && q.once) {
			s.reuse = append(s.reuse, q)
		}
		n++
	}
	if cap(s.envs) < n {
		// Up to keptEnvelopes, room to grow; a larger burst's array is dropped after its send.
		s.envs = make([]wire.Envelope, max(n, min(2*cap(s.envs), keptEnvelopes)))
	}
	envs := s.envs[:n]
	for i := range envs {
		b.Envelopes = append(b.Envelopes, wrap(&envs[i], s.queue[i]))
	}
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	s.bytes -= size
	s.noteBound()
	if n > 0 {
		s.meter.Left(int64(size), int64(n), s.completion)
		s.sending = true
		if s.taken != nil {
			s.taken(size)
		}
		if s.waiters > 0 {
			close(s.room)
			s.room = make(chan struct{})
		}
	}
}
