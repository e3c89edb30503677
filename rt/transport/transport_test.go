package transport_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/rttest"
	"github.com/zlink-go/zlink/rt/transport"
	"github.com/zlink-go/zlink/rt/wire"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// handler answers with the request's payload, or runs fn when set.
type handler struct {
	fn func(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply))
}

func (h handler) Handle(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
	if h.fn != nil {
		h.fn(ctx, from, req, reply)
		return
	}
	reply(&wire.Reply{Payload: req.Payload, Owner: string(from)})
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

func TestMaxMessageSizeOnSendAndReceive(t *testing.T) {
	b := start(t, "b", handler{}, func(c *transport.Config) { c.MaxMessageSize = 1024 })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.MaxMessageSize = 4096 })
	a.Connect("b", b.Addr())
	_, err := a.Call(ctx, "b", &wire.Request{Payload: make([]byte, 5000)})
	require.ErrorIs(t, err, sdk.ErrMessageTooLarge, "refused on send")
	assert.Contains(t, err.Error(), "5000 bytes to b, over the limit of 4096")

	r, err := a.Call(ctx, "b", &wire.Request{Payload: make([]byte, 2000)})
	require.NoError(t, err)
	rerr := wire.DecodeError(r.Error)
	require.ErrorIs(t, rerr, sdk.ErrMessageTooLarge, "refused on receive")
	assert.Contains(t, rerr.Error(), "over b's limit of 1024")

	r, err = a.Call(ctx, "b", &wire.Request{Payload: make([]byte, 1000)})
	require.NoError(t, err)
	assert.Nil(t, r.Error, "the link survives refused messages")
	assert.Len(t, r.Payload, 1000)
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
