package transport_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// holdingPeer is a node, with a StallTimeout of a minute, whose handler runs "hold" until its
// caller gives up, holding one of slots; "take" waits on the reader (capacity.AsReader) for a
// slot, lets it go and answers; anything else is answered at once. A raw stream from x reaches
// it.
func holdingPeer(t *testing.T, slots int, mutate func(*transport.Config)) (s grpc.ClientStream, held chan struct{}) {
	t.Helper()
	held = make(chan struct{}, slots)
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait) // after the transport's close, which ends their contexts
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		switch req.Method {
		case "hold":
			held <- struct{}{}
			handlers.Go(func() {
				<-ctx.Done()
				<-held
				reply(&wire.Reply{})
			})
		case "take":
			err := capacity.AsReader(ctx, func(c context.Context) error {
				select {
				case held <- struct{}{}:
					<-held
					return nil
				case <-c.Done():
					return c.Err()
				}
			})
			reply(&wire.Reply{Error: wire.EncodeError(err)})
		default:
			reply(&wire.Reply{})
		}
	}}, func(c *transport.Config) {
		c.StallTimeout = time.Minute
		if mutate != nil {
			mutate(c)
		}
	})
	return rawStream(t, b.Addr(), "x"), held
}

// sendBatch sends envs in one batch on s.
func sendBatch(t *testing.T, s grpc.ClientStream, envs ...*wire.Envelope) {
	t.Helper()
	require.NoError(t, s.SendMsg(&wire.Batch{Envelopes: envs}))
}

// A request that finds no room comes in one batch with the cancellation of a call that holds
// the room, and the stream waits for room before it reads on: the cancellation, behind the
// request in its batch, is taken in while it waits, and the stream's next request is taken in
// well within the StallTimeout (a minute), which it waited for before.
func TestACancellationInTheBatchOfARequestThatWaitsForRoomIsTakenInWhileItWaits(t *testing.T) {
	const maxMessage = 256 << 10
	s, held := holdingPeer(t, 2, func(c *transport.Config) {
		c.Meter, c.MaxMessageSize = budgetMeter(t, maxMessage), maxMessage
	})
	sendRequests(t, s, &wire.Request{CallId: 1, Method: "hold", Payload: make([]byte, roomPayload)})
	sendRequests(t, s, &wire.Request{CallId: 2, Method: "hold", Payload: make([]byte, roomPayload)})
	require.Eventually(t, func() bool { return len(held) == 2 }, 10*time.Second, time.Millisecond, "the share is full")

	// Call 3 finds no room, and the stream waits for room for one like it before it reads on.
	sendBatch(t, s, &wire.Envelope{Request: &wire.Request{CallId: 3, Payload: make([]byte, roomPayload)}},
		&wire.Envelope{Cancel: &wire.Cancel{CallId: 1}})
	require.ErrorIs(t, wire.DecodeError(replyWithin(t, s, 3, 10*time.Second).Error), sdk.ErrInboundBudget)
	sendRequests(t, s, &wire.Request{CallId: 4, Payload: make([]byte, roomPayload)})
	require.NoError(t, wire.DecodeError(replyWithin(t, s, 4, 10*time.Second).Error), "taken in once call 1 let its room go")
	assert.Len(t, held, 1, "call 2 holds on")
}

// A handler waits on the reader (capacity.AsReader) for a slot that a call of the same stream
// holds until its caller gives up. The cancellation comes behind the waiting request, in a
// later batch or in the request's own: it is taken in while the handler waits, and the wait
// ends well within the StallTimeout (a minute), which it waited for before, then to give up.
func TestCancelsBehindARequestWhoseHandlerWaitsOnTheReaderAreReadWhileItWaits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sameBatch bool
	}{{"in a later batch", false}, {"in the request's own batch", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, held := holdingPeer(t, 1, nil)
			sendRequests(t, s, &wire.Request{CallId: 1, Method: "hold"})
			require.Eventually(t, func() bool { return len(held) == 1 }, 10*time.Second, time.Millisecond)

			take := &wire.Envelope{Request: &wire.Request{CallId: 2, Method: "take"}}
			cancel := &wire.Envelope{Cancel: &wire.Cancel{CallId: 1}}
			if tc.sameBatch {
				sendBatch(t, s, take, cancel)
			} else {
				sendBatch(t, s, take)
				time.Sleep(50 * time.Millisecond) // the handler waits
				sendBatch(t, s, cancel)
			}
			r := replyWithin(t, s, 2, 10*time.Second)
			require.NoError(t, wire.DecodeError(r.Error), "the wait took the slot that call 1 let go")

			sendRequests(t, s, &wire.Request{CallId: 3})
			assert.Nil(t, replyWithin(t, s, 3, 10*time.Second).Error, "the stream reads on")
		})
	}
}
