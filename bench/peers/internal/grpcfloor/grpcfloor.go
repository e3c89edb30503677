// Package grpcfloor is the floor of the remote request/reply rows: request/reply between two
// processes over one bare gRPC bidi stream, with nothing else. Its client is floorclient's, over
// the stream; its server answers each message with the same bytes at once, on the goroutine
// that read it. There is no runtime, no routing, no executor, no bound and no deadline: what it
// reaches is what the machine and gRPC allow.
package grpcfloor

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/zlink-go/zlink/bench/peers/internal/floorclient"
	"github.com/zlink-go/zlink/bench/peers/workload"
)

const (
	service = "zlink.bench.Floor"
	method  = "/" + service + "/Echo"
)

// frame is one message of the stream: a floorclient frame of requests or of their answers.
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
	return serve(lis, func(f []byte) [][]byte { return [][]byte{f} })
}

// serve serves on lis a stream that answers each frame it reads with the frames answer
// returns for it.
func serve(lis net.Listener, answer func([]byte) [][]byte) *grpc.Server {
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
					for _, a := range answer(f) {
						out := frame(a)
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

// link is a client's bare gRPC stream.
type link struct {
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
}

func (l *link) Send(f []byte) error {
	fr := frame(f)
	return l.stream.SendMsg(&fr)
}

func (l *link) Recv() ([]byte, error) {
	var f frame
	err := l.stream.RecvMsg(&f)
	return f, err
}

func (l *link) Close() error {
	l.cancel()
	return l.conn.Close()
}

// Dial opens the stream to the echo at addr for callers callers, numbered from 0, for at most
// ctx; the stream then lives until the client's Close.
func Dial(ctx context.Context, addr string, callers int) (*floorclient.Client, error) {
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
	return floorclient.New("grpcfloor", "stream", &link{conn: conn, stream: stream, cancel: cancel}, callers), nil
}

// Measure calls the echo at addr from callers callers for warmup and then duration, timed as
// a remote row's run is, and returns what the measured window reached.
func Measure(ctx context.Context, addr string, callers int, warmup, duration time.Duration) (workload.Result, error) {
	c, err := Dial(ctx, addr, callers)
	if err != nil {
		return workload.Result{}, err
	}
	return floorclient.Measure(ctx, c, warmup, duration)
}
