package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/sdk"
)

// A close with a budget of its own returns within it when etcd does not answer, with an
// outcome the caller can repair, instead of waiting for the group commit's own timeout.
func TestD3_ReleaseReturnsWhenItsContextEnds(t *testing.T) {
	s, _ := newFaultyStore(t)
	owner := registerNode(t, s, "node").Owner()
	rec := mustReady(t, s, spot("r1"), owner)
	rel, err := s.BeginRelease(ctx, spot("r2"), mustReady(t, s, spot("r2"), owner), ReleaseExplicitClose)
	require.NoError(t, err)
	hang := newStall(s.kv)
	t.Cleanup(hang.release)
	setSender(s, hang)

	for name, release := range map[string]func(context.Context) error{
		"begin": func(ctx context.Context) error {
			_, err := s.BeginRelease(ctx, spot("r1"), rec, ReleaseExplicitClose)
			return err
		},
		"finish": func(ctx context.Context) error { return s.FinishRelease(ctx, spot("r2"), rel) },
	} {
		t.Run(name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- release(cctx) }()
			select {
			case err := <-done:
				require.ErrorIs(t, err, ErrOutcomeUnknown)
				require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(10 * time.Second):
				t.Fatal("the release did not return when its context ended")
			}
		})
	}
}

// newStalledBatcher returns a group commit on a real etcd whose transactions wait at a stall,
// with all its slots taken by writes that wait there; free ends the i-th of them.
func newStalledBatcher(t *testing.T, timeout time.Duration) (b *batcher, st *stall, free func(i int)) {
	t.Helper()
	st = newStall(newKVClient(startEtcd(t)))
	b = newBatcher(st, 16, defaultBatchBytes)
	b.timeout = timeout
	t.Cleanup(b.close)
	t.Cleanup(st.release) // before b.close: the sends in flight end
	cancels := make([]context.CancelFunc, maxInFlight)
	for i := range maxInFlight {
		cctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		t.Cleanup(cancel)
		go func() { _, _ = b.do(cctx, fmt.Sprint("/slot/", i), "", putTxn(fmt.Sprint("/slot/", i), "x")) }()
		// One at a time: each goes in a transaction of its own, the first at once and each
		// later one after lingerMax, as no more writes come to share it.
		st.waitGiven(t, 1)
	}
	return b, st, func(i int) { cancels[i]() }
}

func putTxn(key, value string) *pb.TxnRequest {
	return &pb.TxnRequest{Success: []*pb.RequestOp{opPut(key, value)}}
}

// queued waits until n writes wait in b's queue.
func queued(t *testing.T, b *batcher, n int) {
	t.Helper()
	for range 1000 {
		b.mu.Lock()
		l := len(b.queue)
		b.mu.Unlock()
		if l == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the queue never held %d writes", n)
}

type doResult struct {
	res txnResult
	err error
}

func submit(b *batcher, ctx context.Context, key string) chan doResult {
	out := make(chan doResult, 1)
	go func() {
		res, err := b.do(ctx, key, "", putTxn(key, "v"))
		out <- doResult{res, err}
	}()
	return out
}

// A write sent in a batch returns when its own context ends, with the context's error (its
// outcome is unknown, so the caller settles it); one withdrawn before it was sent says so.
func TestD3_BatchedWriteReturnsWhenItsContextEnds(t *testing.T) {
	b, st, free := newStalledBatcher(t, time.Minute)
	sentCtx, cancelSent := context.WithCancel(ctx)
	defer cancelSent()
	sent := submit(b, sentCtx, "/w/sent")
	withdrawnCtx, cancelWithdrawn := context.WithCancel(ctx)
	defer cancelWithdrawn()
	withdrawn := submit(b, withdrawnCtx, "/w/withdrawn")
	queued(t, b, 2)

	cancelWithdrawn()
	r := wait.For(t, withdrawn)
	require.ErrorIs(t, r.err, context.Canceled)
	require.True(t, errors.As(r.err, new(notSent)), "a write withdrawn before it was sent is not ambiguous: %v", r.err)
	queued(t, b, 1)

	free(0) // a slot's write ends with its context: the queued write is sent
	st.waitGiven(t, 1)
	queued(t, b, 0)
	cancelSent()
	r = wait.For(t, sent)
	require.ErrorIs(t, r.err, context.Canceled)
	assert.False(t, errors.As(r.err, new(notSent)), "a sent write's outcome is unknown")
	assert.True(t, ambiguous(r.err))
}

// A batch waits as long as its most patient write and no longer than the batcher's timeout.
func TestD3_BatchDeadlineIsItsWritersLatest(t *testing.T) {
	for name, tc := range map[string]struct {
		deadlines []time.Duration // 0: none
		capped    bool
	}{
		"latest of its writers": {deadlines: []time.Duration{20 * time.Second, 40 * time.Second, 30 * time.Second}},
		"capped: one without":   {deadlines: []time.Duration{20 * time.Second, 0}, capped: true},
		"capped: one too late":  {deadlines: []time.Duration{20 * time.Second, time.Hour}, capped: true},
	} {
		t.Run(name, func(t *testing.T) {
			const timeout = time.Minute
			b, st, free := newStalledBatcher(t, timeout)
			var latest time.Time
			var results []chan doResult
			for i, d := range tc.deadlines {
				cctx, cancel := ctx, context.CancelFunc(func() {})
				if d > 0 {
					cctx, cancel = context.WithTimeout(ctx, d)
					if dl, _ := cctx.Deadline(); dl.After(latest) {
						latest = dl
					}
				}
				defer cancel()
				results = append(results, submit(b, cctx, fmt.Sprint("/d/", i)))
			}
			queued(t, b, len(tc.deadlines))
			before := time.Now()
			free(0)
			st.waitGiven(t, 1)
			txns := st.transactions()
			batch := txns[len(txns)-1]
			require.Equal(t, len(tc.deadlines), batch.writes, "the queued writes went as one batch")
			if tc.capped {
				assert.False(t, batch.deadline.Before(before.Add(timeout)), "capped at the batcher's timeout")
				assert.False(t, batch.deadline.After(time.Now().Add(timeout)), "capped at the batcher's timeout")
			} else {
				assert.Equal(t, latest, batch.deadline)
			}
			st.release()
			for _, ch := range results {
				require.NoError(t, wait.For(t, ch).err)
			}
		})
	}
}

// TestB5_AQueuedWriteWakesTheGroupCommitOnlyWhenItChangesWhatItSends: under load, the write
// that starts the queue wakes the group commit's sender (which sends it or times its linger by
// it), and so does the one that brings the queue to a quarter batch; the writes in between
// change nothing the sender would do, and wake no one.
func TestB5_AQueuedWriteWakesTheGroupCommitOnlyWhenItChangesWhatItSends(t *testing.T) {
	// No sender runs: the test counts its wake-ups, with room for one per write.
	b := &batcher{max: 16, maxBytes: defaultBatchBytes, timeout: time.Minute, wake: make(chan struct{}, 16)}
	b.inFlight, b.inFlightWrites = 1, 16 // a transaction in flight: loaded
	wctx, cancel := context.WithCancel(ctx)
	var writes []chan doResult
	defer func() {
		cancel()
		for _, w := range writes {
			assert.True(t, errors.As(wait.For(t, w).err, new(notSent)), "a withdrawn write was never sent")
		}
	}()
	for i := range b.pipelineMin() {
		writes = append(writes, submit(b, wctx, fmt.Sprint("/q/", i)))
		queued(t, b, i+1)
	}
	// Each write decided under the lock whether to wake the sender; a wake-up it decided on
	// may still be on its way.
	for range 2 {
		wait.For(t, b.wake)
	}
	time.Sleep(50 * time.Millisecond)
	assert.Empty(t, b.wake, "only the first write and the one that made a quarter batch woke the sender")

	q := &batcher{max: 16}
	for _, n := range []int{0, 1, 2, q.pipelineMin() - 1, q.pipelineMin(), q.pipelineMin() + 1} {
		q.queue = make([]*txnReq, n)
		assert.Equal(t, n == 1 || n >= q.pipelineMin(), q.wakesSenderLocked(), "a queue of %d", n)
	}
}

// TestB5_AFewWritesGoOnceTheyLingeredWhileASlotIsFree: while a transaction is in flight,
// writes fewer than a quarter batch go once they lingered for company, though no transaction
// returns and no later write wakes the group commit: the first of them timed the linger.
func TestB5_AFewWritesGoOnceTheyLingeredWhileASlotIsFree(t *testing.T) {
	st := newStall(newKVClient(startEtcd(t)))
	b := newBatcher(st, 16, defaultBatchBytes)
	t.Cleanup(b.close)
	t.Cleanup(st.release) // before b.close: the sends in flight end
	first := submit(b, ctx, "/l/first")
	st.waitGiven(t, 1) // sent at once, and held: the store is loaded from now on
	var rest []chan doResult
	for i := range b.pipelineMin() - 1 {
		rest = append(rest, submit(b, ctx, fmt.Sprint("/l/", i)))
	}
	sent := 0
	for sent < len(rest) {
		st.waitGiven(t, 1)
		txns := st.transactions()
		sent += txns[len(txns)-1].writes
	}
	assert.Equal(t, len(rest), sent, "every lingering write went while the first was still in flight")
	st.release()
	for _, w := range append(rest, first) {
		require.NoError(t, wait.For(t, w).err)
	}
}

// The group commit keeps a batch under its byte budget, below etcd's request limit, however
// many writes wait; a single larger write goes alone.
func TestB5_GroupCommitBoundsBatchesByBytes(t *testing.T) {
	b, st, _ := newStalledBatcher(t, time.Minute)
	value := strings.Repeat("v", 300<<10)
	big := strings.Repeat("B", 1200<<10) // over the budget, under etcd's 1.5 MiB request limit
	var results []chan doResult
	for i := range 8 {
		key := fmt.Sprint("/big/", i)
		out := make(chan doResult, 1)
		go func() {
			v := value
			if i == 3 {
				v = big
			}
			res, err := b.do(ctx, key, "", putTxn(key, v))
			out <- doResult{res, err}
		}()
		queued(t, b, i+1) // in this order
		results = append(results, out)
	}
	st.release()
	for i, ch := range results {
		require.NoError(t, wait.For(t, ch).err, "write %d", i)
	}

	var widths []int
	for _, tx := range st.transactions()[maxInFlight:] {
		widths = append(widths, tx.writes)
		if tx.writes > 1 {
			assert.LessOrEqual(t, tx.size, defaultBatchBytes, "a batch of %d writes", tx.writes)
		}
	}
	// 3 writes of 300 KiB fit in 1 MiB, a fourth does not; the big write goes alone. The
	// batches are sent side by side, so they reach the store in any order.
	slices.Sort(widths)
	assert.Equal(t, []int{1, 1, 3, 3}, widths)
}

// TestB5_AReusedWriteNeverCarriesAnothersOutcome: the group commit reuses a write's state once
// its writer has its outcome or withdrew it; writes withdrawn before they were sent, writes
// abandoned in a batch in flight and writes that reuse their state each get their own outcome,
// whether their compare held or not.
func TestB5_AReusedWriteNeverCarriesAnothersOutcome(t *testing.T) {
	b, st, free := newStalledBatcher(t, time.Minute)
	// The keys of odd writes exist, so their compare fails and they read the key instead.
	for i := 1; i < 60; i += 2 {
		_, err := st.next.txn(ctx, putTxn(fmt.Sprint("/reuse/", i), fmt.Sprint("existing-", i)))
		require.NoError(t, err)
	}
	create := func(i int) *pb.TxnRequest {
		k := fmt.Sprint("/reuse/", i)
		return &pb.TxnRequest{Compare: []*pb.Compare{cmpCreateRevision(k, 0)},
			Success: []*pb.RequestOp{opPut(k, "new")}, Failure: []*pb.RequestOp{opGet(k)}}
	}
	type write struct {
		i      int
		cancel context.CancelFunc
		out    chan doResult
	}
	start := func(i int) write {
		cctx, cancel := context.WithCancel(ctx)
		out := make(chan doResult, 1)
		go func() {
			res, err := b.do(cctx, fmt.Sprint("/reuse/", i), "", create(i))
			out <- doResult{res, err}
		}()
		return write{i, cancel, out}
	}
	check := func(w write) {
		t.Helper()
		r := wait.For(t, w.out)
		require.NoError(t, r.err, "write %d", w.i)
		require.Equal(t, w.i%2 == 0, r.res.Succeeded, "write %d", w.i)
		if !r.res.Succeeded {
			kvs, err := r.res.read()
			require.NoError(t, err)
			require.Len(t, kvs, 1)
			assert.Equal(t, fmt.Sprint("/reuse/", w.i), string(kvs[0].Key))
			assert.Equal(t, fmt.Sprint("existing-", w.i), string(kvs[0].Value))
		}
	}

	// Ten queued writes; five are withdrawn, and five more take their places.
	var writes []write
	for i := range 10 {
		writes = append(writes, start(i))
		queued(t, b, i+1)
	}
	for _, w := range writes[5:] {
		w.cancel()
		r := wait.For(t, w.out)
		require.True(t, errors.As(r.err, new(notSent)), "write %d: %v", w.i, r.err)
	}
	writes = writes[:5]
	for i := 10; i < 15; i++ {
		writes = append(writes, start(i))
	}
	queued(t, b, 10)
	// They go as one batch, which stalls; three of them are abandoned in it.
	free(0)
	st.waitGiven(t, 1)
	queued(t, b, 0)
	for _, w := range writes[:3] {
		w.cancel()
		r := wait.For(t, w.out)
		require.ErrorIs(t, r.err, context.Canceled, "write %d", w.i)
		assert.True(t, ambiguous(r.err), "write %d: a sent write's outcome is unknown", w.i)
	}
	// More writes queue behind it, reusing what the withdrawn ones left.
	for i := 15; i < 40; i++ {
		writes = append(writes, start(i))
	}
	queued(t, b, 25)
	st.release()
	for _, w := range writes[3:] {
		check(w)
	}
	// And once more with nothing stalled: state reused from every path above.
	var more []write
	for i := 40; i < 60; i++ {
		more = append(more, start(i))
	}
	for _, w := range more {
		check(w)
	}
}

// Close ends a write that went at once on its caller's context, as it ends the batches in
// flight, rather than wait for etcd's answer: its outcome is unknown, so its caller settles it.
func TestF8_CloseEndsAWriteSentAtOnce(t *testing.T) {
	st := newStall(newKVClient(startEtcd(t)))
	b := newBatcher(st, 16, defaultBatchBytes)
	t.Cleanup(st.release)
	w := submit(b, ctx, "/alone/0") // an idle store: sent at once, on ctx, which never ends
	st.waitGiven(t, 1)
	closed := make(chan struct{})
	go func() { b.close(); close(closed) }()
	wait.For(t, closed)
	r := wait.For(t, w)
	require.ErrorIs(t, r.err, context.Canceled)
	require.False(t, errors.As(r.err, new(notSent)), "a write that was sent has an unknown outcome: %v", r.err)
}

// take never puts two writes that share a key in one batch, the second key of a write that
// compares and changes two included, and a write it leaves behind holds its keys back from
// the writes queued after it, so that the writes of one key go in queue order.
func TestF7_AWriteOfTwoKeysSharesABatchWithNoWriteOfEither(t *testing.T) {
	write := func(key, also string) *txnReq { return &txnReq{key: key, also: also, size: 10} }
	consent, move, record := write("/consent", ""), write("/record", "/consent"), write("/record", "")
	other := write("/other", "")
	b := &batcher{max: 16, maxBytes: defaultBatchBytes, queue: []*txnReq{consent, move, record, other}}
	assert.Equal(t, []*txnReq{consent, other}, b.take(), "the move waits for the consent's write, the record's write for the move")
	assert.Equal(t, []*txnReq{move}, b.take())
	assert.Equal(t, []*txnReq{record}, b.take())
	assert.Empty(t, b.queue)
}

// A move checks and deletes the target's consent; a withdrawal of that consent checks and
// deletes it too. Sent alone, in either order, at most one of them succeeds. etcd checks every
// nested transaction's compares before any of them changes a key, so in one transaction both
// would: the target would drop the arrival while the record named it the owner.
func TestF7_AMoveAndTheWithdrawalOfItsConsentNeverBothSucceed(t *testing.T) {
	s, _ := newFaultyStore(t)
	from, to := registerNode(t, s, "node-a"), registerNode(t, s, "node-b")
	k := spot("contested")
	rec := mustReady(t, s, k, from.Owner())
	const attempt = 7
	require.NoError(t, s.ConsentArrival(ctx, k, to.Owner(), attempt))
	st := newStall(s.kv) // every slot held, so that the next two writes queue together
	setSender(s, st)
	t.Cleanup(st.release)
	for i := range maxInFlight {
		key := fmt.Sprint("/slot/", i)
		go func() { _, _ = s.batch.do(ctx, key, "", putTxn(key, "x")) }()
		st.waitGiven(t, 1)
	}
	type moveResult struct {
		rec Record
		err error
	}
	moved := make(chan moveResult, 1)
	go func() {
		r, err := s.MoveSpot(ctx, k, rec, to.Owner(), attempt)
		moved <- moveResult{r, err}
	}()
	queued(t, s.batch, 1)
	type withdrawResult struct {
		ok  bool
		err error
	}
	withdrawn := make(chan withdrawResult, 1)
	go func() {
		ok, err := s.WithdrawArrival(ctx, k, attempt)
		withdrawn <- withdrawResult{ok, err}
	}()
	queued(t, s.batch, 2)
	st.release() // the two queued writes go in the next transactions
	m, w := wait.For(t, moved), wait.For(t, withdrawn)
	require.NoError(t, w.err)
	assert.NotEqual(t, w.ok, m.err == nil, "exactly one of the move (%v) and the withdrawal (%v) succeeds", m.err, w.ok)
	owner := lookup(t, s, k).Record.Owner
	if w.ok {
		require.ErrorIs(t, m.err, ErrFenced)
		assert.Equal(t, from.Owner(), owner, "the consent was withdrawn: the record stays the source's")
	} else {
		assert.Equal(t, to.Owner(), owner, "the move committed")
	}
}
