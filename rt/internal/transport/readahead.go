package transport

import (
	"cmp"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// readAhead reads a served stream's next batches while its reader waits for room to take a
// request in: a wait of the transport's own, or of a handler that takes the request in
// (capacity.AsReader). The peer's cancellations of the calls that hold that room come on the
// stream behind the request that waits, in the rest of its batch or in later ones. While the
// wait lasts, it ends each running call whose cancellation those hold and answers their
// probes; it keeps the batches that hold more, in order, for the reader, which takes them
// before it reads the stream again. What it holds is bounded as one batch is, in messages
// (maxSentEnvelopes, whatever they decode to) and bytes (flowWindow, the most the peer may
// have in flight on the stream anyway), and in batches (maxAheadBatches): it reads no more
// past that until the reader has taken some, and no more once the wait has ended, so that a
// reader held up after it is not hidden from the peer (a probe read then waits for the
// reader). The read-aheads of all the transport's streams hold its aheadMax together at most,
// a read under way while a wait lasts counting as the most its batch may cost (reserveAhead).
//
// Only waits that hold the reader up start it (begin): the reader's own, and a handler's while
// the reader takes the handler's request in (callCtx.taking), whatever goroutine the handler
// waits on; a handler's wait no longer counts once the reader has returned from the handler
// (handled). The reader reads the stream only when no read-ahead runs, so that the stream is
// never read by two goroutines at once.
type readAhead struct {
	p     *peerStream
	recv  func(*inBatch) error // the stream's RecvMsg
	max   int                  // the peer's bound of a batch's messages
	worst int64                // what a batch may cost at most (cost), reserved while it is read

	mu      sync.Mutex
	running bool // a goroutine reads the stream
	// own counts the reader's own waits under way, inHandle the handlers' waits that hold the
	// reader up; handles counts the returns from handlers that had such waits (handled), so
	// that the end of a wait counted before one does not count.
	own, inHandle int
	handles       uint64
	stop          bool // the goroutine is to stop once its read ends
	// reserved is set while the goroutine's read under way counts against the read-aheads'
	// bound as worst (run): while a wait holds the reader up.
	reserved bool
	closed   bool // the reader has ended: nothing more is held (close)
	queue    []aheadBatch
	bytes    int // of the batches in queue, as they came
	msgs     int // of the batches in queue
	free     []*inBatch
	// more is signalled when a batch is queued or the goroutine ends.
	more chan struct{}

	// cur is the reader's batch, which arrived at curAt, and at the index of its request being
	// taken in: a wait takes the rest of it in (begin). Only the reader writes them, between
	// handlers, and begin reads them while the reader waits or is in a handler.
	cur   *inBatch
	curAt time.Time
	at    int
	// touched is set by a handler's wait before it looks whether the reader still takes its
	// request in. The reader, back from a handler, then takes the lock once (handled), so that
	// what the wait took in of cur is seen before the reader reads on.
	touched atomic.Bool
}

// aheadWait is a wait that begin counted, or did not, for end.
type aheadWait struct {
	counted, handler bool
	handles          uint64
}

// aheadBatch is a batch read ahead, when it arrived, or the error that ended the stream.
type aheadBatch struct {
	b       *inBatch
	arrived time.Time
	err     error
}

// maxAheadBatches bounds the batches a readAhead holds, whatever their size.
const maxAheadBatches = 64

func newReadAhead(p *peerStream, recv func(*inBatch) error, max int) *readAhead {
	// The most a batch read costs: gRPC reads no message past the peer's largest, and the
	// decoder no more messages than the peer's bound of a batch.
	worst := int64(p.t.cfg.MaxMessageSize+envelopeOverhead) + int64(cmp.Or(max, maxSentEnvelopes))*decodedMessageBytes
	return &readAhead{p: p, recv: recv, max: max, worst: worst, more: make(chan struct{}, 1)}
}

// reading notes that the reader takes in b, which arrived then.
func (a *readAhead) reading(b *inBatch, arrived time.Time) { a.cur, a.curAt, a.at = b, arrived, 0 }

// begin notes that a wait holds the reader up, and reads ahead meanwhile unless it holds as
// much as it may or the stream has ended; wg owns the goroutine, which ends with the stream at
// the latest. With call nil it is a wait of the reader's own, on the reader; else a wait of
// the handler of call's request, which counts only while the reader takes that request in.
func (a *readAhead) begin(wg *sync.WaitGroup, call *callCtx) aheadWait {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := aheadWait{counted: true}
	if call != nil {
		// Stored before the look at taking, as the reader stores taking before its look at
		// touched (handled): a wait that finds the request still taken in is seen by the reader.
		a.touched.Store(true)
		if !call.taking.Load() {
			return aheadWait{}
		}
		w.handler, w.handles = true, a.handles
		a.inHandle++
	} else {
		a.own++
	}
	a.stop = false // a goroutine that was to stop reads on
	if a.running && !a.reserved {
		// Its read under way holds the reader up again. Should the others hold too much for
		// it to count, its batch counts once it comes: no more than the one batch each
		// stream's reader holds as it waits.
		a.reserved = a.p.t.reserveAhead(a.worst)
	}
	// The rest of the reader's batch, and what it holds from before, may end a call that runs
	// now: one whose cancellation came in the waiting request's batch, was read before it ran,
	// or was read as the last wait ended.
	if b := a.cur; b != nil && a.at+1 < b.n {
		a.p.takeInAhead(b.envelopes()[a.at+1:], a.curAt.Sub(a.p.began))
	}
	for _, ab := range a.queue {
		if ab.err == nil {
			a.p.readAhead(ab.b, ab.arrived)
		}
	}
	if a.closed || a.running || a.full() || a.ended() {
		return w
	}
	a.running = true
	wg.Go(a.run)
	return w
}

// end notes that the wait w has ended: once no wait holds the reader up, the goroutine stops
// when its read ends, and what it reads meanwhile waits for the reader.
func (a *readAhead) end(w aheadWait) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !w.counted:
		return
	case !w.handler:
		a.own--
	case w.handles == a.handles:
		a.inHandle--
	}
	if !a.waitingLocked() {
		a.stopLocked()
	}
}

// stopLocked has the goroutine stop once its read ends. A read under way no longer holds the
// reader up, and is the reader's next read, which counts for nothing: its reservation goes,
// so that a peer that sends nothing more does not hold the read-aheads' bound; a.mu is held.
func (a *readAhead) stopLocked() {
	a.stop = true
	if a.reserved {
		a.reserved = false
		a.p.t.aheadHeld.Add(-a.worst)
	}
}

// handled notes that the reader has returned from a handler: the handler's waits that still
// run no longer hold it up.
func (a *readAhead) handled() {
	if !a.touched.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.touched.Store(false)
	if a.inHandle > 0 {
		a.inHandle = 0
		a.handles++
		if !a.waitingLocked() {
			a.stopLocked()
		}
	}
}

// waitingLocked reports whether a wait holds the reader up; a.mu is held.
func (a *readAhead) waitingLocked() bool { return a.own > 0 || a.inHandle > 0 }

func (a *readAhead) run() {
	defer a.signal()
	for {
		a.mu.Lock()
		// A read under way counts as the most its batch may cost, so that the reads that wait
		// for the peers' next batches cannot take the read-aheads together past their bound.
		if a.stop || a.closed || a.full() || !a.reserved && !a.p.t.reserveAhead(a.worst) {
			if a.reserved { // begin's, for a read that did not come to be
				a.reserved = false
				a.p.t.aheadHeld.Add(-a.worst)
			}
			a.running = false
			a.mu.Unlock()
			return
		}
		a.reserved = true
		b := a.batch()
		a.mu.Unlock()
		err := a.recv(b)
		arrived := time.Now()
		// Taken in and queued in one critical section with the look at waiting: a wait that
		// begins meanwhile finds the batch queued (begin takes it in), and one that ends
		// meanwhile has nothing of it taken in after it.
		a.mu.Lock()
		left := !a.closed
		if left && err == nil && a.waitingLocked() {
			left = a.p.readAhead(b, arrived)
		}
		held := int64(0) // what the batch queued holds
		if left {
			a.queue = append(a.queue, aheadBatch{b: b, arrived: arrived, err: err})
			a.bytes += b.size
			a.msgs += b.n
			if err == nil {
				held = cost(b)
			}
		} else {
			b.reset()
			a.free = append(a.free, b)
		}
		if a.reserved { // the reservation becomes what is queued
			a.reserved = false
			held -= a.worst
		}
		a.p.t.aheadHeld.Add(held)
		if err != nil {
			a.running = false
		}
		a.mu.Unlock()
		a.signal()
		if err != nil {
			return
		}
	}
}

// full reports whether a holds as much as it may, or the read-aheads of the transport's
// streams together do, a's own reservation aside; a.mu is held.
func (a *readAhead) full() bool {
	held := a.p.t.aheadHeld.Load()
	if a.reserved {
		held -= a.worst // begin's, for the read it is about to make
	}
	return a.bytes >= flowWindow || a.msgs >= maxSentEnvelopes || len(a.queue) >= maxAheadBatches ||
		held >= a.p.t.aheadMax
}

// decodedMessageBytes is what a message read costs a read-ahead besides its bytes on the wire:
// its envelope and the larger of a request and a reply with its error, decoded.
const decodedMessageBytes = int64(unsafe.Sizeof(wire.Envelope{}) +
	max(unsafe.Sizeof(wire.Request{}), unsafe.Sizeof(wire.Reply{})+unsafe.Sizeof(wire.Error{})))

// cost is what holding b counts against the transport's bound of read-aheads (aheadMax).
func cost(b *inBatch) int64 { return int64(b.size) + int64(b.n)*decodedMessageBytes }

// reserveAhead counts n against the bound of what the read-aheads hold together, unless they
// would then hold more than it allows; when they hold nothing, n is allowed whatever it is.
func (t *Transport) reserveAhead(n int64) bool {
	for {
		held := t.aheadHeld.Load()
		if held > 0 && held+n > t.aheadMax {
			return false
		}
		if t.aheadHeld.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// resume reads ahead again, while a wait holds the reader up, if the goroutine stopped because
// the read-aheads held as much as they may together and they no longer do.
func (a *readAhead) resume(wg *sync.WaitGroup) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.running || !a.waitingLocked() || a.full() || a.ended() {
		return
	}
	a.running, a.stop = true, false
	wg.Go(a.run)
}

// ended reports whether the last batch queued is the error that ended the stream; a.mu is held.
func (a *readAhead) ended() bool { return len(a.queue) > 0 && a.queue[len(a.queue)-1].err != nil }

// close lets go of what a holds once the stream's reader has ended: it no longer counts
// against the transport's bound, and what the goroutine still reads is dropped.
func (a *readAhead) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for i, ab := range a.queue {
		if ab.err == nil {
			a.p.t.aheadHeld.Add(-cost(ab.b))
		}
		a.queue[i] = aheadBatch{}
	}
	a.queue, a.bytes, a.msgs, a.free = nil, 0, 0, nil
}

// batch returns an empty batch to read into; a.mu is held.
func (a *readAhead) batch() *inBatch {
	if n := len(a.free); n > 0 {
		b := a.free[n-1]
		a.free = a.free[:n-1]
		return b
	}
	return &inBatch{max: a.max}
}

func (a *readAhead) signal() {
	select {
	case a.more <- struct{}{}:
	default:
	}
}

// next returns the batch read ahead that comes next, once the reader is done with done (a
// batch of its own or one that next returned before, to read into again), and whether there
// was one: when none is left and none is being read, the reader reads the stream itself, into
// the batch it returns. While the goroutine's read is under way, next waits for it and has it
// stop after it; waited is how long.
func (a *readAhead) next(done *inBatch) (ab aheadBatch, ok bool, waited time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running && len(a.queue) == 0 {
		a.free = nil // the collector's: a stream seldom waits for room
		return aheadBatch{b: done}, false, 0
	}
	done.reset()
	a.free = append(a.free, done)
	if len(a.queue) == 0 {
		a.stopLocked()
		began := time.Now()
		for a.running && len(a.queue) == 0 {
			a.mu.Unlock()
			<-a.more
			a.mu.Lock()
		}
		waited = time.Since(began)
		if len(a.queue) == 0 {
			b := a.batch()
			a.free = nil
			return aheadBatch{b: b}, false, waited
		}
	}
	ab = a.queue[0]
	a.queue[0] = aheadBatch{}
	a.queue = a.queue[1:]
	a.bytes -= ab.b.size
	a.msgs -= ab.b.n
	if ab.err == nil {
		a.p.t.aheadHeld.Add(-cost(ab.b))
	}
	return ab, true, waited
}
