// Package tcpfloor is the floor of the remote request/reply rows without gRPC: grpcfloor's
// design on a bare TCP connection, each message a frame of its length and its bytes. Its
// client has one sender that yields once when woken and then writes every queued request in
// one frame with one system call; its server answers each frame with the same bytes at once,
// written by the goroutine that read it. There is no HTTP/2 framing, no flow control and no
// writer or reader goroutine between a connection and its user: what it reaches against
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
	"runtime"
	"sync"
	"time"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

const (
	// payloadSize is the bytes each request carries besides its caller and sequence number,
	// as grpcfloor's requests do.
	payloadSize = 32
	// headerSize is a frame's length, in front of its bytes.
	headerSize = 4
	// maxFrame bounds a frame's bytes: a length past it is garbage, not a frame to allocate.
	maxFrame = 16 << 20
	// bufferSize is each side's read buffer, as gRPC's default.
	bufferSize = 32 << 10
)

// readFrame reads one frame's bytes from r into buf's array when they fit, else into a new
// one.
func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxFrame {
		return nil, fmt.Errorf("tcpfloor: a frame of %d bytes, over the limit of %d", n, maxFrame)
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
				return // Stop closed the listener
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

// Client calls the echo at one address from a fixed number of callers.
type Client struct {
	conn  net.Conn
	done  chan struct{} // closed when the connection has ended
	err   error         // why it ended; set before done is closed
	tasks sync.WaitGroup

	mu      sync.Mutex
	queue   []byte // a frame's header room, then the encoded requests waiting to be sent
	wake    chan struct{}
	replies []chan int64 // by caller
}

// Dial connects to the echo at addr for callers callers, numbered from 0, within ctx; the
// connection then lives until Close.
func Dial(ctx context.Context, addr string, callers int) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, done: make(chan struct{}), queue: make([]byte, headerSize),
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
		return 0, fmt.Errorf("tcpfloor: caller %d of %d", caller, len(c.replies))
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

// Close ends the connection and waits for its goroutines. A connection that already ended
// (the server went, or answered garbage) closes without an error: its calls had the error.
func (c *Client) Close() error {
	err := c.conn.Close()
	c.tasks.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// send writes what callers queued: woken, it yields once, so that the callers about to queue
// do so, then writes everything queued as one frame.
func (c *Client) send() {
	spare := make([]byte, headerSize)
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		runtime.Gosched()
		for {
			c.mu.Lock()
			out := c.queue
			c.queue = spare[:headerSize]
			c.mu.Unlock()
			if len(out) == headerSize {
				spare = out
				break
			}
			binary.BigEndian.PutUint32(out, uint32(len(out)-headerSize))
			if _, err := c.conn.Write(out); err != nil {
				return // the receiver sees the connection end
			}
			spare = out // written: its array is free for the next frame
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

// receive answers each caller whose request came back, until the connection ends.
func (c *Client) receive() {
	defer close(c.done)
	r := bufio.NewReaderSize(c.conn, bufferSize)
	var buf []byte
	for {
		f, err := readFrame(r, buf)
		if err != nil {
			c.err = fmt.Errorf("tcpfloor: the connection ended: %w", err)
			_ = c.conn.Close()
			return
		}
		buf = f
		if err := c.answerAll(f); err != nil {
			c.err = err
			_ = c.conn.Close()
			return
		}
	}
}

// answerAll answers the caller of each request in the frame f.
func (c *Client) answerAll(f []byte) error {
	for len(f) > 0 {
		caller, n := binary.Uvarint(f)
		if n <= 0 || caller >= uint64(len(c.replies)) {
			return errors.New("tcpfloor: the echo answered a request no caller sent")
		}
		seq, m := binary.Uvarint(f[n:])
		if m <= 0 || len(f) < n+m+payloadSize {
			return errors.New("tcpfloor: the echo answered a request cut short")
		}
		f = f[n+m+payloadSize:]
		c.answer(c.replies[caller], int64(seq))
	}
	return nil
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
			err = fmt.Errorf("tcpfloor: answer %d to request %d", got, seq)
		}
		return err
	})
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return res, err
}
