package transport_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// A peer that answers the stream's headers and then takes none of the requests sent to it,
// while its connection and keepalive live, holds calls without a deadline no longer than
// StallTimeout: the session ends, its calls fail (those never sent as such), and the link
// connects again.
func TestAPeerThatTakesNoRequestsEndsTheSessionAfterStallTimeout(t *testing.T) {
	var attempts atomic.Int64
	addr := fakePeer(t, func(s grpc.ServerStream) error {
		attempts.Add(1)
		if err := s.SendHeader(metadata.Pairs("zlink-max-message", strconv.Itoa(transport.DefaultMaxMessageSize))); err != nil {
			return err
		}
		<-s.Context().Done() // reads nothing
		return nil
	})
	const stall = 300 * time.Millisecond
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("silent", addr)
	waitReady(t, a, "silent")

	const calls = 12
	errs := make(chan error, calls)
	for range calls {
		go func() {
			// No deadline: only the link's end ends the call.
			_, err := a.Call(context.Background(), "silent", &wire.Request{Payload: make([]byte, 1<<20)})
			errs <- err
		}()
	}
	notSent := 0
	for range calls {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
			if errors.Is(err, transport.ErrNotSent) {
				notSent++
			} else {
				assert.ErrorContains(t, err, "took none of the requests sent to it")
			}
		case <-time.After(30 * stall):
			t.Fatal("a call waits for good on a peer that takes no requests")
		}
	}
	assert.Positive(t, notSent, "the requests still queued failed as never sent")
	require.Eventually(t, func() bool { return attempts.Load() >= 2 }, 30*stall, 10*time.Millisecond, "the link connects again")
}

// A peer that stops reading for room in its share of the budget, but whose calls end one after
// another within StallTimeout, takes a little at a time: its link is not cut, and every call
// is answered.
func TestAPeerThatTakesRequestsSlowlyKeepsItsSession(t *testing.T) {
	const maxMessage = 256 << 10
	budget := uint64(1 << 20)
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{CoreHwmBudgetBytes: &budget}, maxMessage)
	require.NoError(t, err)
	b := start(t, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		go func() {
			time.Sleep(20 * time.Millisecond)
			reply(&wire.Reply{})
		}()
	}}, func(c *transport.Config) {
		c.Meter = capacity.New(settings)
		c.MaxMessageSize = maxMessage
	})
	const stall = 300 * time.Millisecond
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	// The stream's share holds two requests, so the peer reads two at a time: 60 of them take
	// over half a second, past StallTimeout, and each pair leaves well within it.
	const calls = 60
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := a.Call(context.Background(), "b", &wire.Request{Payload: make([]byte, 200<<10)})
			errs <- err
		}()
	}
	refused := 0
	for range calls {
		err := <-errs
		if errors.Is(err, sdk.ErrInboundBudget) {
			refused++ // refused unrun while the share was full: the caller's to try again
			continue
		}
		require.NoError(t, err)
	}
	assert.Less(t, refused, calls, "some calls ran")
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("b"))
}
