package transport_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// moreThanABatch is more messages than two of a node's batches hold: a peer that bounds its
// batches by bytes alone sends that many small ones in one batch.
const moreThanABatch = 2*transport.MaxBatch + 1

// cancelBatch is one batch that cancels the calls ids.
func cancelBatch(ids ...uint64) *wire.Batch {
	b := &wire.Batch{}
	for _, id := range ids {
		b.Envelopes = append(b.Envelopes, &wire.Envelope{Cancel: &wire.Cancel{CallId: id}})
	}
	return b
}

// TestE1_APeerThatAnnouncesNoBatchBoundMayCancelManyCallsInOneBatch: a peer of a release that
// bounds its batches by bytes alone announces no bound; with thousands of its calls in flight
// whose contexts end together it cancels them all in one batch. Its stream, and the calls on
// it, live on.
func TestE1_APeerThatAnnouncesNoBatchBoundMayCancelManyCallsInOneBatch(t *testing.T) {
	const calls = moreThanABatch
	var started, cancelled atomic.Int64
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.CallId > calls {
			reply(&wire.Reply{Payload: []byte("ok")})
			return
		}
		started.Add(1)
		go func() {
			<-ctx.Done()
			cancelled.Add(1)
			reply(&wire.Reply{})
		}()
	}}, nil)
	s := rawStream(t, b.Addr(), "a") // no zlink-max-batch header
	hdr, err := s.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{strconv.Itoa(transport.MaxBatch)}, hdr.Get("zlink-max-batch"), "the server announces its bound")
	var reqs []*wire.Request
	ids := make([]uint64, 0, calls)
	for i := range uint64(calls) {
		reqs = append(reqs, &wire.Request{CallId: i + 1, Op: wire.Op_OP_CALL})
		ids = append(ids, i+1)
		if len(reqs) == 2000 {
			sendRequests(t, s, reqs...)
			reqs = nil
		}
	}
	sendRequests(t, s, reqs...)
	require.Eventually(t, func() bool { return started.Load() == calls }, 10*time.Second, time.Millisecond)

	require.NoError(t, s.SendMsg(cancelBatch(ids...)))
	sendRequests(t, s, &wire.Request{CallId: calls + 1, Op: wire.Op_OP_CALL})
	for {
		var batch wire.Batch
		require.NoError(t, s.RecvMsg(&batch), "the stream ended, and every call on it with it")
		for _, env := range batch.Envelopes {
			if r := env.GetReply(); r != nil && r.CallId == calls+1 {
				assert.Equal(t, "ok", string(r.Payload))
				require.Eventually(t, func() bool { return cancelled.Load() == calls }, 10*time.Second, time.Millisecond,
					"every cancel was read")
				return
			}
		}
	}
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
	for range 10 {
		var batch wire.Batch
		if err := s.RecvMsg(&batch); err != nil {
			assert.ErrorContains(t, err, "more than the 2 messages its sender announced")
			return
		}
	}
	require.Fail(t, "the stream lives on")
}

// TestE1_AServerThatAnnouncesNoBatchBoundMayAnswerManyCallsInOneBatch: a node of a release
// that bounds its batches by bytes alone announces no bound, and answers thousands of small
// calls in one batch. This node's link reads it all: every call completes and the link stays
// Ready.
func TestE1_AServerThatAnnouncesNoBatchBoundMayAnswerManyCallsInOneBatch(t *testing.T) {
	const calls = moreThanABatch
	announced := make(chan metadata.MD, 1)
	addr := fakePeer(t, func(s grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		announced <- md
		if err := s.SendHeader(metadata.Pairs("zlink-max-message", strconv.Itoa(transport.DefaultMaxMessageSize))); err != nil {
			return err
		}
		// Takes in every request, then answers them all in one batch.
		replies := &wire.Batch{}
		for len(replies.Envelopes) < calls {
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
	errs := make(chan error, calls)
	for range calls {
		go func() {
			r, err := a.Call(ctx, "old", &wire.Request{Op: wire.Op_OP_CALL})
			if err == nil && string(r.Payload) != "ok" {
				err = fmt.Errorf("reply %q", r.Payload)
			}
			errs <- err
		}()
	}
	for range calls {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, sdk.PeerStateReady, a.PeerState("old"))
}
