package transport_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// handler answers with the request's payload, or runs fn when set.
type handler struct {
	fn func(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply))
}

func (h handler) Handle(ctx context.Context, from sdk.NodeID, req *wire.Request, reply transport.Replier) {
	if h.fn != nil {
		h.fn(ctx, from, req, reply.Reply)
		return
	}
	reply.Reply(&wire.Reply{Payload: req.Payload, Owner: string(from)})
}

func start(t testing.TB, node string, h transport.Handler, mutate func(*transport.Config)) *transport.Transport {
	t.Helper()
	cfg := transport.Config{Node: sdk.NodeID(node), Logger: slog.New(slog.DiscardHandler), DialTimeout: 2 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	tr, err := transport.New(cfg, h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func waitReady(t *testing.T, tr *transport.Transport, peer string) {
	t.Helper()
	require.Eventually(t, func() bool { return tr.PeerState(sdk.NodeID(peer)) == sdk.PeerStateReady }, 10*time.Second, 5*time.Millisecond)
}

func TestCallAndReply(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	a := start(t, "a", handler{}, nil)
	assert.Equal(t, sdk.PeerStateNotConnected, a.PeerState("b"))
	a.Connect("b", b.Addr())
	r, err := a.Call(ctx, "b", &wire.Request{Op: wire.Op_OP_CALL, Payload: []byte("hello")})
	require.NoError(t, err)
	assert.Equal(t, "hello", string(r.Payload))
	assert.Equal(t, "a", r.Owner, "the receiver learns the caller's node ID")
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("b"))
}

// TestCallOnceLetsGoOfItsRequest: a request given to CallOnce is answered as Call's is, from
// a request of the pool or not; one refused for want of a link was never queued and is left as
// it was, for the caller to send once the link exists.
func TestCallOnceLetsGoOfItsRequest(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	a := start(t, "a", handler{}, nil)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a request emptied too soon is never answered
	defer cancel()
	req := &wire.Request{Op: wire.Op_OP_CALL, Payload: []byte("hello")}
	_, err := a.CallOnce(cctx, "b", req)
	require.ErrorIs(t, err, transport.ErrNoLink)
	assert.Equal(t, "hello", string(req.Payload), "a request never queued is the caller's")
	a.Connect("b", b.Addr())
	for i := range 200 {
		req := wire.NewRequest()
		req.Op, req.Payload = wire.Op_OP_CALL, []byte(fmt.Sprint(i))
		r, err := a.CallOnce(cctx, "b", req)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(i), string(r.Payload))
		wire.RecycleInboundReply(r)
	}
}

func TestEnvelopesAreBatchedUnderLoad(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	const calls = 2000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range calls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := a.Call(ctx, "b", &wire.Request{Payload: []byte(fmt.Sprint(i))})
			if assert.NoError(t, err) {
				assert.Equal(t, fmt.Sprint(i), string(r.Payload))
			}
		})
	}
	wg.Wait()
	st := a.Stats()
	assert.Equal(t, int64(calls), st.Envelopes)
	assert.Less(t, st.Batches, int64(calls), "%d requests went in %d batches", st.Envelopes, st.Batches)
	t.Logf("caller: %d envelopes in %d batches; receiver: %+v", st.Envelopes, st.Batches, b.Stats())
}

// TestCallersTellTheSenderOnceTheyHaveTheirReplies: every caller that a batch of replies woke
// tells its link's sender once it has its reply, so a sender that would hold its batch for a
// minute for such callers never holds a closed loop of callers: each call is answered long
// before. The closed loop's requests share batches.
func TestCallersTellTheSenderOnceTheyHaveTheirReplies(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	a := start(t, "a", handler{}, nil)
	transport.SetHold(a, time.Minute)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	const callers, calls = 16, 100
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				payload := fmt.Sprint(c, "/", i)
				r, err := a.Call(cctx, "b", &wire.Request{Payload: []byte(payload)})
				cancel()
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, payload, string(r.Payload))
			}
		})
	}
	wg.Wait()
	st := a.Stats()
	assert.Equal(t, int64(callers*calls), st.Envelopes)
	assert.LessOrEqual(t, 2*st.Batches, st.Envelopes, "%d requests went in %d batches", st.Envelopes, st.Batches)
}

func TestMaxMessageSizeOnSendAndReceive(t *testing.T) {
	b := start(t, "b", handler{}, func(c *transport.Config) { c.MaxMessageSize = 1024 })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.MaxMessageSize = 4096 })
	a.Connect("b", b.Addr())
	_, err := a.Call(ctx, "b", &wire.Request{Payload: make([]byte, 5000)})
	require.ErrorIs(t, err, sdk.ErrMessageTooLarge, "refused on send: over the caller's limit")
	assert.Contains(t, err.Error(), "5000 bytes to b, over the limit of 4096")

	_, err = a.Call(ctx, "b", &wire.Request{Payload: make([]byte, 2000)})
	require.ErrorIs(t, err, sdk.ErrMessageTooLarge, "refused on send: over the receiver's limit")
	assert.Contains(t, err.Error(), "2000 bytes to b, over the limit of 1024 (a accepts 4096, b accepts 1024)")

	r, err := a.Call(ctx, "b", &wire.Request{Payload: make([]byte, 1000)})
	require.NoError(t, err)
	assert.Nil(t, r.Error, "the link survives refused messages")
	assert.Len(t, r.Payload, 1000)

	// A caller that ignores b's limit is refused on receive.
	s := rawStream(t, b.Addr(), "x")
	sendRequests(t, s, &wire.Request{CallId: 1, Payload: make([]byte, 2000)})
	rerr := wire.DecodeError(recvReply(t, s, 1).Error)
	require.ErrorIs(t, rerr, sdk.ErrMessageTooLarge, "refused on receive")
	assert.Contains(t, rerr.Error(), "over b's limit of 1024")
}

// A peer chooses its call IDs: one still in flight is refused without reaching the handler,
// and the call that holds it keeps it, whatever the ID's size or the slot it shares.
func TestACallIDStillInFlightIsRefusedAndItsCallKeepsIt(t *testing.T) {
	const id = math.MaxUint64 - 63
	held := newHeldAnswers()
	defer held.end()
	var runs atomic.Int32
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		runs.Add(1)
		if req.CallId == id && string(req.Payload) == "first" {
			held.answer(reply, &wire.Reply{Payload: []byte("first")})
			return
		}
		reply(&wire.Reply{Payload: req.Payload})
	}}, nil)
	s := rawStream(t, b.Addr(), "x")
	sendRequests(t, s, &wire.Request{CallId: id, Payload: []byte("first")})
	<-held.running

	sendRequests(t, s, &wire.Request{CallId: id, Payload: []byte("second")})
	r := recvReply(t, s, id)
	require.True(t, r.Refused)
	err := wire.DecodeError(r.Error)
	assert.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "call ID 18446744073709551552 from x is still in flight")
	assert.EqualValues(t, 1, runs.Load(), "the refused call never reached the handler")

	for _, other := range []uint64{0, 64, 1 << 40} { // IDs that share the held call's slot
		sendRequests(t, s, &wire.Request{CallId: other, Payload: []byte("other")})
		assert.Equal(t, "other", string(recvReply(t, s, other).Payload), "call %d", other)
	}

	held.release()
	assert.Equal(t, "first", string(recvReply(t, s, id).Payload), "the first call kept its ID")
	sendRequests(t, s, &wire.Request{CallId: id, Payload: []byte("again")})
	assert.Equal(t, "again", string(recvReply(t, s, id).Payload), "an ID is free once its call ended")
}

func TestOversizedReplyIsRefused(t *testing.T) {
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		reply(&wire.Reply{Payload: make([]byte, 2048)})
	}}, func(c *transport.Config) { c.MaxMessageSize = 1024 })
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	r, err := a.Call(ctx, "b", &wire.Request{})
	require.NoError(t, err)
	require.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrMessageTooLarge)
}

func TestDeadlineAndCancellationReachTheReceiver(t *testing.T) {
	got := make(chan time.Duration, 1)
	cancelled := make(chan error, 1)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		go func() {
			if dl, ok := ctx.Deadline(); ok {
				got <- time.Until(dl)
			} else {
				got <- 0
			}
			<-ctx.Done()
			cancelled <- ctx.Err()
			reply(&wire.Reply{})
		}()
	}}, nil)
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	go func() {
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	_, err := a.Call(c, "b", &wire.Request{})
	require.ErrorIs(t, err, context.Canceled)
	left := <-got
	assert.Greater(t, left, 2*time.Second, "the caller's deadline travels")
	assert.LessOrEqual(t, left, 3*time.Second)
	select {
	case err := <-cancelled:
		assert.ErrorIs(t, err, context.Canceled, "the caller's cancellation reaches the handler")
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
}

func TestLostConnectionEndsPendingCalls(t *testing.T) {
	block := make(chan struct{})
	var handlers sync.WaitGroup
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		handlers.Go(func() {
			<-block // a handler that never finishes before the node goes away
			reply(&wire.Reply{})
		})
	}}, nil)
	defer handlers.Wait()
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	errs := make(chan error, 1)
	go func() {
		_, err := a.Call(ctx, "b", &wire.Request{})
		errs <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, b.Close())
	close(block)
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("a call to a closed peer succeeded")
		}
		assert.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	case <-time.After(10 * time.Second):
		t.Fatal("the pending call was never ended")
	}
	require.Eventually(t, func() bool { return a.PeerState("b") != sdk.PeerStateReady }, 10*time.Second, 10*time.Millisecond)
	_, err := a.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
}

func TestReplyWithErrorCrosses(t *testing.T) {
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		reply(&wire.Reply{Error: wire.EncodeError(fmt.Errorf("no room: %w", sdk.ErrNotFound))})
	}}, nil)
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	r, err := a.Call(ctx, "b", &wire.Request{})
	require.NoError(t, err)
	assert.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrNotFound)
}

func TestUnknownPeerAndClose(t *testing.T) {
	a := start(t, "a", handler{}, nil)
	_, err := a.Call(ctx, "nobody", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
}

func TestMutualTLS(t *testing.T) {
	good := rttest.NewPKI(t, "mesh-ca")
	bs, bc := good.MutualTLS(t, "b")
	b := start(t, "b", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = bs, bc })
	as, ac := good.MutualTLS(t, "a")
	a := start(t, "a", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = as, ac })
	a.Connect("b", b.Addr())
	r, err := a.Call(ctx, "b", &wire.Request{Payload: []byte("over tls")})
	require.NoError(t, err)
	assert.Equal(t, "over tls", string(r.Payload))

	// A node whose certificate comes from another CA cannot call: b refuses it.
	rogue := rttest.NewPKI(t, "rogue-ca")
	xs, xc := rogue.MutualTLS(t, "x")
	xc.RootCAs = good.Pool // it even trusts b's certificate
	x := start(t, "x", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = xs, xc })
	x.Connect("b", b.Addr())
	_, err = x.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.NotEqual(t, sdk.PeerStateReady, x.PeerState("b"))

	// A node that does not trust the mesh CA does not connect either.
	ys, yc := good.MutualTLS(t, "y")
	yc.RootCAs = rogue.Pool
	y := start(t, "y", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = ys, yc })
	y.Connect("b", b.Addr())
	_, err = y.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)

	// A plaintext node cannot talk to a TLS one.
	p := start(t, "p", handler{}, nil)
	p.Connect("b", b.Addr())
	_, err = p.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
}

func TestHalfClosedStreamEndsItsGoroutines(t *testing.T) {
	running := make(chan struct{})
	ended := make(chan error, 1)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		close(running)
		go func() {
			<-ctx.Done()
			ended <- ctx.Err()
			reply(&wire.Reply{})
		}()
	}}, nil)
	s := rawStream(t, b.Addr(), "x")
	sendRequests(t, s, &wire.Request{CallId: 1})
	select {
	case <-running:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	require.NoError(t, s.CloseSend())
	select {
	case err := <-ended:
		assert.ErrorIs(t, err, context.Canceled, "the half-close cancels the stream's in-flight calls")
	case <-time.After(5 * time.Second):
		t.Fatal("the in-flight call was not cancelled")
	}
	// gRPC ends the stream with a status (io.EOF here) only once the server's stream handler
	// has returned; otherwise the raw stream's own timeout ends it with DeadlineExceeded.
	var err error
	for range 10 {
		var b wire.Batch
		if err = s.RecvMsg(&b); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, io.EOF, "the server's stream handler returned")
}

func TestCallRegisteredAsItsSessionEndsFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		// breakLink ends a's session with b and returns once the session's end is over.
		breakLink func(t *testing.T, a *transport.Transport, p *proxy)
	}{
		{"network cut", func(t *testing.T, a *transport.Transport, p *proxy) {
			p.cut()
			assert.Eventually(t, func() bool { return a.PeerState("b") != sdk.PeerStateReady }, 5*time.Second, time.Millisecond)
			// Connecting again, or even Ready: the session's end is over.
			assert.Eventually(t, func() bool { return a.PeerState("b") != sdk.PeerStateNotConnected }, 5*time.Second, time.Millisecond)
		}},
		{"disconnect", func(_ *testing.T, a *transport.Transport, _ *proxy) { a.Disconnect("b") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := start(t, "b", handler{}, nil)
			a := start(t, "a", handler{}, nil)
			p := newProxy(t, b.Addr())
			var once sync.Once
			// The call has found the link Ready; the session ends before its request is sent.
			transport.SetRegisteredHook(a, func() { once.Do(func() { tc.breakLink(t, a, p) }) })
			a.Connect("b", p.Addr())
			waitReady(t, a, "b")
			c, cancel := context.WithCancel(ctx) // no deadline; cancelled only to clean up a failed test
			defer cancel()
			errs := make(chan error, 1)
			go func() {
				_, err := a.Call(c, "b", &wire.Request{})
				errs <- err
			}()
			select {
			case err := <-errs:
				require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "the session's end fails the call")
			case <-time.After(5 * time.Second):
				t.Fatal("a call registered on a session that ended is still waiting")
			}
		})
	}
}

func TestEveryCallEndsWhileTheLinkIsTornDown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cycles int
		// tearDown ends a's session with b once; a then connects again.
		tearDown func(t *testing.T, a *transport.Transport, p *proxy)
	}{
		{"network cut", 5, func(t *testing.T, a *transport.Transport, p *proxy) {
			p.cut()
			require.Eventually(t, func() bool { return a.PeerState("b") != sdk.PeerStateReady }, 5*time.Second, time.Millisecond)
		}},
		{"disconnect", 40, func(_ *testing.T, a *transport.Transport, p *proxy) {
			a.Disconnect("b")
			a.Connect("b", p.Addr())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
				if len(req.Payload)%2 == 0 {
					reply(&wire.Reply{Payload: req.Payload})
					return
				}
				// Some replies come later, so that calls are pending when the link breaks.
				time.AfterFunc(time.Millisecond, func() { reply(&wire.Reply{Payload: req.Payload}) })
			}}, nil)
			a := start(t, "a", handler{}, nil)
			// Callers yield between registering and sending, so that sessions end in between.
			transport.SetRegisteredHook(a, runtime.Gosched)
			p := newProxy(t, b.Addr())
			a.Connect("b", p.Addr())
			waitReady(t, a, "b")

			c, cancel := context.WithCancel(ctx) // no deadline; cancelled only to end calls a failed test left waiting
			var stop atomic.Bool
			var replied, unavailable, inFlight atomic.Int64
			var callers sync.WaitGroup
			for i := range 32 {
				callers.Go(func() {
					payload := make([]byte, i%2)
					for !stop.Load() {
						inFlight.Add(1)
						_, err := a.Call(c, "b", &wire.Request{Payload: payload})
						inFlight.Add(-1)
						switch {
						case err == nil:
							replied.Add(1)
						case errors.Is(err, sdk.ErrOwnerUnavailable):
							unavailable.Add(1)
							time.Sleep(time.Millisecond) // a link that is down refuses at once
						case c.Err() != nil:
							return
						default:
							assert.NoError(t, err)
							return
						}
					}
				})
			}
			callersDone := make(chan struct{})
			go func() {
				callers.Wait()
				close(callersDone)
			}()
			defer func() {
				// However the test ends, its callers end before it does.
				stop.Store(true)
				cancel()
				select {
				case <-callersDone:
				case <-time.After(10 * time.Second):
					t.Error("callers still running after their calls were cancelled")
				}
			}()
			for range tc.cycles {
				time.Sleep(5 * time.Millisecond)
				tc.tearDown(t, a, p)
				waitReady(t, a, "b")
			}
			time.Sleep(20 * time.Millisecond)
			stop.Store(true)
			select {
			case <-callersDone:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d calls never ended (%d replied, %d unavailable)", inFlight.Load(), replied.Load(), unavailable.Load())
			}
			assert.Positive(t, replied.Load())
			t.Logf("%d replied, %d unavailable", replied.Load(), unavailable.Load())
		})
	}
}

func TestPeersUseTheSmallerMaxMessageSize(t *testing.T) {
	const small, big = 1 << 20, 4 << 20
	s := start(t, "small", handler{}, func(c *transport.Config) { c.MaxMessageSize = small })
	g := start(t, "big", handler{fn: func(_ context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if string(req.Payload) == "a big reply" {
			reply(&wire.Reply{Payload: make([]byte, 2<<20)})
			return
		}
		reply(&wire.Reply{Payload: req.Payload})
	}}, func(c *transport.Config) { c.MaxMessageSize = big })

	// Requests: the big node sends no more than the small one accepts.
	g.Connect("small", s.Addr())
	waitReady(t, g, "small")
	_, err := g.Call(ctx, "small", &wire.Request{Payload: make([]byte, 2<<20)})
	require.ErrorIs(t, err, sdk.ErrMessageTooLarge, "refused before sending")
	assert.Contains(t, err.Error(), fmt.Sprintf("over the limit of %d", small))
	assert.Contains(t, err.Error(), fmt.Sprint(big), "the error names both limits")
	r, err := g.Call(ctx, "small", &wire.Request{Payload: []byte("small")})
	require.NoError(t, err, "the stream survives")
	assert.Equal(t, "small", string(r.Payload))
	// Batches too: requests that fit one by one never travel in a batch over the small limit.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r, err := g.Call(ctx, "small", &wire.Request{Payload: make([]byte, 600<<10)})
			if assert.NoError(t, err) {
				assert.Nil(t, r.Error)
				assert.Len(t, r.Payload, 600<<10)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, sdk.PeerStateReady, g.PeerState("small"))

	// Replies: the big node answers a small caller with no more than it accepts.
	s.Connect("big", g.Addr())
	waitReady(t, s, "big")
	r, err = s.Call(ctx, "big", &wire.Request{Payload: []byte("a big reply")})
	require.NoError(t, err)
	rerr := wire.DecodeError(r.Error)
	require.ErrorIs(t, rerr, sdk.ErrMessageTooLarge, "the reply is refused on send")
	assert.Contains(t, rerr.Error(), fmt.Sprintf("over the limit of %d", small))
	assert.Equal(t, sdk.PeerStateReady, s.PeerState("big"))
	r, err = s.Call(ctx, "big", &wire.Request{Payload: []byte("small")})
	require.NoError(t, err, "the stream survives")
	assert.Equal(t, "small", string(r.Payload))
}

func TestPeerWithoutLimitHeaderIsAssumedToUseTheDefault(t *testing.T) {
	const limit = 2 * transport.DefaultMaxMessageSize
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		reply(&wire.Reply{Payload: make([]byte, transport.DefaultMaxMessageSize+1)})
	}}, func(c *transport.Config) { c.MaxMessageSize = limit })
	s := rawStream(t, b.Addr(), "x") // no zlink-max-message header
	hdr, err := s.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{fmt.Sprint(limit)}, hdr.Get("zlink-max-message"), "the server announces its limit")
	sendRequests(t, s, &wire.Request{CallId: 7})
	r := recvReply(t, s, 7)
	require.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrMessageTooLarge)
	assert.Empty(t, r.Payload)
}

// A server that accepts the stream and never answers its headers fails the attempt within
// DialTimeout, and the link tries again: it does not stay Connecting with its calls waiting.
func TestAServerThatNeverAnswersTheStreamFailsTheAttempt(t *testing.T) {
	var attempts atomic.Int64
	addr := fakePeer(t, func(s grpc.ServerStream) error {
		attempts.Add(1)
		<-s.Context().Done()
		return nil
	})
	const dial = 300 * time.Millisecond
	a := start(t, "a", handler{}, func(c *transport.Config) { c.DialTimeout = dial })
	a.Connect("p", addr)
	require.Eventually(t, func() bool { return a.Settled("p") }, 20*dial, 10*time.Millisecond, "the first attempt never ended")
	assert.NotEqual(t, sdk.PeerStateReady, a.PeerState("p"))
	require.Eventually(t, func() bool { return attempts.Load() >= 2 }, 20*time.Second, 10*time.Millisecond, "the link tries again")
}

// A peer whose stream is closed for what it sent is named in the node's log, at Warn, with the
// address the stream came from and whether mutual TLS certified its name: the peer is told
// why, and the operator learns which peer misbehaves, not only which name it claimed.
func TestE1_APeerCutOffForGarbageIsLogged(t *testing.T) {
	logs := &warnings{}
	b := start(t, "b", handler{}, func(c *transport.Config) { c.Logger = slog.New(logs) })
	s := rawStream(t, b.Addr(), "x")
	bad := &wire.Batch{}
	for range transport.MaxBatch + 1 {
		bad.Envelopes = append(bad.Envelopes, &wire.Envelope{Cancel: &wire.Cancel{CallId: 9}})
	}
	require.NoError(t, s.SendMsg(bad))
	for s.RecvMsg(&wire.Batch{}) == nil {
	}
	require.Eventually(t, func() bool { return len(logs.all()) > 0 }, 5*time.Second, 10*time.Millisecond, "nothing logged")
	got := logs.all()[0]
	assert.Contains(t, got, "peer=x")
	assert.Contains(t, got, "certified=false", "without mutual TLS the name is the peer's own word")
	assert.Contains(t, got, "addr=127.0.0.1:", "where the stream came from")
	assert.Contains(t, got, "4096")
}

// warnings is a slog handler that keeps the text of each record at Warn or above.
type warnings struct {
	mu   sync.Mutex
	recs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recs = append(w.recs, b.String())
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.recs)
}

func TestExpiredRequestIsDroppedUnrun(t *testing.T) {
	var ran atomic.Int64
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		ran.Add(1)
		reply(&wire.Reply{})
	}}, nil)
	s := rawStream(t, b.Addr(), "x")
	// It waited a second in some buffer: its relative timeout still looks fresh, its
	// absolute deadline does not.
	sendRequests(t, s, &wire.Request{CallId: 1, TimeoutNanos: int64(time.Hour), DeadlineUnixNanos: time.Now().Add(-time.Second).UnixNano()})
	r := recvReply(t, s, 1)
	require.ErrorIs(t, wire.DecodeError(r.Error), context.DeadlineExceeded)
	assert.Zero(t, ran.Load(), "the handler never ran")
}

// The timeout of a request counts from when its batch arrived, not from when the node came to
// it: a request that waited behind others of its batch has waited that long already. One whose
// timeout ran out meanwhile is refused unrun; the deadline of one that runs is its arrival's.
func TestATimeoutCountsFromTheArrivalOfItsBatch(t *testing.T) {
	const wait = time.Second
	var ran atomic.Int64
	deadlines := make(chan time.Time, 1)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		switch req.CallId {
		case 1:
			time.Sleep(wait) // this test's handler runs on the stream's reader: the next wait
		case 2:
			ran.Add(1)
		case 3:
			dl, _ := ctx.Deadline()
			deadlines <- dl
		}
		reply(&wire.Reply{})
	}}, nil)
	s := rawStream(t, b.Addr(), "x")
	sent := time.Now()
	sendRequests(t, s, &wire.Request{CallId: 1},
		&wire.Request{CallId: 2, TimeoutNanos: int64(wait / 2)},
		&wire.Request{CallId: 3, TimeoutNanos: int64(3 * wait)})
	replies := map[uint64]*wire.Reply{}
	for len(replies) < 3 {
		var b wire.Batch
		require.NoError(t, s.RecvMsg(&b))
		for _, env := range b.Envelopes {
			if r := env.GetReply(); r != nil {
				replies[r.CallId] = r
			}
		}
	}
	require.True(t, replies[2].Refused, "its timeout ran out while it waited: refused unrun")
	require.ErrorIs(t, wire.DecodeError(replies[2].Error), context.DeadlineExceeded)
	assert.Zero(t, ran.Load(), "the handler never ran")
	require.Nil(t, replies[3].Error)
	dl := <-deadlines
	assert.True(t, dl.Before(sent.Add(3*wait+wait/2)),
		"the deadline %v after the send counts from the batch's arrival, not from the end of the wait of %v", dl.Sub(sent), wait)
	assert.False(t, dl.Before(sent.Add(3*wait)), "nor from before the send")
}

// A request whose caller's deadline passes while the stream's reader is held by an earlier
// request of its batch (its admission, a pause of the process) is refused unrun when its turn
// comes: the deadline is judged at a fresh reading of the clock, not at the batch's arrival.
func TestARequestWhoseDeadlinePassedAfterItsBatchArrivedIsRefusedUnrun(t *testing.T) {
	var ran atomic.Int64
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.CallId == 1 {
			time.Sleep(time.Second) // this test's handler runs on the stream's reader: the next waits
		} else {
			ran.Add(1)
		}
		reply(&wire.Reply{})
	}}, nil)
	s := rawStream(t, b.Addr(), "x")
	const timeout = 300 * time.Millisecond
	dl := time.Now().Add(timeout)
	// As a link sends a request: its timeout and its absolute deadline.
	sendRequests(t, s, &wire.Request{CallId: 1}, &wire.Request{CallId: 2, TimeoutNanos: int64(timeout), DeadlineUnixNanos: dl.UnixNano()})
	r := recvReply(t, s, 2)
	require.True(t, r.Refused, "refused unrun")
	require.ErrorIs(t, wire.DecodeError(r.Error), context.DeadlineExceeded)
	assert.Zero(t, ran.Load(), "the handler never ran")
}

func TestHandlerDeadlineIsNoLaterThanTheCallersDeadline(t *testing.T) {
	type seen struct {
		deadline time.Time
		ok       bool
		abs      int64
	}
	got := make(chan seen, 1)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		dl, ok := ctx.Deadline()
		got <- seen{dl, ok, req.DeadlineUnixNanos}
		reply(&wire.Reply{})
	}}, nil)

	// A raw request whose relative timeout is longer than its absolute deadline.
	s := rawStream(t, b.Addr(), "x")
	abs := time.Now().Add(2 * time.Second)
	sendRequests(t, s, &wire.Request{CallId: 1, TimeoutNanos: int64(time.Hour), DeadlineUnixNanos: abs.UnixNano()})
	r := recvReply(t, s, 1)
	require.Nil(t, r.Error)
	h := <-got
	require.True(t, h.ok)
	assert.False(t, h.deadline.After(abs), "the handler's deadline %v is after the caller's %v", h.deadline, abs)

	// A call carries its caller's deadline.
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := a.Call(c, "b", &wire.Request{})
	require.NoError(t, err)
	h = <-got
	dl, _ := c.Deadline()
	assert.Equal(t, dl.UnixNano(), h.abs, "the request carries the caller's absolute deadline")
	require.True(t, h.ok)
	assert.False(t, h.deadline.After(dl))
}

func TestCallPastItsDeadlineEndsWithDeadlineExceeded(t *testing.T) {
	// The receiver's context ends at the caller's deadline, so its handler's failure races
	// the caller's own timer; the caller must still see its deadline.
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		go func() {
			<-ctx.Done()
			reply(&wire.Reply{Error: wire.EncodeError(&sdk.AppError{Message: ctx.Err().Error()})})
		}()
	}}, nil)
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			r, err := a.Call(c, "b", &wire.Request{})
			if err == nil {
				err = wire.DecodeError(r.Error)
			}
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
	wg.Wait()
}

// A configured Dialer makes the connections to peers: it is given the peer's endpoint.
func TestDialerMakesTheConnections(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	var dialled sync.Map
	a := start(t, "a", handler{}, func(c *transport.Config) {
		c.Dialer = func(ctx context.Context, endpoint string) (net.Conn, error) {
			dialled.Store(endpoint, true)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", endpoint)
		}
	})
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	_, err := a.Call(ctx, "b", &wire.Request{})
	require.NoError(t, err)
	_, ok := dialled.Load(b.Addr())
	assert.True(t, ok, "the Dialer was used for %s", b.Addr())
}

// Under mutual TLS a peer is the node its certificate names: a zlink-node header that says
// otherwise is refused, and so is a certificate of the mesh's CA that names no node.
func TestPeerIdentityComesFromTheCertificate(t *testing.T) {
	pki := rttest.NewPKI(t, "mesh-ca")
	var from atomic.Value
	bs, bc := pki.MutualTLS(t, "b")
	b := start(t, "b", handler{fn: func(_ context.Context, peer sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		from.Store(peer)
		reply(&wire.Reply{Payload: req.Payload})
	}}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = bs, bc })

	// "a" holds a certificate of the mesh for node a, and says it is node "c".
	as, ac := pki.MutualTLS(t, "a")
	liar := start(t, "c", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = as, ac })
	liar.Connect("b", b.Addr())
	_, err := liar.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "a header that disagrees with the certificate is refused")
	assert.Nil(t, from.Load(), "nothing reached the handler")

	// A certificate of the mesh's CA without the node's URI SAN.
	anon := pki.CertFor(t, "anon")
	ns := &tls.Config{Certificates: []tls.Certificate{anon}, ClientCAs: pki.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	nc := &tls.Config{Certificates: []tls.Certificate{anon}, RootCAs: pki.Pool}
	nameless := start(t, "anon", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = ns, nc })
	nameless.Connect("b", b.Addr())
	_, err = nameless.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "a certificate that names no node is refused")
	assert.Nil(t, from.Load())

	// The honest node gets through, and the handler is told who it is.
	ts, tc := pki.MutualTLS(t, "t")
	honest := start(t, "t", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = ts, tc })
	honest.Connect("b", b.Addr())
	_, err = honest.Call(ctx, "b", &wire.Request{})
	require.NoError(t, err)
	assert.Equal(t, sdk.NodeID("t"), from.Load())
}

// Under TLS a link reaches the node it is for: a server at that endpoint whose certificate
// names another node of the mesh is not accepted.
func TestALinkReachesTheNodeItIsFor(t *testing.T) {
	pki := rttest.NewPKI(t, "mesh-ca")
	ms, mc := pki.MutualTLS(t, "mallory")
	mallory := start(t, "mallory", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = ms, mc })
	as, ac := pki.MutualTLS(t, "a")
	a := start(t, "a", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = as, ac })
	a.Connect("b", mallory.Addr()) // b's endpoint, taken by mallory
	_, err := a.Call(ctx, "b", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.NotEqual(t, sdk.PeerStateReady, a.PeerState("b"))
}

// Whoever reaches the port holds little: a connection that never completes its handshake is
// closed after DialTimeout, which frees its slot of MaxConns for a peer.
func TestServerClosesConnectionsThatNeverSpeak(t *testing.T) {
	b := start(t, "b", handler{}, func(c *transport.Config) { c.MaxConns, c.DialTimeout = 2, 500*time.Millisecond })
	var idle []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", b.Addr())
		require.NoError(t, err)
		idle = append(idle, conn)
	}
	a := start(t, "a", handler{}, func(c *transport.Config) { c.DialTimeout = 5 * time.Second })
	a.Connect("b", b.Addr())
	// The silent connections hold both slots until the server closes them.
	for _, conn := range idle {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err := io.Copy(io.Discard, conn) // the server's preface, then the end
		if err == nil {
			err = io.EOF
		}
		var ne net.Error
		assert.False(t, errors.As(err, &ne) && ne.Timeout(), "closed by the server, not by the read deadline: %v", err)
		_ = conn.Close()
	}
	waitReady(t, a, "b")
	_, err := a.Call(ctx, "b", &wire.Request{})
	require.NoError(t, err, "served once a slot was free")
}

// A listener that fails under the server is reported once, so that the node can say it can no
// longer be reached; Close is not reported.
func TestListenerFailureIsReported(t *testing.T) {
	failed := make(chan error, 2)
	tr := start(t, "a", handler{}, func(c *transport.Config) { c.OnServeFailure = func(err error) { failed <- err } })
	require.NoError(t, transport.CloseListener(tr))
	select {
	case err := <-failed:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the listener's failure was not reported")
	}
	quiet := start(t, "b", handler{}, func(c *transport.Config) { c.OnServeFailure = func(err error) { failed <- err } })
	require.NoError(t, quiet.Close())
	assert.Empty(t, failed, "Close is not a failure")
}

// A node with ServerTLS that does not verify client certificates still refuses a peer without
// one: otherwise the zlink-node header alone would say who the peer is.
func TestTLSPeerWithoutACertificateIsRefused(t *testing.T) {
	pki := rttest.NewPKI(t, "mesh-ca")
	bs, bc := pki.MutualTLS(t, "b")
	bs.ClientAuth = tls.NoClientCert
	b := start(t, "b", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = bs, bc })
	as, ac := pki.MutualTLS(t, "a")
	ac.Certificates = nil // trusts b, but proves nothing of itself
	a := start(t, "a", handler{}, func(c *transport.Config) { c.ServerTLS, c.ClientTLS = as, ac })
	a.Connect("b", b.Addr())
	_, err := a.Call(ctx, "b", &wire.Request{Payload: []byte("who am I?")})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.NotEqual(t, sdk.PeerStateReady, a.PeerState("b"))
}

// A request or a reply with a string that is not UTF-8 fails its own call only: the calls that
// share its stream go on, and the link stays up. In the stream's batch it would end the stream
// and leave every call on it not knowing whether its request ran.
func TestAStringThatIsNotUTF8FailsItsOwnCallOnly(t *testing.T) {
	release := make(chan struct{})
	b := start(t, "b", handler{fn: func(_ context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		switch req.Method {
		case "Slow":
			go func() { // a handler holds no stream's reader
				<-release
				reply(&wire.Reply{Payload: req.Payload})
			}()
			return
		case "BadReply":
			reply(&wire.Reply{Redirect: "n\xff"})
			return
		}
		reply(&wire.Reply{Payload: req.Payload, Owner: string(from)})
	}}, nil)
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	slow := make(chan error, 4)
	for range cap(slow) {
		go func() {
			r, err := a.Call(ctx, "b", &wire.Request{Method: "Slow", Payload: []byte("s")})
			if err == nil && string(r.Payload) != "s" {
				err = fmt.Errorf("payload %q", r.Payload)
			}
			slow <- err
		}()
	}
	_, err := a.Call(ctx, "b", &wire.Request{Method: "Pi\xffng"})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "field method is not valid UTF-8")

	r, err := a.Call(ctx, "b", &wire.Request{Method: "BadReply"})
	require.NoError(t, err, "the reply's stream carried it")
	require.NotNil(t, r.Error)
	assert.Contains(t, wire.DecodeError(r.Error).Error(), "field redirect is not valid UTF-8")

	close(release)
	for range cap(slow) {
		require.NoError(t, <-slow, "a call sharing the stream")
	}
	r, err = a.Call(ctx, "b", &wire.Request{Payload: []byte("after")})
	require.NoError(t, err)
	assert.Equal(t, "after", string(r.Payload))
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("b"))
}

// A request or reply whose texts (an error's message, names) would not fit the room a batch
// keeps beyond its payloads fails its own call, never the stream and the calls that share it:
// gRPC would refuse the whole batch. A handler's long error text is cut instead, keeping the
// error.
func TestLongTextsFailTheirOwnCallOnly(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 4)
	long := strings.Repeat("x", 128<<10)
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		switch req.Method {
		case "Slow":
			arrived <- struct{}{}
			go func() {
				<-release
				reply(&wire.Reply{Payload: req.Payload})
			}()
		case "LongError":
			reply(wire.MessageReply(nil, sdk.Errorf("too_long", "%s", long)))
		case "LongRedirect":
			reply(&wire.Reply{Redirect: long})
		default:
			reply(&wire.Reply{Payload: req.Payload})
		}
	}}, func(c *transport.Config) { c.MaxMessageSize = 1024 })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.MaxMessageSize = 1024 })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	slow := make(chan error, 4)
	for range cap(slow) {
		go func() {
			_, err := a.Call(ctx, "b", &wire.Request{Method: "Slow", Payload: []byte("s")})
			slow <- err
		}()
	}
	for range cap(slow) {
		wait.For(t, arrived) // in flight on the stream that the long texts must not end
	}
	r, err := a.Call(ctx, "b", &wire.Request{Method: "LongError"})
	require.NoError(t, err, "the reply's stream carried it")
	var ae *sdk.AppError
	require.ErrorAs(t, wire.DecodeError(r.Error), &ae)
	assert.Equal(t, "too_long", ae.Code)
	assert.Contains(t, ae.Message, "bytes, cut)")

	r, err = a.Call(ctx, "b", &wire.Request{Method: "LongRedirect"})
	require.NoError(t, err)
	require.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrMessageTooLarge)
	assert.Contains(t, wire.DecodeError(r.Error).Error(), "the reply from b has texts of")

	_, err = a.Call(ctx, "b", &wire.Request{Method: long})
	require.ErrorIs(t, err, sdk.ErrMessageTooLarge)
	assert.Contains(t, err.Error(), "the request's names and trace context are")

	close(release)
	for range cap(slow) {
		require.NoError(t, <-slow, "a call sharing the stream")
	}
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("b"))
}
