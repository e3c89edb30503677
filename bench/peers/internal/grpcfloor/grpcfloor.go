// Package grpcfloor is the floor of the remote request/reply rows: request/reply between two
// processes over one bare gRPC bidi stream, with nothing else. Its client has the design that
// measured fastest on this machine kind: one sender per stream that yields once when woken and
// then sends every queued request in one message; its server answers each message with the
// same bytes at once, on the goroutine that read it. There is no runtime, no routing, no
// executor, no bound and no deadline: what it reaches is what the machine and gRPC allow.
package grpcfloor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

const (
	service = "zlink.bench.Floor"
	method  = "/" + service + "/Echo"
	// payloadSize is the bytes each request carries besides its caller and sequence number:
	// the size of the remote rows' messages.
	payloadSize = 32
)

// frame is one message of the stream: requests, each its caller and sequence number as
// uvarints and payloadSize bytes.
type frame []byte

// codec sends frames as they are.
type codec struct{}

func (codec) Name() string { return "grpcfloor" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("grpcfloor: cannot send a %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*f)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("grpcfloor: cannot read into a %T", v)
	}
	*f = data.Materialize()
	return nil
}

// Serve serves the echo on lis until the returned server is stopped.
func Serve(lis net.Listener) *grpc.Server {
	return serve(lis, func(f frame) []frame { return []frame{f} })
}

// serve serves on lis a stream that answers each frame it reads with the frames answer
// returns for it.
func serve(lis net.Listener, answer func(frame) []frame) *grpc.Server {
	s := grpc.NewServer(grpc.ForceServerCodecV2(codec{}))
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Echo", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				for {
					var f frame
					if err := stream.RecvMsg(&f); err != nil {
						return nil // the client went: nothing to answer
					}
					for _, out := range answer(f) {
						if err := stream.SendMsg(&out); err != nil {
							return err
						}
					}
				}
			},
		}},
	}, struct{}{})
	go func() { _ = s.Serve(lis) }()
	return s
}

// Client calls the echo at one address from a fixed number of callers.
type Client struct {
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream has ended
	err    error         // why it ended; set before done is closed
	tasks  sync.WaitGroup

	mu      sync.Mutex
	queue   frame // the encoded requests waiting to be sent
	wake    chan struct{}
	replies []chan int64 // by caller
}

// Dial opens the stream to the echo at addr for callers callers, numbered from 0, for at most
// ctx; the stream then lives until Close.
func Dial(ctx context.Context, addr string, callers int) (*Client, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	opening := context.AfterFunc(ctx, cancel)
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if !opening() && err == nil {
		err = ctx.Err() // ctx ended as the stream opened
	}
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, err
	}
	c := &Client{conn: conn, stream: stream, cancel: cancel, done: make(chan struct{}),
		wake: make(chan struct{}, 1), replies: make([]chan int64, callers)}
	for i := range c.replies {
		c.replies[i] = make(chan int64, 1)
	}
	c.tasks.Go(c.send)
	c.tasks.Go(c.receive)
	return c, nil
}

// Call sends seq from caller and returns what the echo answered. A caller has one call at a
// time; the late answer to a call whose ctx ended is dropped by its next call.
func (c *Client) Call(ctx context.Context, caller int, seq int64) (int64, error) {
	if caller < 0 || caller >= len(c.replies) {
		return 0, fmt.Errorf("grpcfloor: caller %d of %d", caller, len(c.replies))
	}
	c.mu.Lock()
	c.queue = binary.AppendUvarint(c.queue, uint64(caller))
	c.queue = binary.AppendUvarint(c.queue, uint64(seq))
	c.queue = append(c.queue, make([]byte, payloadSize)...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	for {
		select {
		case got := <-c.replies[caller]:
			if got < seq {
				continue // the answer to an earlier call of this caller that ended unanswered
			}
			return got, nil
		case <-c.done:
			return 0, c.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Close ends the stream and waits for its goroutines.
func (c *Client) Close() error {
	c.cancel()
	c.tasks.Wait()
	return c.conn.Close()
}

// send sends what callers queued: woken, it yields once, so that the callers about to queue
// do so, then sends everything queued in one message.
func (c *Client) send() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		runtime.Gosched()
		for {
			// A new frame each time: gRPC may write a sent message after SendMsg returns.
			c.mu.Lock()
			out := c.queue
			c.queue = make(frame, 0, cap(out))
			c.mu.Unlock()
			if len(out) == 0 {
				break
			}
			if err := c.stream.SendMsg(&out); err != nil {
				return // the receiver sees the stream end
			}
		}
	}
}

// answer hands seq to a caller's channel, where an answer not taken yet can only be a stale
// one (its call ended first, or the echo answered twice): the newest answer replaces it.
func (c *Client) answer(ch chan int64, seq int64) {
	for {
		select {
		case ch <- seq:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// receive answers each caller whose request came back, until the stream ends.
func (c *Client) receive() {
	defer close(c.done)
	for {
		var f frame
		if err := c.stream.RecvMsg(&f); err != nil {
			c.err = fmt.Errorf("grpcfloor: the stream ended: %w", err)
			return
		}
		for len(f) > 0 {
			caller, n := binary.Uvarint(f)
			if n <= 0 || caller >= uint64(len(c.replies)) {
				c.err = errors.New("grpcfloor: the echo answered a request no caller sent")
				c.cancel()
				return
			}
			seq, m := binary.Uvarint(f[n:])
			if m <= 0 || len(f) < n+m+payloadSize {
				c.err = errors.New("grpcfloor: the echo answered a request cut short")
				c.cancel()
				return
			}
			f = f[n+m+payloadSize:]
			c.answer(c.replies[caller], int64(seq))
		}
	}
}

// Measure calls the echo at addr from callers callers for warmup and then duration, timed as
// a remote row's run is, and returns what the measured window reached.
func Measure(ctx context.Context, addr string, callers int, warmup, duration time.Duration) (workload.Result, error) {
	c, err := Dial(ctx, addr, callers)
	if err != nil {
		return workload.Result{}, err
	}
	res, err := workload.ForDuration(ctx, callers, warmup, duration, func(caller int, seq int64) error {
		got, err := c.Call(ctx, caller, seq)
		if err == nil && got != seq {
			err = fmt.Errorf("grpcfloor: answer %d to request %d", got, seq)
		}
		return err
	})
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return res, err
}
