package store

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// ErrStoreClosed is returned for a write submitted after Close.
var ErrStoreClosed = errors.New("store: closed")

// txnResult is the outcome of one (possibly nested) transaction.
type txnResult struct {
	Succeeded bool
	Responses []*pb.ResponseOp
	// Revision is the store revision after the transaction: the ModRevision of its writes.
	Revision int64
}

// txnReq is one write waiting for the group commit.
type txnReq struct {
	ctx  context.Context
	key  string // the record it writes: one batch never writes a key twice
	txn  *pb.TxnRequest
	res  txnResult
	err  error
	done chan struct{}
	sent bool // guarded by batcher.mu
}

// notSent is the error of a write abandoned before it was sent: definitely not applied.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() + " (write not sent)" }
func (e notSent) Unwrap() error { return e.err }

// batcher is the group commit: writes that wait are sent as one etcd transaction of nested
// transactions, with up to maxInFlight transactions outstanding. Each write keeps its own
// compare, so one write's failed compare never fails another's; the rules of each write hold
// exactly as without batching. A write that finds a free slot and nobody waiting is sent at
// once by its own goroutine: batching adds no latency, only shares round trips under load.
type batcher struct {
	kv      kvClient
	max     int
	timeout time.Duration
	sending sync.WaitGroup

	mu       sync.Mutex
	queue    []*txnReq
	inFlight int
	wake     chan struct{} // buffered 1: a slot freed or work arrived
	stop     chan struct{}
	stopped  chan struct{}
	closed   bool
}

// maxInFlight is the most group-commit transactions outstanding at once.
const maxInFlight = 4

func newBatcher(kv kvClient, max int) *batcher {
	b := &batcher{
		kv: kv, max: max, timeout: 30 * time.Second,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	go b.run()
	return b
}

// do submits one write and waits for its result. A write whose ctx ends while it is still
// queued is withdrawn and reports notSent; once sent, do waits for the transaction's own
// answer, so a batched write's outcome is never left unknown by its caller's cancellation.
func (b *batcher) do(ctx context.Context, key string, txn *pb.TxnRequest) (txnResult, error) {
	r := &txnReq{ctx: ctx, key: key, txn: txn, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return txnResult{}, ErrStoreClosed
	}
	if len(b.queue) == 0 && b.inFlight < maxInFlight {
		// Nobody waits and a slot is free: send it from here, without a hand-off.
		b.inFlight++
		r.sent = true
		b.sending.Add(1)
		b.mu.Unlock()
		b.send([]*txnReq{r})
		b.release()
		return r.res, r.err
	}
	b.queue = append(b.queue, r)
	b.mu.Unlock()
	b.poke()
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !r.sent {
		for i, q := range b.queue {
			if q == r {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return txnResult{}, notSent{ctx.Err()}
	}
	b.mu.Unlock()
	<-r.done
	return r.res, r.err
}

func (b *batcher) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// release frees a slot after a transaction returned; queued writes may use it.
func (b *batcher) release() {
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	b.sending.Done()
	b.poke()
}

// run sends the queued writes in batches while slots are free, until close.
func (b *batcher) run() {
	defer close(b.stopped)
	defer b.sending.Wait()
	for {
		select {
		case <-b.stop:
			b.failQueued(ErrStoreClosed)
			return
		case <-b.wake:
		}
		for {
			b.mu.Lock()
			if b.inFlight >= maxInFlight || len(b.queue) == 0 {
				b.mu.Unlock()
				break
			}
			batch := b.take()
			b.inFlight++
			b.sending.Add(1)
			b.mu.Unlock()
			go func() {
				b.send(batch)
				b.release()
			}()
		}
	}
}

// take removes the next batch from the queue: at most max writes, never two of one key.
// b.mu is held.
func (b *batcher) take() []*txnReq {
	batch := make([]*txnReq, 0, min(len(b.queue), b.max))
	keys := make(map[string]struct{}, cap(batch))
	rest := b.queue[:0]
	for _, r := range b.queue {
		_, dup := keys[r.key]
		switch {
		case dup || len(batch) == b.max:
			rest = append(rest, r) // the next batch
		default:
			keys[r.key] = struct{}{}
			r.sent = true
			batch = append(batch, r)
		}
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}

func (b *batcher) send(batch []*txnReq) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	if len(batch) == 1 {
		r := batch[0]
		resp, err := b.kv.txn(ctx, r.txn)
		if err == nil {
			r.res = txnResult{Succeeded: resp.Succeeded, Responses: resp.Responses, Revision: resp.Header.Revision}
		}
		r.err = err
		close(r.done)
		return
	}
	ops := make([]*pb.RequestOp, len(batch))
	for i, r := range batch {
		ops[i] = opTxn(r.txn)
	}
	resp, err := b.kv.txn(ctx, &pb.TxnRequest{Success: ops})
	for i, r := range batch {
		switch {
		case err != nil:
			r.err = err
		default:
			sub := resp.Responses[i].GetResponseTxn()
			r.res = txnResult{Succeeded: sub.GetSucceeded(), Responses: sub.GetResponses(), Revision: resp.Header.Revision}
		}
		close(r.done)
	}
}

func (b *batcher) failQueued(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, r := range b.queue {
		r.err = err
		close(r.done)
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
	<-b.stopped
}
