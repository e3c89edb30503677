package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// ErrStoreClosed is returned for a write submitted after Close.
var ErrStoreClosed = errors.New("store: closed")

// txnReq is one write waiting for the group commit.
type txnReq struct {
	ctx context.Context
	key string // the record it writes: one batch never writes a key twice
	// also, when set, is another key the write compares and changes: one batch never holds
	// two writes that share a key either of them changes, since etcd checks every nested
	// transaction's compares before any of them changes a key.
	also string
	txn  *pb.TxnRequest
	size int // encoded size as a nested transaction, measured once at submit
	res  txnResult
	err  error
	// done gets one token when res and err are set: room 1, so that the sender never waits
	// for a writer that has gone.
	done chan struct{}
	// queued is when the write was queued.
	queued time.Time
	sent   bool // guarded by batcher.mu
}

// txnReqs holds txnReqs for reuse, each with its done channel. One goes back only when
// nothing can touch it any more: its writer took its token, or withdrew it from the queue
// before it was sent.
var txnReqs = sync.Pool{New: func() any { return &txnReq{done: make(chan struct{}, 1)} }}

// finish tells r's writer that res and err are set. The sender does not touch r after it.
// A write is finished once; were it finished again, the token already there says as much, and
// the sender does not wait (it may hold b.mu) for a writer that will not take a second one.
func (r *txnReq) finish() {
	select {
	case r.done <- struct{}{}:
	default:
	}
}

// recycle gives r back for reuse.
func (r *txnReq) recycle() {
	*r = txnReq{done: r.done}
	txnReqs.Put(r)
}

// notSent is the error of a write abandoned before it was sent: definitely not applied.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() + " (write not sent)" }
func (e notSent) Unwrap() error { return e.err }

// batcher is the group commit: writes that wait are sent as one etcd transaction of nested
// transactions, with up to maxInFlight transactions outstanding. Each write keeps its own
// compare, so one write's failed compare never fails another's; the rules of each write hold
// exactly as without batching. A write that finds a free slot and nobody waiting is sent at
// once by its own goroutine, so a store that is not under load adds no latency. Under load (a
// quarter of pipelineMin writes wait or are in flight), while a transaction is in flight,
// another is sent only once pipelineMin writes wait or the oldest has waited lingerMax.
// etcd's cost is mostly per transaction, on the same processors as the nodes, so under load
// fewer and fuller transactions commit more writes per second than many small ones (cold
// activation with 64 callers: about 10 writes per transaction and 11 k activations/s when
// every free slot was used at once, about 30 and 16-17 k/s so), at the price of up to one
// round trip of waiting for a write that comes while the store is busy.
//
// Every write is bounded by its caller's context: the one sent at once is sent with it, and
// one sent in a batch stops waiting when its context ends (its outcome is then unknown, and
// the store settles it by re-reading).
type batcher struct {
	kv       txnSender
	max      int // writes per batch
	maxBytes int // encoded bytes of the nested transactions per batch
	timeout  time.Duration
	// life ends at close: batches still in flight stop waiting for etcd.
	life    context.Context
	end     context.CancelFunc
	sending sync.WaitGroup

	mu       sync.Mutex
	queue    []*txnReq
	inFlight int
	// inFlightWrites counts the writes of the transactions in flight.
	inFlightWrites int
	wake           chan struct{} // buffered 1: a slot freed or work arrived
	stop           chan struct{}
	stopped        chan struct{}
	closed         bool
}

const (
	// maxInFlight is the most group-commit transactions outstanding at once.
	maxInFlight = 4
	// defaultBatchBytes is the default byte budget of one batch: below etcd's default
	// --max-request-bytes (1.5 MiB) and clientv3's 2 MiB send limit, with room for the
	// envelope.
	defaultBatchBytes = 1 << 20
	// nestOverhead bounds what nesting adds to a transaction's encoded size: the tag and
	// length of its RequestOp, and of that op in the parent's Success list.
	nestOverhead = 2 * (1 + 5)
)

func newBatcher(kv txnSender, max, maxBytes int) *batcher {
	b := &batcher{
		kv: kv, max: max, maxBytes: maxBytes, timeout: 30 * time.Second,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	b.life, b.end = context.WithCancel(context.Background())
	go b.run()
	return b
}

// do submits one write of the record key, which compares and changes no other key but also
// (when set), and waits for its result, for at most ctx and the batcher's timeout. A write
// whose ctx ends while it is still queued is withdrawn and reports notSent; one whose ctx ends
// after it was sent reports ctx's error, which leaves its outcome unknown.
func (b *batcher) do(ctx context.Context, key, also string, txn *pb.TxnRequest) (txnResult, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return txnResult{}, ErrStoreClosed
	}
	if len(b.queue) == 0 && b.inFlight < maxInFlight && (b.inFlight == 0 || !b.loadedLocked()) {
		// Nobody waits and a slot is free: send it from here, on the caller's context.
		b.inFlight++
		b.inFlightWrites++
		b.sending.Add(1)
		b.mu.Unlock()
		res, err := b.sendAlone(ctx, txn)
		b.release(1)
		return res, err
	}
	r := txnReqs.Get().(*txnReq)
	r.ctx, r.key, r.also, r.txn, r.size, r.queued = ctx, key, also, txn, sizeTxnRequest(txn)+nestOverhead, time.Now()
	b.queue = append(b.queue, r)
	wake := b.wakesSenderLocked()
	b.mu.Unlock()
	if wake {
		b.poke()
	}
	select {
	case <-r.done:
		res, err := r.res, r.err
		r.recycle()
		return res, err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.sent {
		// The batch answers without us: r is the sender's from now on.
		return txnResult{}, ctx.Err()
	}
	for i, q := range b.queue {
		if q == r {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			r.recycle() // no one else holds it now
			break
		}
	}
	return txnResult{}, notSent{ctx.Err()}
}

// sendAlone sends a write that went at once, on its caller's ctx capped by the batcher's
// timeout. Close ends it as it ends the batches in flight, rather than wait for etcd's answer:
// its outcome is then unknown.
func (b *batcher) sendAlone(ctx context.Context, txn *pb.TxnRequest) (txnResult, error) {
	var cancel context.CancelFunc
	if b.uncapped(ctx) {
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	defer context.AfterFunc(b.life, cancel)()
	return b.sendOn(ctx, txn)
}

// sendOne sends one write on ctx, capped by the batcher's timeout.
func (b *batcher) sendOne(ctx context.Context, txn *pb.TxnRequest) (txnResult, error) {
	if b.uncapped(ctx) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	return b.sendOn(ctx, txn)
}

// uncapped reports whether ctx may outlast the batcher's timeout.
func (b *batcher) uncapped(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > b.timeout
}

// sendOn sends one write on ctx.
func (b *batcher) sendOn(ctx context.Context, txn *pb.TxnRequest) (txnResult, error) {
	reply, err := b.kv.txn(ctx, txn)
	if err != nil {
		return txnResult{}, err
	}
	return reply.result(), nil
}

// lingerMax is the longest a write waits for others to share a transaction while one is in
// flight: about an fsynced etcd round trip on a loaded machine.
const lingerMax = 2 * time.Millisecond

// loadedLocked reports whether the store is under load: a quarter of pipelineMin writes wait
// or are in flight. Only then does a write wait for others to share its transaction, so that a
// few writes at once (or a stalled store) still each take a free slot; b.mu is held.
func (b *batcher) loadedLocked() bool {
	return b.inFlightWrites+len(b.queue) >= max(1, b.pipelineMin()/4)
}

// pipelineMin is how many writes must wait before a transaction is sent while another is in
// flight: a quarter of a batch.
func (b *batcher) pipelineMin() int { return max(1, b.max/4) }

// wakesSenderLocked reports whether the write just queued can change what the sender does, so
// that it must be woken: a write that starts the queue (the sender sends it, or times its
// linger by it), or one that brings it to pipelineMin. A write that joins a shorter queue
// changes nothing: the sender waits for a slot (release wakes it), for pipelineMin writes, or
// for the linger it timed by the oldest. Waking it for every write cost a goroutine wake-up
// per write under load, two per activation. b.mu is held.
func (b *batcher) wakesSenderLocked() bool {
	return len(b.queue) == 1 || len(b.queue) >= b.pipelineMin()
}

func (b *batcher) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// release frees a slot after a transaction returned; queued writes may use it.
func (b *batcher) release(writes int) {
	b.mu.Lock()
	b.inFlight--
	b.inFlightWrites -= writes
	b.mu.Unlock()
	b.sending.Done()
	b.poke()
}

// run sends the queued writes in batches while slots are free, until close.
func (b *batcher) run() {
	defer close(b.stopped)
	defer b.sending.Wait()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		select {
		case <-b.stop:
			b.failQueued(ErrStoreClosed)
			return
		case <-b.wake:
		case <-linger.C:
		}
		for {
			b.mu.Lock()
			if len(b.queue) == 0 || b.inFlight >= maxInFlight {
				b.mu.Unlock()
				break
			}
			if b.inFlight > 0 && len(b.queue) < b.pipelineMin() && b.loadedLocked() {
				// Wait for more writes, or for a transaction to return, but never longer than
				// lingerMax: a transaction that etcd holds up must not hold up the writes
				// behind it.
				if wait := lingerMax - time.Since(b.queue[0].queued); wait > 0 {
					b.mu.Unlock()
					linger.Reset(wait)
					break
				}
			}
			batch := b.take()
			b.inFlight++
			b.inFlightWrites += len(batch)
			b.sending.Add(1)
			b.mu.Unlock()
			go func() {
				b.send(batch)
				b.release(len(batch))
			}()
		}
	}
}

// take removes the next batch from the queue, in queue order: at most max writes and
// maxBytes encoded bytes (a single larger write goes alone), never two writes that share a key
// (key or also). A write left behind holds its keys back from the writes queued after it, so
// that the writes of one key go in queue order. b.mu is held.
func (b *batcher) take() []*txnReq {
	batch := make([]*txnReq, 0, min(len(b.queue), b.max))
	keys := make(map[string]struct{}, cap(batch))
	rest := b.queue[:0]
	size := 0
	for i, r := range b.queue {
		if len(batch) > 0 && (len(batch) == b.max || size+r.size > b.maxBytes) {
			rest = append(rest, b.queue[i:]...) // the rest waits for the next batch, in order
			break
		}
		_, dup := keys[r.key]
		if r.also != "" {
			_, alsoDup := keys[r.also]
			dup = dup || alsoDup
		}
		keys[r.key] = struct{}{}
		if r.also != "" {
			keys[r.also] = struct{}{}
		}
		if dup {
			rest = append(rest, r)
			continue
		}
		r.sent = true
		size += r.size
		batch = append(batch, r)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}

// send sends a batch as one transaction. Its context is not any one writer's: its deadline is
// the latest of its writers' deadlines, capped by the batcher's timeout, so that it outlives
// none of them by more than it must and no writer's cancellation fails the others.
func (b *batcher) send(batch []*txnReq) {
	deadline := time.Now().Add(b.timeout)
	latest := time.Time{}
	for _, r := range batch {
		dl, ok := r.ctx.Deadline()
		if !ok || dl.After(deadline) {
			latest = deadline
			break
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	ctx, cancel := context.WithDeadline(b.life, latest)
	defer cancel()
	if len(batch) == 1 {
		r := batch[0]
		r.res, r.err = b.sendOne(ctx, r.txn)
		r.finish()
		return
	}
	ops := make([]*pb.RequestOp, len(batch))
	for i, r := range batch {
		ops[i] = opTxn(r.txn)
	}
	reply, err := b.kv.txn(ctx, &pb.TxnRequest{Success: ops})
	if err == nil {
		n := 0
		err = reply.eachNested(func(i int, res txnResult) {
			if i < len(batch) {
				batch[i].res = res
			}
			n++
		})
		if err == nil && n != len(batch) {
			err = fmt.Errorf("it has %d results for %d writes", n, len(batch))
		}
		if err != nil {
			err = malformed(err)
		}
	}
	for _, r := range batch {
		if err != nil {
			r.res, r.err = txnResult{}, err
		}
		r.finish()
	}
}

func (b *batcher) failQueued(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, r := range b.queue {
		r.err = err
		r.finish()
	}
	b.queue = nil
}

// close stops the flusher after the batch in flight; queued writes fail with ErrStoreClosed.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.stopped
		return
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.end() // batches in flight end now: their writers learn an unknown outcome
	<-b.stopped
}
