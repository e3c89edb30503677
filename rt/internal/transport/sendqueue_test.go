package transport_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// TestE6_RepliesToAPeerThatStopsReadingStayWithinTheSendQueuesBound: a peer sends many small
// requests and does not read its stream; the handlers answer later (as a Spot's lane does), each
// with a reply of the largest size. The replies queued for the peer stay within the send
// queue's bound, max(16 MiB, 4 x max message), and a few bytes per further call: a reply that
// would pass it goes as ErrCapacityExceeded{SendQueue}, so its caller learns why it has none.
func TestE6_RepliesToAPeerThatStopsReadingStayWithinTheSendQueuesBound(t *testing.T) {
	const maxMessage = 64 << 10
	const sendQueueBound = 16 << 20
	budget := uint64(1 << 20)
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{CoreHwmBudgetBytes: &budget}, maxMessage)
	require.NoError(t, err)
	meter := capacity.New(settings)

	var mu sync.Mutex
	admitted := 0
	release := make(chan struct{})
	var handlers sync.WaitGroup
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		mu.Lock()
		admitted++
		mu.Unlock()
		handlers.Go(func() {
			<-release
			reply(&wire.Reply{Payload: make([]byte, maxMessage)})
		})
	}}, func(c *transport.Config) {
		c.Meter = meter
		c.MaxMessageSize = maxMessage
	})
	s := rawStream(t, b.Addr(), "a", "zlink-max-message", "65536")
	var reqs []*wire.Request
	for i := range 3000 {
		reqs = append(reqs, &wire.Request{CallId: uint64(i + 1), Op: wire.Op_OP_CALL})
	}
	sendRequests(t, s, reqs...) // not read until the replies are measured
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return admitted > 500
	}, 3*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the reader admits what its share allows, then waits
	mu.Lock()
	ran := admitted
	mu.Unlock()
	close(release)
	handlers.Wait()
	time.Sleep(100 * time.Millisecond)
	st := meter.Status(0, exec.DefaultConfig()).CoreHwm
	assert.LessOrEqual(t, st.CompletionCurrentAccountedBytes, uint64(sendQueueBound+ran*capacity.MessageOverhead),
		"%d replies queued for a peer that does not read", st.CompletionPendingMessageCount)
	assert.Greater(t, ran*maxMessage, sendQueueBound, "the handlers answered more than the bound")

	full, refused := 0, 0
	for got := 0; got < ran; {
		var batch wire.Batch
		require.NoError(t, s.RecvMsg(&batch))
		for _, env := range batch.Envelopes {
			r := env.GetReply()
			switch {
			case r == nil || r.CallId == 0:
			case r.Refused:
				refused++
			case len(r.Payload) == maxMessage:
				got++
			default:
				got++
				var ce *sdk.CapacityError
				require.True(t, errors.As(wire.DecodeError(r.Error), &ce), "call %d: %v", r.CallId, wire.DecodeError(r.Error))
				assert.Equal(t, sdk.CapacityReplyQueue, ce.Where)
				full++
			}
		}
	}
	assert.Positive(t, full, "a caller whose reply did not fit learns it")
	t.Logf("%d requests ran, %d refused so far; %d replies went as ErrCapacityExceeded{SendQueue}", ran, refused, full)
}

// TestE7_APeersRequestIsChargedWithItsTexts: the budget holds every byte of a peer's request
// that the node keeps while its call runs, its names and trace context as well as its payload,
// over the bound that every sender keeps to too (the node refuses such a request itself).
func TestE7_APeersRequestIsChargedWithItsTexts(t *testing.T) {
	budget := uint64(16 << 20)
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{CoreHwmBudgetBytes: &budget}, transport.DefaultMaxMessageSize)
	require.NoError(t, err)
	meter := capacity.New(settings)
	accounted := func() uint64 { return meter.Status(0, exec.DefaultConfig()).CoreHwm.CurrentAccountedBytes }
	release := make(chan struct{})
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		go func() { // the call runs until the test ends, its request held
			<-release
			reply(&wire.Reply{})
		}()
	}}, func(c *transport.Config) { c.Meter = meter })
	t.Cleanup(func() { close(release) }) // before the transport closes

	const text = 16 << 10
	s := rawStream(t, b.Addr(), "x")
	sendRequests(t, s, &wire.Request{CallId: 1, Type: "t", Tracestate: strings.Repeat("k", text)})
	require.Eventually(t, func() bool { return accounted() >= text }, 5*time.Second, time.Millisecond,
		"the trace context is charged: %d bytes accounted", accounted())
	sendRequests(t, s, &wire.Request{CallId: 2, Type: "t", Id: strings.Repeat("i", 1<<20)})
	require.Eventually(t, func() bool { return accounted() >= text+1<<20 }, 5*time.Second, time.Millisecond,
		"an ID over the bound is charged: %d bytes accounted", accounted())
}
