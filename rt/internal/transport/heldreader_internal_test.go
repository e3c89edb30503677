package transport

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// fnHandler is a Handler made of a func.
type fnHandler func(ctx context.Context, req *wire.Request, reply Replier)

func (f fnHandler) Handle(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply Replier) {
	f(ctx, req, reply)
}

// A request's waits on the reader give up only at two looks a window apart that both find no
// call ended for StallTimeout (a pause of the process gives the calls no chance to end). Here
// the first look past StallTimeout comes in the request's first wait, which then ends; its
// second wait starts at once, and the call that ran ends within a few ms: the request is not
// refused.
func TestASecondWaitRightAfterTheFirstLookDoesNotGiveUp(t *testing.T) {
	const stall = 400 * time.Millisecond // window: 100 ms
	running, releaseA := make(chan struct{}), make(chan struct{})
	h := fnHandler(func(ctx context.Context, req *wire.Request, reply Replier) {
		switch req.Method {
		case "long":
			close(running)
			go func() { <-releaseA; reply.Reply(&wire.Reply{}) }()
		case "two":
			call := ctx.(*callCtx)
			firstLook := func() bool {
				call.p.mu.Lock()
				defer call.p.mu.Unlock()
				return !call.held.first.IsZero()
			}
			err := capacity.AsReader(ctx, func(c context.Context) error {
				for !firstLook() {
					select {
					case <-c.Done():
						return c.Err()
					case <-time.After(time.Millisecond):
					}
				}
				return nil // the room came just after the first look past StallTimeout
			})
			if err == nil {
				err = capacity.AsReader(ctx, func(c context.Context) error {
					close(releaseA) // the call that ran ends now
					select {
					case <-c.Done():
						return c.Err()
					case <-time.After(20 * time.Millisecond):
						return nil
					}
				})
			}
			reply.Reply(&wire.Reply{Error: wire.EncodeError(err)})
		default:
			reply.Reply(&wire.Reply{})
		}
	})
	mk := func(node string, h Handler) *Transport {
		tr, err := New(Config{Node: sdk.NodeID(node), Logger: slog.New(slog.DiscardHandler), DialTimeout: 2 * time.Second, StallTimeout: stall}, h)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	b, a := mk("b", h), mk("a", fnHandler(func(_ context.Context, _ *wire.Request, r Replier) { r.Reply(&wire.Reply{}) }))
	a.Connect("b", b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	longEnded := make(chan error, 1)
	go func() { _, err := a.Call(ctx, "b", &wire.Request{Method: "long"}); longEnded <- err }()
	<-running
	r, err := a.Call(ctx, "b", &wire.Request{Method: "two"})
	require.NoError(t, err)
	require.NoError(t, wire.DecodeError(r.Error), "the second wait gave up at its first look, right after the first")
	require.NoError(t, <-longEnded)
}
