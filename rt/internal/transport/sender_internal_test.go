package transport

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// TestASentMessageIsReusedOnlyIfNoOneHoldsIt: once the stream has sent a batch, the replies in
// it go back for reuse, since their handlers let go of them, and so do the requests queued once
// (CallOnce); a request queued by Call is left as it is, since its caller may still read it or
// send it again. Each is sent whole before it goes back.
func TestASentMessageIsReusedOnlyIfNoOneHoldsIt(t *testing.T) {
	var mu sync.Mutex
	var back []proto.Message
	defer func(req func(*wire.Request), reply func(*wire.Reply)) { recycleRequest, recycleReply = req, reply }(recycleRequest, recycleReply)
	recycleRequest = func(r *wire.Request) { mu.Lock(); back = append(back, r); mu.Unlock() }
	recycleReply = func(r *wire.Reply) { mu.Lock(); back = append(back, r); mu.Unlock() }

	for name, c := range map[string]struct {
		completion, once, reused bool
	}{
		"a reply":                  {completion: true, reused: true},
		"a request queued once":    {once: true, reused: true},
		"a request queued by Call": {},
	} {
		mu.Lock()
		back = nil
		mu.Unlock()
		sent := make(chan *wire.Batch)
		done := make(chan struct{})
		send := func(b *wire.Batch) error {
			sent <- proto.CloneOf(b) // what went out, read while the batch is still whole
			<-done
			return nil
		}
		s := newSender(send, 1<<20, nil, c.completion)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- s.run(ctx) }()

		var msg, whole proto.Message
		var q queued
		if c.completion {
			r := &wire.Reply{CallId: 1, Payload: []byte("out"), Owner: "n1"}
			msg, whole, q = r, proto.CloneOf(r), queuedReply(r)
		} else {
			r := &wire.Request{CallId: 2, Method: "M", Payload: []byte("in")}
			msg, whole, q = r, proto.CloneOf(r), queuedRequest(r)
			q.once = c.once
		}
		require.Positive(t, s.push(q))
		b := <-sent
		require.Len(t, b.Envelopes, 1)
		var out proto.Message = b.Envelopes[0].GetRequest()
		if c.completion {
			out = b.Envelopes[0].GetReply()
		}
		assert.True(t, proto.Equal(whole, out), "%s: it was sent whole: %v", name, out)
		mu.Lock()
		assert.Empty(t, back, "%s: nothing goes back while its batch is being sent", name)
		mu.Unlock()
		done <- struct{}{}
		// The next batch goes out after the first one's send returned and its messages went back.
		require.Positive(t, s.push(queuedCancel(&wire.Cancel{CallId: 3})))
		<-sent
		mu.Lock()
		if c.reused {
			if assert.Len(t, back, 1, "%s: it went back for reuse once", name) {
				assert.Same(t, msg, back[0], name)
			}
		} else {
			assert.Empty(t, back, "%s: it is its caller's", name)
		}
		mu.Unlock()
		cancel()
		done <- struct{}{}
		assert.ErrorIs(t, <-stopped, context.Canceled)
	}
}
