package transport

import (
	"context"
	"runtime"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/wire"
)

// sender batches envelopes onto one stream: everything queued when the stream is free goes in
// one Batch, up to the byte budget, so envelopes share sends under load and wait for nothing
// when idle.
type sender struct {
	send     func(*wire.Batch) error
	maxBytes int

	mu    sync.Mutex
	queue []*wire.Envelope
	wake  chan struct{} // buffered 1
}

func newSender(send func(*wire.Batch) error, maxMessage int) *sender {
	return &sender{send: send, maxBytes: maxMessage + envelopeOverhead/2, wake: make(chan struct{}, 1)}
}

func (s *sender) push(e *wire.Envelope) {
	s.mu.Lock()
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run sends batches until ctx ends or a send fails.
func (s *sender) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake:
		}
		// Let the goroutines that are about to push do so: under load the batch grows, and an
		// idle stream loses only a yield.
		runtime.Gosched()
		for {
			batch := s.take()
			if len(batch.Envelopes) == 0 {
				break
			}
			if err := s.send(batch); err != nil {
				return err
			}
		}
	}
}

func (s *sender) take() *wire.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &wire.Batch{}
	size := 0
	n := 0
	for n < len(s.queue) {
		sz := proto.Size(s.queue[n])
		if n > 0 && size+sz > s.maxBytes {
			break
		}
		size += sz
		n++
	}
	b.Envelopes = append(b.Envelopes, s.queue[:n]...)
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	return b
}
