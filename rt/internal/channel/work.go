package channel

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// gate bounds the messages a server or a subscriber holds, on count and on bytes (payload +
// exec.ItemOverhead each, as in a Spot's lanes); whichever is reached first refuses.
type gate struct {
	max, maxBytes int64
	n, bytes      atomic.Int64
}

func (g *gate) init(o sdk.ChannelOptions) {
	g.max, g.maxBytes = DefaultMaxQueued, DefaultMaxQueuedBytes
	if o.MaxQueued > 0 {
		g.max, g.maxBytes = int64(o.MaxQueued), o.MaxQueuedBytes
	}
}

// take reserves room for one message of size payload bytes, or says why there is none. The
// first message is always taken, whatever its size, so that a message larger than the byte
// bound is not refused for ever.
// The refusal names channel.method.
func (g *gate) take(size int64, channel, method string) error {
	cost := size + exec.ItemOverhead
	if n := g.n.Add(1); n > g.max {
		g.n.Add(-1)
		return &sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisCount, Limit: g.max, Queued: n - 1, Requested: 1, Where: "channel " + channel + "." + method}
	}
	if b := g.bytes.Add(cost); b > g.maxBytes && b != cost {
		g.bytes.Add(-cost)
		g.n.Add(-1)
		return &sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisBytes, Limit: g.maxBytes, Queued: b - cost, Requested: cost, Where: "channel " + channel + "." + method}
	}
	return nil
}

func (g *gate) give(size int64) {
	g.bytes.Add(-(size + exec.ItemOverhead))
	g.n.Add(-1)
}

// Held reports the messages held now and their bytes.
func (g *gate) Held() (n, bytes int64) { return g.n.Load(), g.bytes.Load() }

// Server is this node's server of one ClientServer channel.
type Server struct {
	Desc *sdk.ChannelDesc
	// Weight is its share of the channel's calls among the servers' weights.
	Weight int
	impl   any
	gate   gate
}

// Admit reserves room for one call of size payload bytes to method; Done gives it back once
// the call ended. A full server refuses with a *sdk.QueueFullError.
func (s *Server) Admit(method string, size int) error {
	return s.gate.take(int64(size), s.Desc.Name, method)
}

// Done gives back what Admit reserved.
func (s *Server) Done(size int) { s.gate.give(int64(size)) }

// Invoke runs md's handler; a handler's error reaches the caller as an *sdk.AppError and a
// panic as sdk.ErrHandlerPanicked.
func (s *Server) Invoke(ctx context.Context, log *slog.Logger, md *sdk.MethodDesc, req proto.Message) (reply proto.Message, err error) {
	return invoke(ctx, log, s.Desc, s.impl, md, req)
}

func invoke(ctx context.Context, log *slog.Logger, desc *sdk.ChannelDesc, impl any, md *sdk.MethodDesc, req proto.Message) (reply proto.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("channel handler panicked", "channel", desc.Name, "method", md.Name, "panic", v, "stack", string(debug.Stack()))
			reply, err = nil, fmt.Errorf("%w: channel %s.%s: %v", sdk.ErrHandlerPanicked, desc.Name, md.Name, v)
		}
	}()
	reply, err = md.Invoke(impl, ctx, req)
	if err != nil {
		err = wire.HandlerError(err)
	}
	return reply, err
}

// Subscriber is this node's subscriber of one Fanout channel. Its handler runs on a serial
// queue: one publication at a time, in the order they were delivered.
type Subscriber struct {
	Desc *sdk.ChannelDesc
	// Manual marks a manual subscriber, which receives only from Publishers.
	Manual     bool
	Publishers []sdk.NodeID
	handler    any
	gate       gate

	mu      sync.Mutex
	queue   []publication
	running bool
	closed  bool
	log     *slog.Logger
	work    *workers
	ctx     context.Context
	cancel  context.CancelFunc
	handled atomic.Int64
}

type publication struct {
	md   *sdk.MethodDesc
	msg  proto.Message
	size int64
	from sdk.NodeID
	done func()
}

func newSubscriber(desc *sdk.ChannelDesc, handler any, o sdk.ChannelOptions, work *workers) *Subscriber {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{
		Desc: desc, Manual: o.Manual, Publishers: o.Publishers, handler: handler,
		log: slog.Default(), work: work, ctx: ctx, cancel: cancel,
	}
	s.gate.init(o)
	return s
}

// SetLogger sets the logger of the handler's errors.
func (s *Subscriber) SetLogger(log *slog.Logger) {
	s.mu.Lock()
	s.log = log
	s.mu.Unlock()
}

// Accepts reports whether the subscriber takes publications of node from.
func (s *Subscriber) Accepts(from sdk.NodeID) bool {
	if !s.Manual {
		return true
	}
	for _, p := range s.Publishers {
		if p == from {
			return true
		}
	}
	return false
}

// Deliver queues the publication msg of node from for the handler; done, when not nil, runs
// once the handler is finished with it (or it was dropped at Close). It fails with a
// *sdk.QueueFullError when the queue is full and with sdk.ErrClosed after Close; done does
// not run then.
func (s *Subscriber) Deliver(from sdk.NodeID, md *sdk.MethodDesc, msg proto.Message, size int, done func()) error {
	if err := s.gate.take(int64(size), s.Desc.Name, md.Name); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.gate.give(int64(size))
		return fmt.Errorf("%w: the subscriber of channel %s is closed", sdk.ErrClosed, s.Desc.Name)
	}
	if !s.running && !s.work.goRun(s.run) {
		s.mu.Unlock()
		s.gate.give(int64(size))
		return fmt.Errorf("%w: the subscriber of channel %s is closed", sdk.ErrClosed, s.Desc.Name)
	}
	s.running = true
	s.queue = append(s.queue, publication{md: md, msg: msg, size: int64(size), from: from, done: done})
	s.mu.Unlock()
	return nil
}

// run hands the queued publications to the handler one at a time, until the queue is empty.
func (s *Subscriber) run() {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.closed {
			s.running = false
			s.mu.Unlock()
			return
		}
		p := s.queue[0]
		s.queue[0] = publication{}
		s.queue = s.queue[1:]
		if len(s.queue) == 0 {
			s.queue = nil // let a grown backing array go
		}
		log := s.log
		s.mu.Unlock()
		if _, err := invoke(s.ctx, log, s.Desc, s.handler, p.md, p.msg); err != nil {
			log.Warn("a subscriber's handler failed; the publication is not delivered again", "channel", s.Desc.Name, "method", p.md.Name, "publisher", string(p.from), "err", err)
		}
		s.handled.Add(1)
		s.finish(p)
	}
}

func (s *Subscriber) finish(p publication) {
	s.gate.give(p.size)
	if p.done != nil {
		p.done()
	}
}

// Handled counts the publications the handler finished.
func (s *Subscriber) Handled() int64 { return s.handled.Load() }

// Held reports the publications queued or running and their bytes.
func (s *Subscriber) Held() (n, bytes int64) { return s.gate.Held() }

// close drops what is queued and ends the handler's context; the registry waits for the run
// in progress.
func (s *Subscriber) close() {
	s.mu.Lock()
	s.closed = true
	dropped := s.queue
	s.queue = nil
	s.mu.Unlock()
	s.cancel()
	for _, p := range dropped {
		s.finish(p)
	}
}
