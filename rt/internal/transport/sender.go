package transport

import (
	"context"
	"runtime"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// sender batches envelopes onto one stream: everything queued when the stream is free goes in
// one Batch, up to the byte budget, so envelopes share sends under load and wait for nothing
// when idle.
type sender struct {
	send     func(*wire.Batch) error
	maxBytes int

	mu    sync.Mutex
	queue []queued      // its backing array is kept: a busy stream queues without allocating
	wake  chan struct{} // buffered 1
}

// queued is an envelope and its encoded size, measured by the pusher outside the lock.
type queued struct {
	env  *wire.Envelope
	size int
}

func newSender(send func(*wire.Batch) error, maxMessage int) *sender {
	return &sender{send: send, maxBytes: maxMessage + envelopeOverhead/2, wake: make(chan struct{}, 1)}
}

func (s *sender) push(e *wire.Envelope) {
	q := queued{env: e, size: proto.Size(e)}
	s.mu.Lock()
	s.queue = append(s.queue, q)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run sends batches until ctx ends or a send fails. One Batch is reused: the stream encodes a
// message before its send returns.
func (s *sender) run(ctx context.Context) error {
	batch := &wire.Batch{}
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
			s.take(batch)
			if len(batch.Envelopes) == 0 {
				break
			}
			err := s.send(batch)
			clear(batch.Envelopes)
			batch.Envelopes = batch.Envelopes[:0]
			if err != nil {
				return err
			}
		}
	}
}

// take moves the queued envelopes into b, up to the byte budget, and at least one if any is
// queued.
func (s *sender) take(b *wire.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, n := 0, 0
	for n < len(s.queue) {
		if n > 0 && size+s.queue[n].size > s.maxBytes {
			break
		}
		size += s.queue[n].size
		b.Envelopes = append(b.Envelopes, s.queue[n].env)
		n++
	}
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
}
