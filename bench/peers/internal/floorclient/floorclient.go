// Package floorclient is the client that the remote rows' floors share: callers queue their
// requests, one sender sends them and one receiver hands each answer to its caller. Only the
// link under it differs, a bare gRPC stream (grpcfloor) or a bare TCP connection (tcpfloor), so
// that what the two floors reach apart is what their links cost.
//
// Its design measured fastest on this machine kind: the sender, woken, yields once, so that the
// callers about to queue do so, and then sends everything queued as one frame. A frame is the
// requests one after another, each its caller and sequence number as uvarints and PayloadSize
// bytes; an echo answers a frame with the same bytes.
package floorclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

// PayloadSize is the bytes each request carries besides its caller and sequence number: the
// size of the remote rows' messages.
const PayloadSize = 32

// Link carries frames of requests to an echo and its answers back.
type Link interface {
	// Send sends one frame; the frame's array is the link's from then on.
	Send(f []byte) error
	// Recv returns the next frame, valid until the next Recv.
	Recv() ([]byte, error)
	// Close ends the link: a Send or Recv under way returns.
	Close() error
}

// Client calls an echo over one link from a fixed number of callers.
type Client struct {
	name  string // the floor's, which its errors begin with
	noun  string // what the link is, for its errors: "stream", "connection"
	link  Link
	done  chan struct{} // closed when the link has ended
	err   error         // why it ended; set before done is closed
	tasks sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	queue   []byte // the encoded requests waiting to be sent
	wake    chan struct{}
	replies []chan int64 // by caller
}

// New starts a client for callers callers, numbered from 0, over link; it lives until Close.
// name begins its errors, and noun says what the link is in them.
func New(name, noun string, link Link, callers int) *Client {
	c := &Client{name: name, noun: noun, link: link, done: make(chan struct{}),
		wake: make(chan struct{}, 1), replies: make([]chan int64, callers)}
	for i := range c.replies {
		c.replies[i] = make(chan int64, 1)
	}
	c.tasks.Go(c.send)
	c.tasks.Go(c.receive)
	return c
}

// Call sends seq from caller and returns what the echo answered. A caller has one call at a
// time, each with a higher seq than its last: the late answer to a call whose ctx ended is told
// by its lower seq and dropped by the caller's next call.
func (c *Client) Call(ctx context.Context, caller int, seq int64) (int64, error) {
	if caller < 0 || caller >= len(c.replies) {
		return 0, fmt.Errorf("%s: caller %d of %d", c.name, caller, len(c.replies))
	}
	if seq < 0 {
		return 0, fmt.Errorf("%s: sequence number %d is negative", c.name, seq)
	}
	c.mu.Lock()
	c.queue = binary.AppendUvarint(c.queue, uint64(caller))
	c.queue = binary.AppendUvarint(c.queue, uint64(seq))
	c.queue = append(c.queue, make([]byte, PayloadSize)...)
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

// Close ends the link and waits for the client's goroutines. It returns the error of the
// link's one close: when the receiver closed it first (the echo went, or answered garbage), that
// close's, which the links make nil for a connection already gone; the calls had the error.
func (c *Client) Close() error {
	err := c.end()
	c.tasks.Wait()
	return err
}

// end closes the link once; the first close's error is every caller's.
func (c *Client) end() error {
	c.closeOnce.Do(func() { c.closeErr = c.link.Close() })
	return c.closeErr
}

// send sends what callers queued: woken, it yields once, so that the callers about to queue
// do so, then sends everything queued as one frame.
func (c *Client) send() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		runtime.Gosched()
		for {
			// A new frame each time: a link may still hold a frame it has sent.
			c.mu.Lock()
			out := c.queue
			c.queue = make([]byte, 0, cap(out))
			c.mu.Unlock()
			if len(out) == 0 {
				break
			}
			if err := c.link.Send(out); err != nil {
				return // the receiver sees the link end
			}
		}
	}
}

// receive answers each caller whose request came back, until the link ends.
func (c *Client) receive() {
	defer close(c.done)
	for {
		f, err := c.link.Recv()
		if err == nil {
			err = c.answerAll(f)
		} else {
			err = fmt.Errorf("%s: the %s ended: %w", c.name, c.noun, err)
		}
		if err != nil {
			c.err = err
			_ = c.end()
			return
		}
	}
}

// answerAll answers the caller of each request in the frame f.
func (c *Client) answerAll(f []byte) error {
	for len(f) > 0 {
		caller, n := binary.Uvarint(f)
		if n <= 0 || caller >= uint64(len(c.replies)) {
			return fmt.Errorf("%s: the echo answered a request no caller sent", c.name)
		}
		seq, m := binary.Uvarint(f[n:])
		if m <= 0 || seq > math.MaxInt64 {
			return fmt.Errorf("%s: the echo answered a sequence number no caller sent", c.name)
		}
		if len(f) < n+m+PayloadSize {
			return fmt.Errorf("%s: the echo answered a request cut short", c.name)
		}
		f = f[n+m+PayloadSize:]
		answer(c.replies[caller], int64(seq))
	}
	return nil
}

// answer hands seq to a caller's channel, where an answer not taken yet can only be a stale
// one (its call ended first, or the echo answered twice): the newest answer replaces it.
func answer(ch chan int64, seq int64) {
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

// Measure calls the echo through c from every caller of c for warmup and then duration, timed
// as a remote row's run is, closes c and returns what the measured window reached.
func Measure(ctx context.Context, c *Client, warmup, duration time.Duration) (workload.Result, error) {
	res, err := workload.ForDuration(ctx, len(c.replies), warmup, duration, func(caller int, seq int64) error {
		got, err := c.Call(ctx, caller, seq)
		if err == nil && got != seq {
			err = fmt.Errorf("%s: answer %d to request %d", c.name, got, seq)
		}
		return err
	})
	return res, errors.Join(err, c.Close())
}
