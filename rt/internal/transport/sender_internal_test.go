package transport

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// TestASentMessageIsReusedOnlyIfNoOneHoldsIt: once the stream has sent a batch, the replies in
// it go back for reuse, since their handlers let go of them, and so do the requests queued once
// (CallOnce); a request queued by Call is left as it is, since its caller may still read it or
// send it again. Each is sent whole before it goes back.
func TestASentMessageIsReusedOnlyIfNoOneHoldsIt(t *testing.T) {
	var mu sync.Mutex
	var back []proto.Message
	defer func(req func(*wire.Request), reply func(*wire.Reply)) { recycleRequest, recycleReply = req, reply }(recycleRequest, recycleReply)
	recycleRequest = func(r *wire.Request) { mu.Lock(); back = append(back, r); mu.Unlock() }
	recycleReply = func(r *wire.Reply) { mu.Lock(); back = append(back, r); mu.Unlock() }

	for name, c := range map[string]struct {
		completion, once, reused bool
	}{
		"a reply":                  {completion: true, reused: true},
		"a request queued once":    {once: true, reused: true},
		"a request queued by Call": {},
	} {
		mu.Lock()
		back = nil
		mu.Unlock()
		sent := make(chan *wire.Batch)
		done := make(chan struct{})
		send := func(b *wire.Batch) error {
			sent <- proto.CloneOf(b) // what went out, read while the batch is still whole
			<-done
			return nil
		}
		s := newSender(send, 1<<20, nil, c.completion)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- s.run(ctx) }()

		var msg, whole proto.Message
		var q queued
		if c.completion {
			r := &wire.Reply{CallId: 1, Payload: []byte("out"), Owner: "n1"}
			msg, whole, q = r, proto.CloneOf(r), queuedReply(r)
		} else {
			r := &wire.Request{CallId: 2, Method: "M", Payload: []byte("in")}
			msg, whole, q = r, proto.CloneOf(r), queuedRequest(r)
			q.once = c.once
		}
		require.Positive(t, s.push(q))
		b := wait.For(t, sent)
		require.Len(t, b.Envelopes, 1)
		var out proto.Message = b.Envelopes[0].GetRequest()
		if c.completion {
			out = b.Envelopes[0].GetReply()
		}
		assert.True(t, proto.Equal(whole, out), "%s: it was sent whole: %v", name, out)
		mu.Lock()
		assert.Empty(t, back, "%s: nothing goes back while its batch is being sent", name)
		mu.Unlock()
		done <- struct{}{}
		// The next batch goes out after the first one's send returned and its messages went back.
		require.Positive(t, s.push(queuedCancel(&wire.Cancel{CallId: 3})))
		wait.For(t, sent)
		mu.Lock()
		if c.reused {
			if assert.Len(t, back, 1, "%s: it went back for reuse once", name) {
				assert.Same(t, msg, back[0], name)
			}
		} else {
			assert.Empty(t, back, "%s: it is its caller's", name)
		}
		mu.Unlock()
		cancel()
		done <- struct{}{}
		assert.ErrorIs(t, <-stopped, context.Canceled)
	}
}

// TestAFinishingSenderSendsWhatItHoldsThenEnds: once finished, a sender takes no new request,
// still sends what it holds and the cancels pushed meanwhile, then calls its end on the sending
// goroutine, after its last send; then it queues nothing.
func TestAFinishingSenderSendsWhatItHoldsThenEnds(t *testing.T) {
	sent := make(chan *wire.Batch, 8)
	release := make(chan struct{})
	var sending sync.Mutex // held while a send is under way: end must not overlap one
	send := func(b *wire.Batch) error {
		sending.Lock()
		defer sending.Unlock()
		sent <- proto.CloneOf(b)
		<-release
		return nil
	}
	s := newSender(send, 1<<20, nil, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.run(ctx) }()

	ok, err := s.pushWait(ctx, queuedRequest(&wire.Request{CallId: 1}))
	require.True(t, ok)
	require.NoError(t, err)
	wait.For(t, sent) // the first request is being sent
	ok, _ = s.pushWait(ctx, queuedRequest(&wire.Request{CallId: 2}))
	require.True(t, ok)
	ended := make(chan struct{})
	var open atomic.Bool // a call waits for its answer
	open.Store(true)
	s.finish(func() {
		assert.True(t, sending.TryLock(), "end runs after the last send, not during it")
		sending.Unlock()
		assert.False(t, open.Load(), "end runs once no call is open")
		close(ended)
	}, func() bool { return !open.Load() })
	ok, err = s.pushWait(ctx, queuedRequest(&wire.Request{CallId: 3}))
	assert.False(t, ok, "a request after finish is refused")
	assert.NoError(t, err)
	assert.Positive(t, s.push(queuedCancel(&wire.Cancel{CallId: 1})), "a cancel is still queued")

	close(release)
	b := wait.For(t, sent)
	var ids []uint64
	for _, e := range b.Envelopes {
		if r := e.GetRequest(); r != nil {
			ids = append(ids, r.CallId)
		} else {
			ids = append(ids, e.GetCancel().GetCallId())
		}
	}
	assert.Equal(t, []uint64{2, 1}, ids, "the request held and the cancel went out")
	select {
	case <-ended:
		t.Fatal("it ended while a call was open")
	case <-time.After(20 * time.Millisecond):
	}
	open.Store(false)
	s.signal()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("end never ran")
	}
	assert.Zero(t, s.push(queuedCancel(&wire.Cancel{CallId: 2})), "nothing is queued once ended")
	assert.Empty(t, s.close(), "nothing was left unsent")
	cancel()
	assert.ErrorIs(t, <-stopped, context.Canceled)
}

// TestAClosedSenderNamesTheRequestsItNeverSent: the requests still queued when a sender closes
// were never sent, and close names them; the one being sent is not among them.
func TestAClosedSenderNamesTheRequestsItNeverSent(t *testing.T) {
	sent := make(chan struct{}, 1)
	release := make(chan struct{})
	s := newSender(func(*wire.Batch) error {
		sent <- struct{}{}
		<-release
		return nil
	}, 1<<20, nil, false)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.run(ctx) }()
	s.push(queuedRequest(&wire.Request{CallId: 7}))
	wait.For(t, sent)
	s.push(queuedRequest(&wire.Request{CallId: 8}))
	s.push(queuedCancel(&wire.Cancel{CallId: 7}))
	s.push(queuedRequest(&wire.Request{CallId: 9}))
	assert.Equal(t, []uint64{8, 9}, s.close())
	assert.Nil(t, s.close(), "a second close names nothing")
	cancel()
	close(release)
	<-stopped
}

// TestASenderCountsWhatLeavesItsQueue: the node's meter sees a completion queue's replies while
// they wait, and none once they were taken in a batch or dropped with the stream.
func TestASenderCountsWhatLeavesItsQueue(t *testing.T) {
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{}, 1<<20)
	require.NoError(t, err)
	meter := capacity.New(settings)
	queued := func() (bytes, count uint64) {
		st := meter.Status(0, exec.DefaultConfig()).CoreHwm
		assert.Equal(t, st.CompletionCurrentAccountedBytes, st.CoreQueueAccountedBytes, "only replies were queued")
		return st.CompletionCurrentAccountedBytes, st.CompletionPendingMessageCount
	}
	sent := make(chan int)
	release := make(chan struct{})
	s := newSender(func(b *wire.Batch) error {
		sent <- len(b.Envelopes)
		<-release
		return nil
	}, 1<<20, meter, true)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.run(ctx) }()

	first := s.push(queuedReply(&wire.Reply{CallId: 1, Payload: []byte("one")}))
	require.Equal(t, 1, wait.For(t, sent))
	bytes, count := queued()
	assert.Zero(t, bytes, "the reply being sent left the queue")
	assert.Zero(t, count)
	total := 0
	for id := range uint64(3) {
		total += s.push(queuedReply(&wire.Reply{CallId: 2 + id, Payload: []byte("three more")}))
	}
	bytes, count = queued()
	assert.Equal(t, uint64(total), bytes, "three replies wait")
	assert.Equal(t, uint64(3), count)
	release <- struct{}{}
	require.Equal(t, 3, wait.For(t, sent), "the three went in one batch")
	bytes, count = queued()
	assert.Zero(t, bytes)
	assert.Zero(t, count)
	assert.Positive(t, first)

	s.push(queuedReply(&wire.Reply{CallId: 9, Payload: []byte("dropped")}))
	s.push(queuedReply(&wire.Reply{CallId: 10, Payload: []byte("dropped")}))
	s.close()
	bytes, count = queued()
	assert.Zero(t, bytes, "a closed stream's replies are no longer held")
	assert.Zero(t, count)
	cancel()
	close(release)
	<-stopped
}

// runSender runs s until the test ends, and returns the sizes of the batches it sends.
func runSender(t *testing.T, s *sender) <-chan int {
	t.Helper()
	sent := make(chan int, 16)
	s.send = func(b *wire.Batch) error { sent <- len(b.Envelopes); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped; s.close() })
	return sent
}

// heldSender runs a sender whose holds last up to hold, with woken callers counted, and
// returns it and the sizes of the batches it sends.
func heldSender(t *testing.T, maxMessage int, hold time.Duration, woken int) (*sender, <-chan int) {
	t.Helper()
	s := newSender(nil, maxMessage, nil, false)
	s.hold = hold
	sent := runSender(t, s)
	s.wokeCallers(woken)
	return s, sent
}

// nothingSent fails if s sends a batch within a while: what a held sender does.
func nothingSent(t *testing.T, sent <-chan int, why string) {
	t.Helper()
	select {
	case n := <-sent:
		t.Fatalf("a batch of %d left %s", n, why)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestASenderHoldsItsBatchForTheCallersRepliesWoke: callers that a batch of replies woke
// usually call again, so the sender holds the requests queued meanwhile until every one of
// them has taken its reply, and they leave in one batch. A caller that takes a reply no one
// counted does not take the count below 0.
func TestASenderHoldsItsBatchForTheCallersRepliesWoke(t *testing.T) {
	s, sent := heldSender(t, 1<<20, time.Minute, 3)
	s.push(queuedRequest(&wire.Request{CallId: 1}))
	nothingSent(t, sent, "while three callers had their replies to take")
	s.tookReply()
	s.push(queuedRequest(&wire.Request{CallId: 2}))
	s.tookReply()
	s.push(queuedRequest(&wire.Request{CallId: 3}))
	nothingSent(t, sent, "while one caller had its reply to take")
	s.tookReply()
	assert.Equal(t, 3, wait.For(t, sent), "the three requests leave together once the last caller took its reply")
	s.tookReply()
	assert.Zero(t, s.woken.Load())
	s.push(queuedRequest(&wire.Request{CallId: 4}))
	assert.Equal(t, 1, wait.For(t, sent), "no caller to wait for: a request leaves at once")
}

// TestAHoldEnds: a sender holds its batch for woken callers no longer than its bound, after
// which it forgets them; nor once a batch's worth is queued or its queue is full, nor once
// its queue finishes.
func TestAHoldEnds(t *testing.T) {
	t.Run("at its bound", func(t *testing.T) {
		s, sent := heldSender(t, 1<<20, 5*time.Millisecond, 2)
		pushed := time.Now()
		s.push(queuedRequest(&wire.Request{CallId: 1}))
		assert.Equal(t, 1, wait.For(t, sent))
		assert.GreaterOrEqual(t, time.Since(pushed), 5*time.Millisecond, "the request was held to the bound")
		assert.Zero(t, s.woken.Load(), "the callers that never took their replies hold no later batch")
	})
	t.Run("once a batch's worth is queued", func(t *testing.T) {
		s, sent := heldSender(t, 64, time.Minute, 2)
		s.push(queuedRequest(&wire.Request{CallId: 1}))
		nothingSent(t, sent, "with room left in the batch")
		s.push(queuedRequest(&wire.Request{CallId: 2, Payload: make([]byte, 2*s.maxBytes)}))
		assert.Equal(t, 1, wait.For(t, sent), "the first request fills its batch")
		assert.Equal(t, 1, wait.For(t, sent))
	})
	t.Run("once its queue is full", func(t *testing.T) {
		s, sent := heldSender(t, 1<<20, time.Minute, 2)
		for id := range uint64(sendQueueMaxCount) {
			s.push(queuedRequest(&wire.Request{CallId: id + 1}))
		}
		n := 0
		for n < sendQueueMaxCount {
			n += wait.For(t, sent)
		}
		assert.Equal(t, sendQueueMaxCount, n, "a full queue leaves without the callers")
	})
	t.Run("once its queue finishes", func(t *testing.T) {
		s, sent := heldSender(t, 1<<20, time.Minute, 2)
		s.push(queuedRequest(&wire.Request{CallId: 1}))
		nothingSent(t, sent, "before the queue finished")
		s.finish(func() {}, func() bool { return false })
		assert.Equal(t, 1, wait.For(t, sent))
	})
}

// TestAStreamThatEndsDuringAHoldSendsNothing: requests held for woken callers when the
// stream's context ends are not sent on the ended stream: close names them as never sent, so
// their calls may go elsewhere.
func TestAStreamThatEndsDuringAHoldSendsNothing(t *testing.T) {
	s := newSender(nil, 1<<20, nil, false)
	s.hold = time.Minute
	var sends atomic.Int32
	s.send = func(*wire.Batch) error { sends.Add(1); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.run(ctx) }()
	s.wokeCallers(1)
	s.push(queuedRequest(&wire.Request{CallId: 5}))
	time.Sleep(20 * time.Millisecond) // the sender is woken and holds
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
	assert.Zero(t, sends.Load(), "nothing is sent on an ended stream")
	assert.Equal(t, []uint64{5}, s.close())
}

// TestE1_ABatchHoldsNoMoreEnvelopesThanAStreamReads: replies and cancels queue however full the
// queue is, and many small ones fit in the byte budget; a batch takes at most maxSentEnvelopes
// of them, the bound this node announces to its peers (maxBatchHeader), so that a peer never
// refuses what this node sends.
func TestE1_ABatchHoldsNoMoreEnvelopesThanAStreamReads(t *testing.T) {
	s := newSender(nil, DefaultMaxMessageSize, nil, true)
	const queued = 3*maxSentEnvelopes + 1
	for i := range queued {
		require.Positive(t, s.push(queuedCancel(&wire.Cancel{CallId: uint64(i + 1)})))
	}
	var sizes []int
	for len(s.queue) > 0 {
		var b wire.Batch
		s.take(&b)
		sizes = append(sizes, len(b.Envelopes))
		s.releaseEnvelopes(len(b.Envelopes))
	}
	assert.Equal(t, []int{maxSentEnvelopes, maxSentEnvelopes, maxSentEnvelopes, 1}, sizes)
	assert.Equal(t, strconv.Itoa(maxSentEnvelopes), maxBatch, "the bound announced is the sender's")
}
