package transport_test

import (
	"context"
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

// Calls that hold a stream's share and wait for their cancellations (long polls) get them: a
// stream that has waited StallTimeout for room reads on, refusing each request that finds
// none, so that the cancellations behind those requests reach the calls, which end and free
// the share; the stream then takes requests again.
func TestCancelsReachTheCallsThatHoldAStreamsShare(t *testing.T) {
	const maxMessage = 256 << 10
	budget := uint64(1 << 20)
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{CoreHwmBudgetBytes: &budget}, maxMessage)
	require.NoError(t, err)
	var polling atomic.Int64
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait) // after the transport's close, which ends their contexts
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.Method == "quick" {
			reply(&wire.Reply{})
			return
		}
		handlers.Go(func() {
			polling.Add(1)
			defer polling.Add(-1)
			<-ctx.Done() // a long poll: it ends with its caller
			reply(&wire.Reply{})
		})
	}}, func(c *transport.Config) {
		c.Meter = capacity.New(settings)
		c.MaxMessageSize = maxMessage
		c.StallTimeout = 300 * time.Millisecond
	})
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	// Two long polls fill the stream's share.
	polls, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	ended := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := a.Call(polls, "b", &wire.Request{Payload: make([]byte, 200<<10)})
			ended <- err
		}()
	}
	require.Eventually(t, func() bool { return polling.Load() == 2 }, 10*time.Second, time.Millisecond)
	r, err := a.Call(context.Background(), "b", &wire.Request{Payload: make([]byte, 200<<10)})
	require.NoError(t, err)
	require.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrInboundBudget, "a third finds no room, and the stream waits for some")

	giveUp()
	for range 2 {
		require.ErrorIs(t, <-ended, context.Canceled)
	}
	require.Eventually(t, func() bool { return polling.Load() == 0 }, 10*time.Second, time.Millisecond,
		"the cancellations reached the long polls")
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := a.Call(cctx, "b", &wire.Request{Method: "quick", Payload: make([]byte, 200<<10)})
		if assert.NoError(c, err) {
			assert.NoError(c, wire.DecodeError(r.Error))
		}
	}, 10*time.Second, 10*time.Millisecond, "the stream has room, and takes requests again")
}

// Calls whose jobs hold the node's application job queue paused, and wait for their
// cancellations, get them: a stream that has waited StallTimeout for intake to resume reads
// on, refusing each request unrun (ErrCapacityExceeded{Scheduler}) while intake stays paused,
// so that the cancellations reach the calls, whose jobs end; intake then resumes.
func TestCancelsReachTheCallsThatHoldIntakePaused(t *testing.T) {
	jobs := uint64(2)
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{
		ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: &jobs,
	}, transport.DefaultMaxMessageSize)
	require.NoError(t, err)
	meter := capacity.New(settings)
	var polling atomic.Int64
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.Method == "quick" {
			reply(&wire.Reply{})
			return
		}
		handlers.Go(func() {
			reserved, err := meter.Acquire(ctx, nil) // the job's permit, as a Spot's lane takes it
			if err != nil {
				reply(&wire.Reply{Error: wire.EncodeError(err)})
				return
			}
			polling.Add(1)
			<-ctx.Done() // a long poll: it ends with its caller
			polling.Add(-1)
			meter.Return(reserved)
			reply(&wire.Reply{})
		})
	}}, func(c *transport.Config) {
		c.Meter = meter
		c.StallTimeout = 300 * time.Millisecond
	})
	a := start(t, "a", handler{}, nil)
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	polls, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	ended := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := a.Call(polls, "b", &wire.Request{})
			ended <- err
		}()
	}
	require.Eventually(t, func() bool { return polling.Load() == 2 && meter.Paused() }, 10*time.Second, time.Millisecond)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := a.Call(cctx, "b", &wire.Request{Method: "quick"})
	require.NoError(t, err)
	var ce *sdk.CapacityError
	require.ErrorAs(t, wire.DecodeError(r.Error), &ce, "refused once the stream has waited StallTimeout")
	assert.Equal(t, sdk.CapacityScheduler, ce.Where)
	assert.True(t, r.Refused, "unrun")

	giveUp()
	for range 2 {
		require.ErrorIs(t, <-ended, context.Canceled)
	}
	require.Eventually(t, func() bool { return polling.Load() == 0 && !meter.Paused() }, 10*time.Second, time.Millisecond,
		"the cancellations reached the long polls, and intake resumed")
	r, err = a.Call(cctx, "b", &wire.Request{Method: "quick"})
	require.NoError(t, err)
	require.NoError(t, wire.DecodeError(r.Error))
}
