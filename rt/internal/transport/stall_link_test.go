package transport_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// A handler hands its request to a goroutine of its own, which waits through capacity.AsReader
// with the request's context and gets there before the reader has returned from Handle. Once
// the reader has gone on, that wait no longer says that the stream is read: the reader then
// stops for good on the next request, and the caller closes the stream.
func TestAWaitOffTheReaderDoesNotHideAStoppedReader(t *testing.T) {
	const stall = 400 * time.Millisecond
	release := make(chan struct{})
	var n atomic.Int64
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		switch n.Add(1) {
		case 1:
			entered := make(chan struct{})
			go func() { // off the reader, with the request's context
				_ = capacity.AsReader(ctx, func(c context.Context) error {
					select {
					case <-entered:
					default:
						close(entered)
					}
					select {
					case <-release:
						return nil
					case <-c.Done():
						return c.Err()
					}
				})
				reply(&wire.Reply{})
			}()
			<-entered // the goroutine is scheduled before the reader returns: a race the mesh's pool can win
		case 2:
			<-release // the stream's reader stops here for good
			reply(&wire.Reply{})
		default:
			reply(&wire.Reply{})
		}
	}}, func(c *transport.Config) { c.StallTimeout = stall })
	t.Cleanup(func() { close(release) })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	first := make(chan error, 1)
	go func() { _, err := a.Call(context.Background(), "b", &wire.Request{}); first <- err }()
	require.Eventually(t, func() bool { return n.Load() == 1 }, 5*time.Second, time.Millisecond)
	const calls = 24
	ends := fillWindow(a, calls, 256<<10)
	select {
	case err := <-ends:
		require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	case <-time.After(20 * time.Second):
		t.Fatal("a peer whose reader stopped is kept: a wait off the reader, begun while the reader took a request in, says Reading for it")
	}
}

// slowProxy forwards TCP connections to target, the caller-to-server direction at rate bytes
// a second.
func slowProxy(t *testing.T, target string, rate int) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() { // caller -> server, throttled
				buf := make([]byte, 4096)
				for {
					n, err := in.Read(buf)
					if n > 0 {
						time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
						if _, werr := out.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_ = out.Close()
			})
			wg.Go(func() { _, _ = io.Copy(in, out); _ = in.Close() })
		}
	})
	return lis.Addr().String()
}

// A backlog of calls over a slow link to a peer that reads them as they come and answers once
// it has them all: the caller has no reply for several stall timeouts, but the peer says that
// it reads while its batches come, and the stream is kept. (Each batch, at most the largest
// message, crosses within the stall: one that does not is taken for silence.)
func TestABacklogOverASlowLinkIsKept(t *testing.T) {
	const stall, calls, payload = time.Second, 40, 16 << 10 // 640 KiB at 128 KiB/s: 5 s
	small := func(c *transport.Config) { c.StallTimeout, c.MaxMessageSize = stall, 64<<10 }
	all := make(chan struct{})
	var n atomic.Int64
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		if n.Add(1) == calls {
			close(all)
		}
		go func() {
			select {
			case <-all:
				reply(&wire.Reply{})
			case <-ctx.Done():
			}
		}()
	}}, small)
	a := start(t, "a", handler{}, small)
	a.Connect("b", slowProxy(t, b.Addr(), 128<<10))
	waitReady(t, a, "b")
	ends := fillWindow(a, calls, payload)
	for range calls {
		select {
		case err := <-ends:
			require.NoError(t, err, "after %d of %d calls were read", n.Load(), calls)
		case <-time.After(60 * time.Second):
			t.Fatal("no answer")
		}
	}
}

// A peer whose reader stopped, with one call open without a deadline, while the caller goes on
// making a call every half stall timeout with a deadline (a timer's, a health check's): each
// such call's request and cancel are taken in at once, far from the flow-control window, and
// are no sign that the peer reads. The stream is closed and the call fails.
func TestATrickleOfCallsToAPeerWhoseReaderStoppedDoesNotHideIt(t *testing.T) {
	const stall = 400 * time.Millisecond
	a := connectToStoppedReader(t, stall)
	done := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), "b", &wire.Request{})
		done <- err
	}()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(stall / 2):
			}
			cctx, cancel := context.WithTimeout(context.Background(), stall/4)
			_, _ = a.Call(cctx, "b", &wire.Request{Method: "tick"})
			cancel()
		}
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	case <-time.After(25 * stall):
		t.Fatalf("a call to a peer whose reader stopped still waits after %v", 25*stall)
	}
}
