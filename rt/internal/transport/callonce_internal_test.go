package transport

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

type echoHandler struct{}

func (echoHandler) Handle(_ context.Context, _ sdk.NodeID, req *wire.Request, reply Replier) {
	reply.Reply(&wire.Reply{Payload: req.Payload})
}

// TestCallOnceGivesBackItsRequestOnceSent: the request of a CallOnce goes back for reuse, once,
// after the batch that holds it was sent; Call's request stays its caller's.
func TestCallOnceGivesBackItsRequestOnceSent(t *testing.T) {
	var mu sync.Mutex
	var back []*wire.Request
	defer func(f func(*wire.Request)) { recycleRequest = f }(recycleRequest)
	recycleRequest = func(r *wire.Request) { mu.Lock(); back = append(back, r); mu.Unlock() }
	times := func(req *wire.Request) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range back {
			if r == req {
				n++
			}
		}
		return n
	}
	mk := func(node string) *Transport {
		tr, err := New(Config{Node: sdk.NodeID(node), Logger: slog.New(slog.DiscardHandler), DialTimeout: 2 * time.Second}, echoHandler{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	b, a := mk("b"), mk("a")
	a.Connect("b", b.Addr())
	for _, once := range []bool{true, false} {
		req := &wire.Request{Op: wire.Op_OP_CALL, Payload: []byte("x")}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		call := a.Call
		if once {
			call = a.CallOnce
		}
		r, err := call(ctx, "b", req)
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "x", string(r.Payload))
		l, ok := a.link("b")
		require.True(t, ok)
		l.mu.Lock()
		out := l.out
		l.mu.Unlock()
		// Idle: the batch's send returned, and what it gives back went back before sending was
		// cleared.
		require.Eventually(t, func() bool {
			out.mu.Lock()
			defer out.mu.Unlock()
			return !out.sending && len(out.queue) == 0
		}, 5*time.Second, time.Millisecond)
		if once {
			assert.Equal(t, 1, times(req), "CallOnce's request went back once")
		} else {
			assert.Zero(t, times(req), "Call's request is its caller's")
			assert.Equal(t, "x", string(req.Payload))
		}
	}
}
