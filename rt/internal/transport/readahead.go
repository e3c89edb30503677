package transport

import (
	"sync"
	"time"
)

// readAhead reads a served stream's next batches while its reader waits for room to take a
// request in, so that the peer's cancellations of the calls that hold that room reach them:
// they come on the stream behind the requests that wait. While the wait lasts, it ends each
// running call whose cancellation it reads or holds and answers the probes; it keeps the batches that
// hold more, in order, for the reader, which takes them before it reads the stream again. What
// it holds is bounded as one batch is, in messages (maxSentEnvelopes, whatever they decode to)
// and bytes (flowWindow, the most the peer may have in flight on the stream anyway), and in
// batches (maxAheadBatches): it reads no more past that until the reader has taken some, and
// no more once the wait has ended, so that a reader held up after it is not hidden from the
// peer (a probe read then waits for the reader).
//
// Only the reader starts and ends it (begin, end), and the reader reads the stream only when
// no read-ahead runs, so that the stream is never read by two goroutines at once.
type readAhead struct {
	p    *peerStream
	recv func(*inBatch) error // the stream's RecvMsg
	max  int                  // the peer's bound of a batch's messages

	mu      sync.Mutex
	running bool // a goroutine reads the stream
	waiting bool // the reader waits for room (begin, end)
	stop    bool // the goroutine is to stop once its read ends
	queue   []aheadBatch
	bytes   int // of the batches in queue, as they came
	msgs    int // of the batches in queue
	free    []*inBatch
	// more is signalled when a batch is queued or the goroutine ends.
	more chan struct{}
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
	return &readAhead{p: p, recv: recv, max: max, more: make(chan struct{}, 1)}
}

// begin notes that the reader waits for room, and reads ahead meanwhile unless it holds as
// much as it may or the stream has ended; wg owns the goroutine, which ends with the stream at
// the latest.
func (a *readAhead) begin(wg *sync.WaitGroup) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting, a.stop = true, false // a goroutine that was to stop reads on
	// What it holds from before may end a call that runs now: one whose cancellation was read
	// before it ran, or one read as the last wait ended.
	for _, ab := range a.queue {
		if ab.err == nil {
			a.p.readAhead(ab.b, ab.arrived)
		}
	}
	if a.running || a.full() || (len(a.queue) > 0 && a.queue[len(a.queue)-1].err != nil) {
		return
	}
	a.running = true
	wg.Go(a.run)
}

// end notes that the reader's wait has ended: the goroutine stops once its read ends, and
// what it reads meanwhile waits for the reader.
func (a *readAhead) end() {
	a.mu.Lock()
	a.waiting, a.stop = false, true
	a.mu.Unlock()
}

func (a *readAhead) run() {
	defer a.signal()
	for {
		a.mu.Lock()
		if a.stop || a.full() {
			a.running = false
			a.mu.Unlock()
			return
		}
		b := a.batch()
		a.mu.Unlock()
		err := a.recv(b)
		arrived := time.Now()
		// Taken in and queued in one critical section with the look at waiting: a wait that
		// begins meanwhile finds the batch queued (begin takes it in), and one that ends
		// meanwhile has nothing of it taken in after it.
		a.mu.Lock()
		left := true
		if err == nil && a.waiting {
			left = a.p.readAhead(b, arrived)
		}
		if left {
			a.queue = append(a.queue, aheadBatch{b: b, arrived: arrived, err: err})
			a.bytes += b.size
			a.msgs += b.n
		} else {
			b.reset()
			a.free = append(a.free, b)
		}
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

// full reports whether a holds as much as it may; a.mu is held.
func (a *readAhead) full() bool {
	return a.bytes >= flowWindow || a.msgs >= maxSentEnvelopes || len(a.queue) >= maxAheadBatches
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
		a.stop = true
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
	return ab, true, waited
}
