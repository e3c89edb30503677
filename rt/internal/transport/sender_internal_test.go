package transport

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// TestASentReplyIsRecycledAndARequestIsNot: once the stream has sent a batch, the replies in it
// are emptied for reuse, since their handlers let go of them; the requests of a caller's
// stream are left as they are, since their callers still hold them.
func TestASentReplyIsRecycledAndARequestIsNot(t *testing.T) {
	for _, completion := range []bool{true, false} {
		sent := make(chan *wire.Batch)
		done := make(chan struct{})
		send := func(b *wire.Batch) error {
			sent <- proto.CloneOf(b) // what went out, read while the batch is still whole
			<-done
			return nil
		}
		s := newSender(send, 1<<20, nil, completion)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- s.run(ctx) }()

		reply := &wire.Reply{CallId: 1, Payload: []byte("out"), Owner: "n1"}
		req := &wire.Request{CallId: 2, Method: "M", Payload: []byte("in")}
		queued := queuedReply(reply)
		if !completion {
			queued = queuedRequest(req)
		}
		require.Positive(t, s.push(queued))
		b := <-sent
		require.Len(t, b.Envelopes, 1)
		done <- struct{}{}
		// The next batch goes out after the first one's send returned and its replies went back.
		require.Positive(t, s.push(queuedCancel(&wire.Cancel{CallId: 3})))
		<-sent
		if completion {
			assert.True(t, proto.Equal(&wire.Reply{CallId: 1, Payload: []byte("out"), Owner: "n1"}, b.Envelopes[0].Reply), "it was sent whole")
			assert.True(t, proto.Equal(&wire.Reply{}, reply), "the reply was emptied for reuse: %v", reply)
		} else {
			assert.True(t, proto.Equal(&wire.Request{CallId: 2, Method: "M", Payload: []byte("in")}, req), "the request is its caller's: %v", req)
		}
		cancel()
		done <- struct{}{}
		assert.ErrorIs(t, <-stopped, context.Canceled)
	}
}
