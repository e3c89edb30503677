package transport

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// idleStream is a served stream outside any connection, with no call running.
func idleStream() *peerStream {
	return idleStreamOf(&Transport{cfg: Config{StallTimeout: time.Second}, aheadMax: defaultAheadMax})
}

// idleStreamOf is an idle stream served by t.
func idleStreamOf(t *Transport) *peerStream {
	p := &peerStream{t: t, began: time.Now()}
	p.out = newSender(func(*wire.Batch) error { return nil }, 1<<20, nil, true)
	return p
}

// runningCall is the call id of p, running.
func runningCall(t *testing.T, p *peerStream, id uint64) *callCtx {
	t.Helper()
	call := &callCtx{}
	call.p, call.id = p, id
	call.start(context.Background(), time.Time{}, false, time.Now())
	require.True(t, p.add(id, call))
	return call
}

// aheadOf is a read-ahead of an idle stream whose peer sends batches of fill's making, size
// bytes each, until it has sent most; it then ends the stream once release is closed.
func aheadOf(t *testing.T, fill func(*inBatch), size, most int) (a *readAhead, reads *atomic.Int64, release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	a, reads = aheadOn(idleStream(), fill, size, most, release)
	return a, reads, release
}

// aheadOn is aheadOf for the stream p, which ends once release is closed.
func aheadOn(p *peerStream, fill func(*inBatch), size, most int, release chan struct{}) (a *readAhead, reads *atomic.Int64) {
	reads = &atomic.Int64{}
	a = newReadAhead(p, func(b *inBatch) error {
		if reads.Add(1) > int64(most) {
			<-release
			return io.EOF
		}
		b.reset()
		fill(b)
		b.size = size
		return nil
	}, 0)
	return a, reads
}

// gatedPeer sends one batch, of fill's making, once in is closed or sent to (inRecv says
// that the read of it is under way), and then ends its stream at stop.
type gatedPeer struct {
	inRecv, in, end chan struct{}
	reads           atomic.Int64
	stop            func()
}

func newGatedPeer() *gatedPeer {
	g := &gatedPeer{inRecv: make(chan struct{}, 1), in: make(chan struct{}), end: make(chan struct{})}
	g.stop = sync.OnceFunc(func() { close(g.end) })
	return g
}

// aheadOf is a read-ahead of p, whose peer is g.
func (g *gatedPeer) aheadOf(p *peerStream, fill func(*inBatch)) *readAhead {
	return newReadAhead(p, func(b *inBatch) error {
		if g.reads.Add(1) > 1 {
			<-g.end
			return io.EOF
		}
		g.inRecv <- struct{}{}
		<-g.in
		b.reset()
		fill(b)
		b.size = 10
		return nil
	}, 0)
}

// goroutineRuns reports whether a's goroutine reads the stream.
func goroutineRuns(a *readAhead) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running
}

// endAhead lets a's stream end, and takes what a read until then.
func endAhead(t *testing.T, a *readAhead, release chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	close(release)
	wg.Wait()
	b := &inBatch{}
	for {
		ab, ok, _ := a.next(b)
		if !ok || ab.err != nil {
			return
		}
		b = ab.b
	}
}

// A read-ahead holds at most maxAheadBatches batches, and flowWindow bytes of them, that hold
// something for the reader; batches that hold only what it took in (probes, cancellations of
// running calls) are not kept, and it reads on past them.
func TestAReadAheadHoldsABoundedBacklog(t *testing.T) {
	cancelOfNone := func(b *inBatch) { b.next().Cancel = &wire.Cancel{CallId: 9} }
	probe := func(b *inBatch) { b.next().Probe = &wire.Probe{} }
	requests := func(b *inBatch) {
		for i := range 1000 {
			b.next().Request = &wire.Request{CallId: uint64(i)}
		}
	}
	for _, tc := range []struct {
		name       string
		fill       func(*inBatch)
		size, most int
		held       int // batches held once it stops
	}{
		{"many small batches", cancelOfNone, 10, 1000, maxAheadBatches},
		{"large batches", cancelOfNone, 600 << 10, 1000, 2},
		{"batches of many messages", requests, 8000, 1000, 5}, // 5,000 messages: past a batch's 4,096
		{"probes only", probe, 10, 500, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, reads, release := aheadOf(t, tc.fill, tc.size, tc.most)
			var wg sync.WaitGroup
			a.begin(&wg, nil)
			if tc.held == 0 {
				require.Eventually(t, func() bool { return reads.Load() > int64(tc.most) }, 10*time.Second, time.Millisecond,
					"it reads on past batches it keeps nothing of")
			} else {
				require.Eventually(t, func() bool { return !goroutineRuns(a) }, 10*time.Second, time.Millisecond, "it stops")
				assert.Equal(t, int64(tc.held), reads.Load(), "it reads no more than it holds")
			}
			a.mu.Lock()
			assert.Len(t, a.queue, tc.held)
			a.mu.Unlock()
			endAhead(t, a, release, &wg)
		})
	}
}

// Once the reader's wait has ended, the read under way is left whole to the reader, probes
// included, and no more is read: a reader held up after its wait is not hidden from the peer.
func TestAReadAheadLeavesWhatItReadsAfterTheWaitToTheReader(t *testing.T) {
	p, g := idleStream(), newGatedPeer()
	defer g.stop()
	a := g.aheadOf(p, func(b *inBatch) { b.next().Probe = &wire.Probe{} })
	var wg sync.WaitGroup
	w := a.begin(&wg, nil)
	<-g.inRecv
	a.end(w) // the wait ends while the read is under way
	close(g.in)
	wg.Wait()
	assert.Equal(t, int64(1), g.reads.Load(), "nothing more is read")
	ab, ok, _ := a.next(&inBatch{})
	require.True(t, ok)
	require.Len(t, ab.b.envelopes(), 1)
	assert.NotNil(t, ab.b.envelopes()[0].Probe, "the probe is the reader's to answer")
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	assert.Empty(t, p.out.queue, "and was not answered")
}

// A wait that begins as the goroutine of the last one is about to stop keeps it reading: the
// reader never waits with nothing read ahead.
func TestAWaitThatBeginsAsTheReadAheadStopsKeepsItReading(t *testing.T) {
	p := idleStream()
	for round := range 2000 {
		g := newGatedPeer()
		a := g.aheadOf(p, func(b *inBatch) { b.next().Request = &wire.Request{CallId: 5} })
		var wg sync.WaitGroup
		a.begin(&wg, nil)
		<-g.inRecv
		go func() { g.in <- struct{}{} }()
		_, ok, _ := a.next(&inBatch{}) // the reader takes the batch; the goroutine is to stop
		require.True(t, ok)
		a.begin(&wg, nil) // and waits for room again at once
		for g.reads.Load() < 2 {
			if !goroutineRuns(a) {
				require.FailNow(t, "the reader waits with nothing read ahead", "round %d", round)
			}
			runtime.Gosched()
		}
		g.stop()
		wg.Wait()
	}
}

// A cancellation that the read under way brought as a wait ended is queued for the reader;
// when the reader's next wait begins before it takes it, the wait ends the call it names,
// which may be the call that holds the room.
func TestAWaitEndsTheRunningCallsWhoseCancellationsAreQueued(t *testing.T) {
	p, g := idleStream(), newGatedPeer()
	call := runningCall(t, p, 7)
	a := g.aheadOf(p, func(b *inBatch) { b.next().Cancel = &wire.Cancel{CallId: 7} })
	var wg sync.WaitGroup
	defer wg.Wait()
	defer g.stop()         // first: the stream ends, and the goroutine with it
	w := a.begin(&wg, nil) // a wait
	<-g.inRecv
	a.end(w)    // it ends: the room came
	close(g.in) // the read under way brings "cancel 7", queued unread
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.queue) == 1 && !a.running
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, call.Err())
	a.begin(&wg, nil) // the next wait, for room that call 7 holds
	assert.Error(t, call.Err(), "the cancellation read is applied")
}

// A Reading that the reply queue, at its bound, did not take is not counted as said: the
// reader's next wait for room says it at once, rather than an interval later.
func TestAReadingTheFullReplyQueueDidNotTakeIsNotCountedAsSaid(t *testing.T) {
	p := idleStream()
	for !p.out.full() {
		p.out.push(queuedReply(&wire.Reply{CallId: 1, Payload: make([]byte, 64<<10)}))
	}
	every := p.t.readingEvery()
	p.readBatch(every, false) // a batch read an interval in: the queue does not take its Reading
	assert.Zero(t, p.saidReading.Load(), "nothing said")
	p.sayReading(math.MaxInt) // as a wait for room does
	assert.NotZero(t, p.saidReading.Load())
}

// A wait that ends and the next that begins while the read-ahead's read is under way, or as
// it returns, leave no cancellation it brought unapplied through the second wait: whichever
// comes first, the batch is taken in.
func TestACancellationReadAsWaitsEndAndBeginIsTakenIn(t *testing.T) {
	for round := range 20000 {
		p, g := idleStream(), newGatedPeer()
		call := runningCall(t, p, 7)
		a := g.aheadOf(p, func(b *inBatch) { b.next().Cancel = &wire.Cancel{CallId: 7} })
		var wg sync.WaitGroup
		w := a.begin(&wg, nil)
		<-g.inRecv
		a.end(w)
		close(g.in)
		for range round % 400 { // the next wait begins somewhere about the read's return
			runtime.Gosched()
		}
		a.begin(&wg, nil)
		for {
			a.mu.Lock()
			queued := len(a.queue) > 0
			a.mu.Unlock()
			if queued || call.Err() != nil {
				break
			}
			runtime.Gosched()
		}
		require.Error(t, call.Err(), "round %d: the cancellation of the running call is applied in the wait", round)
		g.stop()
		wg.Wait()
	}
}

// A handler's wait reads ahead only while the reader takes the handler's request in: once the
// reader has returned from the handler, the wait, which may run on off the reader, no longer
// holds the read-ahead reading, nor does its end undo a later wait's count. Else the reader's
// next wait, once ended, would leave the read-ahead reading on and answering probes, and a
// reader stopped after it would be hidden from the peer.
func TestAHandlersWaitReadsAheadOnlyWhileTheReaderIsInTheHandler(t *testing.T) {
	p, g := idleStream(), newGatedPeer()
	defer g.stop()
	a := g.aheadOf(p, func(b *inBatch) { b.next().Probe = &wire.Probe{} })
	call := runningCall(t, p, 7)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(g.in) // first: the read under way ends, and the stream after it

	stopping := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.stop && !a.waitingLocked()
	}
	call.taking.Store(false)
	assert.Equal(t, aheadWait{}, a.begin(&wg, call), "the reader is not in the handler: not counted")

	call.taking.Store(true) // the reader takes the request in
	held := a.begin(&wg, call)
	<-g.inRecv // it reads ahead
	call.taking.Store(false)
	a.handled() // the reader is back from the handler; the wait goes on, off the reader
	assert.True(t, stopping(), "the handler's wait no longer holds the reader up")

	own := a.begin(&wg, nil) // the reader's own next wait
	assert.False(t, stopping())
	a.end(own)
	assert.True(t, stopping(), "its end stops the read-ahead")
	a.end(held) // the handler's wait ends at last
	a.mu.Lock()
	assert.Zero(t, a.own)
	assert.Zero(t, a.inHandle, "and counts for nothing")
	a.mu.Unlock()
}

// The read-aheads of a transport's streams hold aheadMax together at most, a read under way
// counting as the most its batch may cost: a stream reads no more ahead while the others hold
// that much, and reads on once they have let some go (its wait's next window resumes it); what
// a stream holds goes with it when its reader ends.
func TestReadAheadsHoldABoundedBacklogTogether(t *testing.T) {
	requests := func(b *inBatch) {
		for i := range 10 {
			b.next().Request = &wire.Request{CallId: uint64(i)}
		}
	}
	const size = 1000
	batchCost := size + 10*decodedMessageBytes
	tr := &Transport{cfg: Config{StallTimeout: time.Second}}
	release := make(chan struct{})
	first, firstReads := aheadOn(idleStreamOf(tr), requests, size, 100, release)
	second, secondReads := aheadOn(idleStreamOf(tr), requests, size, 100, release)
	// Room for three batches besides a read under way: four are read, the fourth as the
	// read of the largest batch fits.
	tr.aheadMax = first.worst + 3*batchCost
	var wg sync.WaitGroup
	first.begin(&wg, nil)
	require.Eventually(t, func() bool { return !goroutineRuns(first) }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 4*batchCost, tr.aheadHeld.Load(), "the first stream holds all the transport may")
	assert.Equal(t, int64(4), firstReads.Load())
	second.begin(&wg, nil)
	require.Eventually(t, func() bool { return !goroutineRuns(second) }, 10*time.Second, time.Millisecond,
		"the second reads nothing ahead")
	assert.Zero(t, secondReads.Load())

	for range 2 { // the first stream's reader takes two batches in
		_, ok, _ := first.next(&inBatch{})
		require.True(t, ok)
	}
	second.resume(&wg) // its wait's next window
	require.Eventually(t, func() bool { return !goroutineRuns(second) }, 10*time.Second, time.Millisecond)
	assert.Equal(t, int64(2), secondReads.Load(), "the second reads what the first let go")
	assert.Equal(t, 4*batchCost, tr.aheadHeld.Load())

	first.close()
	assert.Equal(t, 2*batchCost, tr.aheadHeld.Load(), "what the first held goes with its reader")
	second.close()
	assert.Zero(t, tr.aheadHeld.Load())
	close(release)
	wg.Wait()
}

// A stream that found the read-aheads holding all they may together reads nothing ahead, and
// once they have let it go, its wait's next window reads ahead after all.
func TestAWaitReadsAheadOnceTheOtherStreamsLetTheBoundGo(t *testing.T) {
	tr := &Transport{cfg: Config{StallTimeout: time.Second}, aheadMax: defaultAheadMax}
	p := idleStreamOf(tr)
	release := make(chan struct{})
	var reads *atomic.Int64
	p.ahead, reads = aheadOn(p, func(b *inBatch) { b.next().Request = &wire.Request{CallId: 9} }, 10, 1, release)
	runningCall(t, p, 7)
	tr.aheadHeld.Store(tr.aheadMax) // the other streams' read-aheads hold it all

	room := make(chan struct{})
	waited := make(chan error, 1)
	go func() {
		waited <- p.waitReading(context.Background(), func(ctx context.Context) error {
			select {
			case <-room:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil)
	}()
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, reads.Load(), "nothing is read ahead past the bound")
	tr.aheadHeld.Store(0) // they let it go
	require.Eventually(t, func() bool { return reads.Load() > 0 }, 5*time.Second, time.Millisecond,
		"the wait's next window reads ahead")
	close(room)
	require.NoError(t, <-waited)
	close(release)
	tr.readers.Wait()
}

// Reads under way count against the bound as the most their batches may cost: streams whose
// read-aheads all wait for their peers' next batches cannot, once those come, take the
// read-aheads together past it.
func TestReadsAheadUnderWayCountAgainstTheBound(t *testing.T) {
	const streams, size, msgs = 16, 1000, 4096
	tr := &Transport{cfg: Config{StallTimeout: time.Second}}
	send, release := make(chan struct{}), make(chan struct{})
	var parked atomic.Int64
	aheads := make([]*readAhead, streams)
	for i := range aheads {
		var reads atomic.Int64
		aheads[i] = newReadAhead(idleStreamOf(tr), func(b *inBatch) error {
			if reads.Add(1) > 1 {
				<-release
				return io.EOF
			}
			parked.Add(1)
			<-send // the peers send nothing until every stream waits
			b.reset()
			for j := range msgs {
				b.next().Request = &wire.Request{CallId: uint64(j)}
			}
			b.size = size
			return nil
		}, 0)
	}
	tr.aheadMax = 2 * aheads[0].worst
	var wg sync.WaitGroup
	running := func() (n int) {
		for _, a := range aheads {
			if goroutineRuns(a) {
				n++
			}
		}
		return n
	}
	for _, a := range aheads {
		a.begin(&wg, nil)
	}
	require.Eventually(t, func() bool { return running() == int(parked.Load()) }, 10*time.Second, time.Millisecond)
	assert.Equal(t, int64(2), parked.Load(), "two reads under way fit the bound")
	close(send)
	require.Eventually(t, func() bool { return running() == 0 }, 10*time.Second, time.Millisecond)
	assert.LessOrEqual(t, tr.aheadHeld.Load(), tr.aheadMax)
	for _, a := range aheads {
		a.close()
	}
	assert.Zero(t, tr.aheadHeld.Load())
	close(release)
	wg.Wait()
}

// A read ahead under way whose wait has ended is the reader's next read, which counts for
// nothing: a peer that then sends nothing more does not hold the read-aheads' bound, and
// another stream's wait reads ahead. Should a wait begin again, the read counts again.
func TestAReadAheadUnderWayAfterItsWaitHoldsNoneOfTheBound(t *testing.T) {
	tr := &Transport{cfg: Config{StallTimeout: time.Second, MaxMessageSize: DefaultMaxMessageSize}}
	quiet, g := idleStreamOf(tr), newGatedPeer()
	quiet.ahead = g.aheadOf(quiet, func(b *inBatch) { b.next().Request = &wire.Request{CallId: 3} })
	tr.aheadMax = quiet.ahead.worst // room for one read under way
	var wg sync.WaitGroup
	defer wg.Wait()
	defer g.stop()
	send := sync.OnceFunc(func() { close(g.in) })
	defer send() // first: the quiet peer's batch comes, whatever failed

	w := quiet.ahead.begin(&wg, nil)
	<-g.inRecv // its peer sends nothing yet
	assert.Equal(t, quiet.ahead.worst, tr.aheadHeld.Load(), "a read under way while the reader waits counts as its largest batch")
	quiet.ahead.end(w)
	assert.Zero(t, tr.aheadHeld.Load(), "once the wait has ended, it counts for nothing")

	p, release := idleStreamOf(tr), make(chan struct{})
	endOther := sync.OnceFunc(func() { close(release) })
	defer endOther()
	call := runningCall(t, p, 7)
	p.ahead, _ = aheadOn(p, func(b *inBatch) { b.next().Cancel = &wire.Cancel{CallId: 7} }, 10, 1, release)
	other := p.ahead.begin(&wg, nil)
	require.Eventually(t, func() bool { return call.Err() != nil }, 5*time.Second, time.Millisecond,
		"another stream's wait reads ahead")
	p.ahead.end(other)
	endOther()

	w = quiet.ahead.begin(&wg, nil) // the quiet stream waits again, its read still under way
	assert.Equal(t, quiet.ahead.worst, tr.aheadHeld.Load(), "it counts again")
	quiet.ahead.end(w)
	send() // the batch comes, and waits for the reader
	g.stop()
	require.Eventually(t, func() bool { return !goroutineRuns(quiet.ahead) }, 5*time.Second, time.Millisecond)
	quiet.ahead.close()
	p.ahead.close()
	assert.Zero(t, tr.aheadHeld.Load())
}

// The reservation that a wait makes for the read of a goroutine already running is that
// read's: it does not make the goroutine find the read-aheads holding all they may and stop.
func TestAReadAheadsOwnReservationDoesNotStopIt(t *testing.T) {
	tr := &Transport{cfg: Config{StallTimeout: time.Second}}
	a := newReadAhead(idleStreamOf(tr), func(*inBatch) error { return io.EOF }, 0)
	tr.aheadMax = a.worst
	a.running = true                     // a goroutine about to read (none runs here)
	w := a.begin(&sync.WaitGroup{}, nil) // reserves for its read
	a.mu.Lock()
	reserved, full := a.reserved, a.full()
	a.mu.Unlock()
	require.True(t, reserved)
	assert.Equal(t, a.worst, tr.aheadHeld.Load())
	assert.False(t, full, "its own reservation aside, nothing is held")
	a.end(w)
	assert.Zero(t, tr.aheadHeld.Load(), "the wait's end gives it back")
}

// The read-aheads' count of what they hold together stays exact through every order of waits,
// reads and ends (aheadsAtRandom), with room for one read under way.
func TestTheReadAheadsCountStaysExactAtRandom(t *testing.T) {
	for seed := range uint64(30) {
		aheadsAtRandom(t, seed+1)
		if t.Failed() {
			return
		}
	}
}

// aheadsAtRandom runs streams whose peers send random batches at random paces, whose readers
// wait at random (their own waits, and handlers' waits on any goroutine that begin before or
// after the reader has left the handler), and which end at random, some with a read ahead
// under way. A watch checks all along that the transport's count is the streams'
// reservations and queued batches exactly, never below 0 nor past the bound and a batch a
// stream, and that a reservation always has a goroutine and a wait that holds the reader up;
// it is 0 once every stream has ended.
func aheadsAtRandom(t *testing.T, seed uint64) {
	const largestSize, largestCount = 64 << 10, 30 // of the peers' batches
	const streams = 6
	tr := &Transport{cfg: Config{StallTimeout: time.Second}}
	var goroutines, readers, handlers sync.WaitGroup
	aheads := make([]*readAhead, streams)
	gones := make([]chan struct{}, streams)
	var worst int64
	for i := range aheads {
		p := idleStreamOf(tr)
		gone := make(chan struct{})
		gones[i] = gone
		rr := rand.New(rand.NewPCG(seed, uint64(i)*2+1))
		left := 20 + rr.IntN(40)
		recv := func(b *inBatch) error {
			if left == 0 {
				return io.EOF
			}
			left--
			switch rr.IntN(3) {
			case 0:
			case 1:
				time.Sleep(time.Duration(rr.IntN(300)) * time.Microsecond)
			case 2:
				select { // a quiet peer
				case <-time.After(time.Duration(rr.IntN(3)) * time.Millisecond):
				case <-gone:
					return io.ErrUnexpectedEOF
				}
			}
			b.reset()
			n := 1 + rr.IntN(largestCount)
			for j := range n {
				switch rr.IntN(4) {
				case 0:
					b.next().Probe = &wire.Probe{}
				case 1:
					b.next().Cancel = &wire.Cancel{CallId: 1 << 40}
				default:
					b.next().Request = &wire.Request{CallId: uint64(j)}
				}
			}
			b.size = rr.IntN(largestSize)
			return nil
		}
		aheads[i] = newReadAhead(p, recv, 0)
		p.ahead = aheads[i]
		worst = aheads[i].worst
	}
	tr.aheadMax = worst
	stopMon := make(chan struct{})
	var monDone sync.WaitGroup
	monDone.Go(func() {
		for {
			select {
			case <-stopMon:
				return
			default:
			}
			h := tr.aheadHeld.Load()
			if h < 0 {
				t.Errorf("seed %d: the read-aheads hold %d, below 0", seed, h)
			}
			var want int64
			for _, a := range aheads {
				a.mu.Lock()
				if a.reserved && !a.running {
					t.Errorf("seed %d: a reservation with no goroutine running", seed)
				}
				if a.reserved && !a.waitingLocked() {
					t.Errorf("seed %d: a reservation with no wait holding the reader up", seed)
				}
				if a.reserved {
					want += a.worst
				}
				for _, ab := range a.queue {
					if ab.err == nil {
						want += cost(ab.b)
					}
				}
			}
			if got := tr.aheadHeld.Load(); got != want {
				t.Errorf("seed %d: the read-aheads hold %d, their reservations and queues %d", seed, got, want)
			}
			// The bound, and one batch a stream past it at most.
			if got, most := tr.aheadHeld.Load(), tr.aheadMax+streams*(largestSize+largestCount*decodedMessageBytes); got > most {
				t.Errorf("seed %d: the read-aheads hold %d, over the bound and a batch a stream (%d)", seed, got, most)
			}
			for _, a := range aheads {
				a.mu.Unlock()
			}
			time.Sleep(20 * time.Microsecond)
		}
	})
	for i, a := range aheads {
		r := rand.New(rand.NewPCG(seed, uint64(i)*2+2))
		readers.Go(func() {
			defer close(gones[i])
			defer a.close()
			b := &inBatch{}
			for {
				ab, ok, _ := a.next(b)
				b = ab.b
				err := ab.err
				if !ok {
					err = a.recv(b)
				}
				if err != nil {
					return
				}
				if r.IntN(40) == 0 {
					return // ctx ended: the goroutine may still read
				}
				a.reading(b, time.Now())
				for j := range b.n {
					if r.IntN(3) != 0 {
						continue
					}
					a.at = j
					if r.IntN(2) == 0 { // the reader's own wait
						w := a.begin(&goroutines, nil)
						time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
						if r.IntN(2) == 0 {
							a.resume(&goroutines)
						}
						time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
						a.end(w)
						continue
					}
					call := &callCtx{}
					call.taking.Store(true)
					for k := range 1 + r.IntN(3) {
						d1 := time.Duration(r.IntN(300)) * time.Microsecond
						d2 := time.Duration(r.IntN(300)) * time.Microsecond
						res := k%2 == 0
						handlers.Go(func() {
							time.Sleep(d1)
							w := a.begin(&goroutines, call)
							if res {
								a.resume(&goroutines)
							}
							time.Sleep(d2)
							a.end(w)
						})
					}
					time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
					call.taking.Store(false)
					a.handled()
				}
				b.reset()
			}
		})
	}
	readers.Wait()
	handlers.Wait()
	goroutines.Wait()
	close(stopMon)
	monDone.Wait()
	if h := tr.aheadHeld.Load(); h != 0 {
		t.Errorf("seed %d: the read-aheads hold %d once every stream has ended", seed, h)
	}
}

// A read-ahead closed while a wait still counts reads no more: what it would read is dropped,
// and it would read on for nothing.
func TestAClosedReadAheadReadsNoMore(t *testing.T) {
	step, end := make(chan struct{}), make(chan struct{})
	var reads atomic.Int64
	a := newReadAhead(idleStream(), func(b *inBatch) error {
		select {
		case <-step: // the peer sends its next batch
		case <-end:
			return io.EOF
		}
		reads.Add(1)
		b.reset()
		b.next().Probe = &wire.Probe{}
		return nil
	}, 0)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(end)
	a.begin(&wg, nil) // a wait that never ends
	step <- struct{}{}
	require.Eventually(t, func() bool { return reads.Load() == 1 }, 5*time.Second, time.Millisecond)
	a.close()          // the reader has ended
	step <- struct{}{} // the read under way ends
	require.Eventually(t, func() bool { return !goroutineRuns(a) }, 5*time.Second, time.Millisecond,
		"it reads no more")
	assert.Zero(t, a.p.t.aheadHeld.Load())
}
