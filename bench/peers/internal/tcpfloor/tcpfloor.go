// Package tcpfloor is the floor of the remote request/reply rows without gRPC: grpcfloor's
// design on a bare TCP connection, each message a frame of its length and its bytes. Its client
// is floorclient's, as grpcfloor's is, and writes each frame with one system call; its server
// answers each frame with the same bytes at once, written by the goroutine that read it. There
// is no HTTP/2 framing, no flow control, and none of gRPC's own writer and reader goroutines
// between the connection and the client's sender and receiver: what it reaches against
// grpcfloor in the same run is what gRPC's own work costs the remote calls on this machine.
package tcpfloor

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/zlink-go/zlink/bench/peers/internal/floorclient"
	"github.com/zlink-go/zlink/bench/peers/workload"
)

const (
	// headerSize is a frame's length, in front of its bytes.
	headerSize = 4
	// maxFrame bounds a frame's bytes, far above a frame of every caller's request: a length
	// past it is garbage, not a frame to allocate for.
	maxFrame = 1 << 20
	// bufferSize is each side's read buffer, as gRPC's default.
	bufferSize = 32 << 10
	// acceptRetry is the pause after an error of Accept other than the listener's close (out of
	// file descriptors, say) before it accepts again.
	acceptRetry = 5 * time.Millisecond
)

// readFrame reads one frame's bytes from r into buf's array when they fit, else into a new
// one.
func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	h, err := r.Peek(headerSize)
	if err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h)
	_, _ = r.Discard(headerSize) // peeked: it cannot fail
	if n > maxFrame {
		return nil, fmt.Errorf("a frame of %d bytes, over the limit of %d", n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Server is the echo: it answers each frame it reads with the same frame.
type Server struct {
	lis   net.Listener
	conns sync.WaitGroup

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
}

// Serve serves the echo on lis until Stop.
func Serve(lis net.Listener) *Server {
	return serve(lis, func(f []byte) [][]byte { return [][]byte{f} })
}

// serve serves on lis connections that answer each frame they read with the frames answer
// returns for it.
func serve(lis net.Listener, answer func([]byte) [][]byte) *Server {
	s := &Server{lis: lis, open: map[net.Conn]struct{}{}}
	s.conns.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) || s.stopped() {
					return
				}
				time.Sleep(acceptRetry)
				continue
			}
			if !s.track(c) {
				_ = c.Close()
				return
			}
			s.conns.Go(func() {
				defer s.untrack(c)
				echo(c, answer)
			})
		}
	})
	return s
}

func (s *Server) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track notes c as open, unless the server has stopped.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.open[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
	_ = c.Close()
}

// Stop closes the listener and every connection, and waits for their goroutines.
func (s *Server) Stop() {
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.lis.Close()
	s.conns.Wait()
}

// echo answers c's frames until it ends, each answer written on the goroutine that read it.
func echo(c net.Conn, answer func([]byte) [][]byte) {
	r := bufio.NewReaderSize(c, bufferSize)
	var in, out []byte
	for {
		f, err := readFrame(r, in)
		if err != nil {
			return // the client went, or sent garbage: nothing to answer
		}
		in = f
		for _, a := range answer(f) {
			out = binary.BigEndian.AppendUint32(out[:0], uint32(len(a)))
			out = append(out, a...)
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
}

// link is a client's bare TCP connection.
type link struct {
	conn   net.Conn
	r      *bufio.Reader
	header [headerSize]byte
	vec    [2][]byte   // the header and the frame of a Send
	bufs   net.Buffers // a slice of vec, which WriteTo consumes
	in     []byte      // the last frame read, whose array the next one reuses
}

// Send writes the frame's length and bytes with one system call (writev).
func (l *link) Send(f []byte) error {
	binary.BigEndian.PutUint32(l.header[:], uint32(len(f)))
	l.vec = [2][]byte{l.header[:], f}
	l.bufs = l.vec[:]
	_, err := l.bufs.WriteTo(l.conn)
	l.vec[1] = nil // the frame is the client's again
	return err
}

func (l *link) Recv() ([]byte, error) {
	f, err := readFrame(l.r, l.in)
	if err == nil {
		l.in = f
	}
	return f, err
}

func (l *link) Close() error {
	err := l.conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Dial connects to the echo at addr for callers callers, numbered from 0, within ctx; the
// connection then lives until the client's Close.
func Dial(ctx context.Context, addr string, callers int) (*floorclient.Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &link{conn: conn, r: bufio.NewReaderSize(conn, bufferSize)}
	return floorclient.New("tcpfloor", "connection", l, callers), nil
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
