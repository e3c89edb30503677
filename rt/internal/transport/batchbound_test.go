package transport_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// cancelBatch is one batch that cancels the calls ids.
func cancelBatch(ids ...uint64) *wire.Batch {
	b := &wire.Batch{}
	for _, id := range ids {
		b.Envelopes = append(b.Envelopes, &wire.Envelope{Cancel: &wire.Cancel{CallId: id}})
	}
	return b
}

// callIDs are the call IDs from 1 to n.
func callIDs(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	return ids
}

// streamEnds reads s until it ends, and returns the error it ended with; it fails the test if
// s carries more than a few batches first.
func streamEnds(t *testing.T, s grpc.ClientStream) error {
	t.Helper()
	for range 10 {
		var batch wire.Batch
		if err := s.RecvMsg(&batch); err != nil {
			return err
		}
	}
	require.FailNow(t, "the stream lives on")
	return nil
}

// TestE1_APeerThatAnnouncesNoBatchBoundIsHeldToTheProtocolsBound: a peer that announces no
// bound of its batches is held to the one every release announces. A batch of that many
// messages is read and the stream lives on; one of more ends the stream before what it
// decodes to is charged anywhere.
func TestE1_APeerThatAnnouncesNoBatchBoundIsHeldToTheProtocolsBound(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	s := rawStream(t, b.Addr(), "a") // no zlink-max-batch header
	hdr, err := s.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{strconv.Itoa(transport.MaxBatch)}, hdr.Get("zlink-max-batch"), "the server announces its bound")

	require.NoError(t, s.SendMsg(cancelBatch(callIDs(transport.MaxBatch)...)))
	sendRequests(t, s, &wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Payload: []byte("after")})
	assert.Equal(t, "after", string(recvReply(t, s, 1).Payload), "a batch of the bound is read")

	require.NoError(t, s.SendMsg(cancelBatch(callIDs(transport.MaxBatch+1)...)))
	assert.ErrorContains(t, streamEnds(t, s), fmt.Sprintf("more than %d messages", transport.MaxBatch))
}

// TestE1_APeerThatAnnouncesABatchBoundIsHeldToIt: a peer that announces a bound of its batches
// and sends a batch of more messages than that has its stream ended, before what the batch
// decodes to is charged anywhere.
func TestE1_APeerThatAnnouncesABatchBoundIsHeldToIt(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	s := rawStream(t, b.Addr(), "a", "zlink-max-batch", "2")
	sendRequests(t, s, &wire.Request{CallId: 1}, &wire.Request{CallId: 2})
	recvReply(t, s, 1)
	require.NoError(t, s.SendMsg(cancelBatch(7, 8, 9)))
	assert.ErrorContains(t, streamEnds(t, s), "more than 2 messages")
}

// TestE1_AServerThatAnnouncesNoBatchBoundIsHeldToTheProtocolsBound: a node that announces no
// bound of its batches is held by this node's link to the one every release announces. It
// answers that many calls in one batch, and every call completes; it answers one call more in
// one batch, and the link ends that stream: none of those calls completes with a reply that
// was read beyond the bound.
func TestE1_AServerThatAnnouncesNoBatchBoundIsHeldToTheProtocolsBound(t *testing.T) {
	for _, c := range []struct {
		name  string
		calls int
		read  bool
	}{{"at the bound", transport.MaxBatch, true}, {"over the bound", transport.MaxBatch + 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			announced := make(chan metadata.MD, 1)
			addr := fakePeer(t, func(s grpc.ServerStream) error {
				md, _ := metadata.FromIncomingContext(s.Context())
				select {
				case announced <- md:
				default:
				}
				if err := s.SendHeader(metadata.Pairs("zlink-max-message", strconv.Itoa(transport.DefaultMaxMessageSize))); err != nil {
					return err
				}
				// Takes in every request, then answers them all in one batch.
				replies := &wire.Batch{}
				for len(replies.Envelopes) < c.calls {
					var in wire.Batch
					if err := s.RecvMsg(&in); err != nil {
						return err
					}
					for _, env := range in.Envelopes {
						if r := env.GetRequest(); r != nil {
							replies.Envelopes = append(replies.Envelopes, &wire.Envelope{Reply: &wire.Reply{CallId: r.CallId, Payload: []byte("ok")}})
						}
					}
				}
				if err := s.SendMsg(replies); err != nil {
					return err
				}
				<-s.Context().Done()
				return nil
			})

			a := start(t, "a", handler{}, nil)
			a.Connect("old", addr)
			waitReady(t, a, "old")
			assert.Equal(t, []string{strconv.Itoa(transport.MaxBatch)}, (<-announced).Get("zlink-max-batch"), "the link announces its bound")
			errs := make(chan error, c.calls)
			for range c.calls {
				go func() {
					r, err := a.Call(ctx, "old", &wire.Request{Op: wire.Op_OP_CALL})
					if err == nil && string(r.Payload) != "ok" {
						err = fmt.Errorf("reply %q", r.Payload)
					}
					errs <- err
				}()
			}
			for range c.calls {
				if err := <-errs; c.read {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, sdk.ErrOwnerUnavailable, "the stream that carried the call ended")
				}
			}
		})
	}
}
