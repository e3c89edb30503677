package transport_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// fillWindow starts n calls from a to b of payload bytes each, without a deadline, enough to
// fill the stream's flow-control window when b does not read them, and returns a channel of
// their outcomes: the call's error, or the error its reply carries.
func fillWindow(a *transport.Transport, n, payload int) <-chan error {
	ends := make(chan error, n)
	for range n {
		go func() {
			r, err := a.Call(context.Background(), "b", &wire.Request{Payload: make([]byte, payload)})
			if err == nil {
				err = wire.DecodeError(r.Error)
			}
			ends <- err
		}()
	}
	return ends
}

// A peer that stops reading a stream (its handler never returns, on the goroutine that reads
// the stream) while its connection and keepalive live: once the peer has said nothing for the
// caller's StallTimeout while calls were open, not even answered the caller's probe, the
// caller closes the stream, and the calls on it fail rather than wait for good.
func TestAStreamWhosePeerStopsReadingIsClosed(t *testing.T) {
	a := connectToStoppedReader(t, 400*time.Millisecond)
	const calls = 24 // 6 MiB: past the window of 1 MiB and gRPC's own buffers
	ends := fillWindow(a, calls, 256<<10)
	said := 0
	for range calls {
		select {
		case err := <-ends:
			require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
			if strings.Contains(err.Error(), "node b has said nothing for") {
				said++
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a call to a peer that stopped reading waits for good")
		}
	}
	assert.Positive(t, said, "the calls sent say why the connection was dropped")
	// A new stream, read again (under a heavy load a call may still take longer than the test's
	// short stall, and be tried again).
	require.Eventually(t, func() bool {
		_, err := a.Call(ctx, "b", &wire.Request{})
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "a call on a new stream is answered")
}

// A peer that waits for room to take a stream's requests in (its budget is full of other
// streams' calls) reads none of them meanwhile, nor the caller's probe, but says that it reads:
// however long the wait lasts past the caller's StallTimeout, the caller keeps the stream, and
// its calls are answered once there is room.
func TestAStreamWhosePeerWaitsForRoomIsKept(t *testing.T) {
	const maxMessage, stall = 256 << 10, time.Second
	meter := budgetMeter(t, maxMessage)
	b := start(t, "b", handler{}, func(c *transport.Config) {
		c.Meter, c.MaxMessageSize, c.StallTimeout = meter, maxMessage, stall
	})
	a := start(t, "a", handler{}, func(c *transport.Config) { c.MaxMessageSize, c.StallTimeout = maxMessage, stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	budget := int64(meter.Settings().Budget)
	require.True(t, meter.Charge(budget)) // other streams' calls fill the node's budget
	r, err := a.Call(ctx, "b", &wire.Request{})
	require.NoError(t, err)
	require.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrInboundBudget, "the first finds no room, and the stream waits for some")

	const calls = 24
	ends := fillWindow(a, calls, 64<<10) // 1.5 MiB: past the window
	time.Sleep(4 * stall)
	select {
	case err := <-ends:
		require.Failf(t, "a call ended while its peer waited for room", "%v", err)
	default:
	}
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("b"), "the stream is kept")
	meter.Release(budget)
	for range calls {
		select {
		case err := <-ends:
			if err != nil {
				require.ErrorIs(t, err, sdk.ErrInboundBudget, "answered: taken in, or refused for room in the stream's share")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a call was not answered once there was room")
		}
	}
}

// A handler that waits on the stream's reader for room of its own (a slot of a bounded pool)
// through capacity.AsReader holds the stream's requests up as the transport's own waits do, and its
// peer is told so: the caller keeps the stream past its StallTimeout, and every call is
// answered once the wait ends.
func TestAHandlerThatWaitsForRoomAsTheReaderKeepsTheStream(t *testing.T) {
	const stall = time.Second
	release := make(chan struct{})
	var waited atomic.Bool
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		if waited.CompareAndSwap(false, true) {
			err := awaitAsReader(ctx, release)
			if err != nil {
				reply(&wire.Reply{Error: wire.EncodeError(err)})
				return
			}
		}
		reply(&wire.Reply{})
	}}, func(c *transport.Config) { c.StallTimeout = stall })
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	const calls = 24
	ends := fillWindow(a, calls, 256<<10)
	time.Sleep(4 * stall)
	select {
	case err := <-ends:
		require.Failf(t, "a call ended while its peer's handler waited for room", "%v", err)
	default:
	}
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("b"), "the stream is kept")
	closeRelease()
	for range calls {
		select {
		case err := <-ends:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a call was not answered once the wait ended")
		}
	}
}

// capacity.AsReader with a context that is no peer's request's is the wait itself.
func TestAsReaderOutsideAPeersRequestIsTheWait(t *testing.T) {
	waited := false
	err := capacity.AsReader(context.Background(), func(context.Context) error {
		waited = true
		return context.DeadlineExceeded
	})
	assert.True(t, waited)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// A call that runs long on a peer that reads, with nothing else on the stream, is not taken
// for a stopped peer: the peer answers the caller's probes, and the call gets its reply.
func TestACallThatRunsLongOnAPeerThatReadsIsAnswered(t *testing.T) {
	const stall = 400 * time.Millisecond
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		go func() {
			select {
			case <-time.After(5 * stall):
				reply(&wire.Reply{Payload: []byte("late")})
			case <-ctx.Done():
			}
		}()
	}}, func(c *transport.Config) { c.StallTimeout = stall })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	before := b.Stats()
	r, err := a.Call(context.Background(), "b", &wire.Request{})
	require.NoError(t, err, "the stream was kept")
	assert.Equal(t, "late", string(r.Payload))
	assert.Greater(t, b.Stats().Envelopes-before.Envelopes, int64(1), "b answered probes besides the call")
}

// A peer that floods a stream with probes gets few answers: one an eighth of the interval at
// which the stream says that it reads while it waits, so that probes cannot fill the node's
// memory with answers.
func TestAFloodOfProbesGetsFewAnswers(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	s := rawStream(t, b.Addr(), "a")
	batch := &wire.Batch{}
	for range 1000 {
		batch.Envelopes = append(batch.Envelopes, &wire.Envelope{Probe: &wire.Probe{}})
	}
	batch.Envelopes = append(batch.Envelopes, &wire.Envelope{Request: &wire.Request{CallId: 1}})
	require.NoError(t, s.SendMsg(batch))
	answers := 0
	for done := false; !done; {
		var in wire.Batch
		require.NoError(t, s.RecvMsg(&in))
		for _, env := range in.Envelopes {
			if env.GetReading() != nil {
				answers++
			}
			if env.GetReply().GetCallId() == 1 {
				done = true
			}
		}
	}
	assert.LessOrEqual(t, answers, 1, "a thousand probes read at once")
}

// A peer that stops reading while a single small call is open on the stream, far from filling
// its window, is found out too: the caller's own probes, which go out, are no sign that the
// peer reads.
func TestAPeerThatStopsReadingWithOneSmallCallOpenIsFoundOut(t *testing.T) {
	ends := fillWindow(connectToStoppedReader(t, 400*time.Millisecond), 1, 16)
	select {
	case err := <-ends:
		require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
		assert.ErrorContains(t, err, "node b has said nothing for")
	case <-time.After(20 * time.Second):
		t.Fatal("a call to a peer that stopped reading waits for good")
	}
}

// A handler's wait on the reader (capacity.AsReader) for room that only a call of its own
// stream can free, a call whose caller does not give up. Once none of the stream's other calls
// has ended for the StallTimeout, the wait gives up and its request is refused as the scheduler
// being full, and so are the requests behind it that wait so too, at once; the stream is read
// on, and the call's cancellation, once its caller gives up, ends it.
func TestAReaderWaitForRoomThatNoCallOfItsStreamFreesGivesUp(t *testing.T) {
	const stall = 400 * time.Millisecond
	slot := make(chan struct{}, 1)
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait) // after the transport's close, which ends their contexts
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		select {
		case slot <- struct{}{}:
		default:
			if err := capacity.AsReader(ctx, func(c context.Context) error {
				select {
				case slot <- struct{}{}:
					return nil
				case <-c.Done():
					return c.Err()
				}
			}); err != nil {
				reply(&wire.Reply{Error: wire.EncodeError(err)})
				return
			}
		}
		handlers.Go(func() { // holds the slot until its caller gives up
			<-ctx.Done()
			<-slot
			reply(&wire.Reply{})
		})
	}}, func(c *transport.Config) { c.StallTimeout = stall })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	first, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	firstEnded := make(chan error, 1)
	go func() { _, err := a.Call(first, "b", &wire.Request{}); firstEnded <- err }()
	require.Eventually(t, func() bool { return len(slot) == 1 }, 5*time.Second, time.Millisecond)
	const waiting = 16
	later := make(chan error, waiting)
	began := time.Now()
	for range waiting {
		go func() {
			r, err := a.Call(context.Background(), "b", &wire.Request{})
			if err == nil {
				err = wire.DecodeError(r.Error)
			}
			later <- err
		}()
		time.Sleep(5 * time.Millisecond) // each in a batch of its own, most likely
	}
	// The first of them waits on the reader, the others behind it.
	for range waiting {
		require.ErrorIs(t, <-later, sdk.ErrCapacityExceeded, "refused, the stream read on")
	}
	// The first wait gives up after the stall; those behind it give up at once, not each after a
	// stall of its own (16 of them: 6.4 s), nor after a reading interval each (1.6 s more).
	assert.Less(t, time.Since(began), 5*stall, "%d waits gave up", waiting)

	giveUp()
	require.ErrorIs(t, <-firstEnded, context.Canceled)
	require.Eventually(t, func() bool { return len(slot) == 0 }, 25*stall, time.Millisecond,
		"the cancellation reached the call that held the room")
}

// A handler's wait on the reader that gave up, on a stream where a long call runs, makes the
// waits of the requests read behind it give up at once, until the reader has read all that the
// peer sent: the requests the peer sends afterwards, each after the last one's answer and a
// short pause, wait as any, and their room, which comes well within StallTimeout, is taken.
func TestAReaderWaitThatGaveUpDoesNotRefuseTheRequestsSentAfterIt(t *testing.T) {
	const stall = 400 * time.Millisecond // reading interval: 100 ms
	var gateMu sync.Mutex
	gate := make(chan struct{})
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.Method == "long" { // a long poll: ends when its caller gives up
			handlers.Go(func() { <-ctx.Done(); reply(&wire.Reply{}) })
			return
		}
		gateMu.Lock()
		g := gate
		gateMu.Unlock()
		err := awaitAsReader(ctx, g)
		if err != nil {
			reply(&wire.Reply{Error: wire.EncodeError(err)})
			return
		}
		reply(&wire.Reply{})
	}}, func(c *transport.Config) { c.StallTimeout = stall })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	call := func() error {
		r, err := a.Call(context.Background(), "b", &wire.Request{Method: "wait"})
		if err == nil {
			err = wire.DecodeError(r.Error)
		}
		return err
	}

	lctx, endLong := context.WithCancel(context.Background())
	defer endLong()
	go func() { _, _ = a.Call(lctx, "b", &wire.Request{Method: "long"}) }()
	time.Sleep(50 * time.Millisecond)
	require.ErrorIs(t, call(), sdk.ErrCapacityExceeded, "a wait with no end in sight gives up")

	for i := range 6 { // a request now and then: none is queued behind the wait that gave up
		time.Sleep(stall / 8)
		gateMu.Lock()
		gate = make(chan struct{})
		g := gate
		gateMu.Unlock()
		time.AfterFunc(stall/2, func() { close(g) }) // room comes well within StallTimeout
		began := time.Now()
		err := call()
		require.NoError(t, err, "request %d: a wait of %v (StallTimeout %v) gave up after %v", i, stall/2, stall, time.Since(began))
	}
}

// awaitAsReader waits, as a handler's wait on the stream's reader, until ready is closed or
// ctx ends.
func awaitAsReader(ctx context.Context, ready <-chan struct{}) error {
	return capacity.AsReader(ctx, func(c context.Context) error {
		select {
		case <-ready:
			return nil
		case <-c.Done():
			return c.Err()
		}
	})
}

// connectToStoppedReader starts "b", whose stream's reader stops in the handler of the first
// request until the test ends (a later stream is read), and "a", connected to it; both have
// StallTimeout stall.
func connectToStoppedReader(t *testing.T, stall time.Duration) *transport.Transport {
	t.Helper()
	release := make(chan struct{})
	var stopped atomic.Bool
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		if stopped.CompareAndSwap(false, true) {
			<-release // the stream's reader stops here
		}
		reply(&wire.Reply{})
	}}, func(c *transport.Config) { c.StallTimeout = stall })
	t.Cleanup(func() { close(release) }) // before b closes
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	return a
}
