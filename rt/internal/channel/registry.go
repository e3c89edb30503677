// Package channel holds what one node registered on channels (DESIGN §6 Channels): its servers
// of ClientServer channels and its subscribers of Fanout channels, each with the bound on the
// work it holds, and the choice of a server among a channel's Ready servers.
//
// A server runs its handlers concurrently, as a gRPC service does: a channel server is a
// stateless service, not an object with a serial queue. Its calls in progress are bounded on
// count and bytes like a Spot's lane; beyond either a call is refused with ErrQueueFull. A
// subscriber runs its handler on a serial queue of its own, so that publications reach it in
// the order they arrived, bounded the same way.
package channel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zlink-go/zlink/sdk"
)

// MaxMemberships bounds a node's servers and subscribers, so that its registration, which
// writes them in one etcd transaction with the node, stays within etcd's operations per
// transaction (128 by default) with room for its publisher memberships.
const MaxMemberships = 64

// Defaults of a server's or a subscriber's bound.
const (
	DefaultMaxQueued      = 1024
	DefaultMaxQueuedBytes = 16 << 20
)

// Registry is what a node registered on channels. Registration happens before the node
// starts; afterwards the registry is only read.
type Registry struct {
	mu          sync.Mutex
	frozen      bool
	servers     map[string]*Server
	subscribers map[string]*Subscriber
	// work runs the goroutines of the node's channel work: servers' handlers, subscribers'
	// queues and the writes of publisher memberships.
	work workers
}

// RegisterServer implements sdk.ChannelRegistrar.
func (r *Registry) RegisterServer(desc *sdk.ChannelDesc, impl any, opts ...sdk.ChannelOption) error {
	o, err := validate(desc, sdk.ChannelClientServer, impl, opts)
	if err != nil {
		return err
	}
	if o.Manual {
		return fmt.Errorf("%w: channel %s: ManualSubscriber is an option of a subscriber, not of a server", sdk.ErrConfig, desc.Name)
	}
	weight := 1
	if o.WeightSet {
		weight = o.Weight
	}
	if weight < 0 || int64(weight) > sdk.MaxChannelWeight {
		return fmt.Errorf("%w: channel %s: server weight %d is outside 0..%d", sdk.ErrConfig, desc.Name, weight, sdk.MaxChannelWeight)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.free(desc.Name, "a server"); err != nil {
		return err
	}
	if r.servers == nil {
		r.servers = make(map[string]*Server)
	}
	srv := &Server{Desc: desc, Weight: weight, impl: impl}
	srv.gate.init(o)
	r.servers[desc.Name] = srv
	return nil
}

// Subscribe implements sdk.ChannelRegistrar.
func (r *Registry) Subscribe(desc *sdk.ChannelDesc, handler any, opts ...sdk.ChannelOption) error {
	o, err := validate(desc, sdk.ChannelFanout, handler, opts)
	if err != nil {
		return err
	}
	if o.WeightSet {
		return fmt.Errorf("%w: channel %s: Weight is an option of a server, not of a subscriber", sdk.ErrConfig, desc.Name)
	}
	if o.Manual && len(o.Publishers) == 0 {
		return fmt.Errorf("%w: channel %s: a manual subscriber names the publisher nodes it receives from", sdk.ErrConfig, desc.Name)
	}
	for _, p := range o.Publishers {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%w: channel %s: publisher: %v", sdk.ErrConfig, desc.Name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.free(desc.Name, "a subscriber"); err != nil {
		return err
	}
	if r.subscribers == nil {
		r.subscribers = make(map[string]*Subscriber)
	}
	r.subscribers[desc.Name] = newSubscriber(desc, handler, o, &r.work)
	return nil
}

// free says whether what (a server, a subscriber) may register on channel name: before the
// node starts, once per channel and node, one kind per name, and within MaxMemberships. r.mu
// is held.
func (r *Registry) free(name, what string) error {
	switch {
	case r.frozen:
		return fmt.Errorf("%w: channel %s: %s registered after the node started", sdk.ErrConfig, name, what)
	case r.servers[name] != nil || r.subscribers[name] != nil:
		return fmt.Errorf("%w: channel %s: the node registered a server or subscriber of it already: one per node, and a channel name has one kind", sdk.ErrConfig, name)
	case len(r.servers)+len(r.subscribers) >= MaxMemberships:
		return fmt.Errorf("%w: channel %s: a node serves and subscribes to at most %d channels", sdk.ErrConfig, name, MaxMemberships)
	}
	return nil
}

// validate checks what every registration shares and folds its options.
func validate(desc *sdk.ChannelDesc, kind sdk.ChannelKind, impl any, opts []sdk.ChannelOption) (sdk.ChannelOptions, error) {
	if desc == nil {
		return sdk.ChannelOptions{}, fmt.Errorf("%w: nil channel descriptor", sdk.ErrConfig)
	}
	if err := sdk.ValidateID("channel name", desc.Name); err != nil {
		return sdk.ChannelOptions{}, fmt.Errorf("%w: %v", sdk.ErrConfig, err)
	}
	if desc.Kind != kind {
		return sdk.ChannelOptions{}, fmt.Errorf("%w: channel %s is a %s channel, not %s", sdk.ErrConfig, desc.Name, desc.Kind, kind)
	}
	if impl == nil {
		return sdk.ChannelOptions{}, fmt.Errorf("%w: channel %s: nil handler", sdk.ErrConfig, desc.Name)
	}
	if len(desc.Methods) == 0 {
		return sdk.ChannelOptions{}, fmt.Errorf("%w: channel %s has no methods", sdk.ErrConfig, desc.Name)
	}
	var errs []error
	if err := sdk.ValidateMethods(desc.Methods); err != nil {
		errs = append(errs, fmt.Errorf("%w: channel %s: %w", sdk.ErrConfig, desc.Name, err))
	}
	for i := range desc.Methods {
		md := &desc.Methods[i]
		if kind == sdk.ChannelFanout && !md.OneWay {
			errs = append(errs, fmt.Errorf("%w: channel %s: method %s is not one-way; a Fanout channel's methods are", sdk.ErrConfig, desc.Name, md.Name))
		}
	}
	o := sdk.ApplyChannelOptions(opts)
	// An explicit ChannelQueue must bound both; only the unset one means the defaults.
	if (o.QueueSet && (o.MaxQueued <= 0 || o.MaxQueuedBytes <= 0)) ||
		o.MaxQueued < 0 || o.MaxQueuedBytes < 0 || (o.MaxQueued == 0) != (o.MaxQueuedBytes == 0) {
		errs = append(errs, fmt.Errorf("%w: channel %s: ChannelQueue(%d, %d): both bounds must be positive", sdk.ErrConfig, desc.Name, o.MaxQueued, o.MaxQueuedBytes))
	}
	return o, errors.Join(errs...)
}

// Freeze ends registration: the node started.
func (r *Registry) Freeze() {
	r.mu.Lock()
	r.frozen = true
	r.mu.Unlock()
}

// Len counts the servers and subscribers registered.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.servers) + len(r.subscribers)
}

// Server returns the server of channel name, or nil.
func (r *Registry) Server(name string) *Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.servers[name]
}

// Subscriber returns the subscriber of channel name, or nil.
func (r *Registry) Subscriber(name string) *Subscriber {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subscribers[name]
}

// Servers returns the servers by channel name.
func (r *Registry) Servers() []*Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Server, 0, len(r.servers))
	for _, s := range r.servers {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Server) int { return strings.Compare(a.Desc.Name, b.Desc.Name) })
	return out
}

// Subscribers returns the subscribers by channel name.
func (r *Registry) Subscribers() []*Subscriber {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Subscriber, 0, len(r.subscribers))
	for _, s := range r.subscribers {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Subscriber) int { return strings.Compare(a.Desc.Name, b.Desc.Name) })
	return out
}

// Go runs fn as channel work of the node, unless the registry is closed.
func (r *Registry) Go(fn func()) bool { return r.work.goRun(fn) }

// Enter counts a handler that runs on its caller's goroutine (a call of this node to its own
// server) as channel work of the node, so that Close waits for it as for the work Go runs. It
// reports false once Close began: the handler must not run then. Leave ends what Enter began.
func (r *Registry) Enter() bool { return r.work.enter() }

// Leave ends the work that Enter counted.
func (r *Registry) Leave() { r.work.leave() }

// Context ends when Close begins: channel work that waits on anything but a handler (a store
// write) ends with it, rather than holding Close to its deadline.
func (r *Registry) Context() context.Context { return r.work.context() }

// Close ends the node's channel work: no new work starts, the subscribers' queued
// publications are dropped and their handlers' contexts end, and Close waits for the work
// under way — servers' handlers, the subscribers' handlers — until ctx ends. A handler that
// outlives ctx is left to end by itself, and Close returns ctx's error.
func (r *Registry) Close(ctx context.Context) error {
	r.work.stop()
	for _, s := range r.Subscribers() {
		s.close()
	}
	return r.work.wait(ctx)
}

// workers are goroutines that end by themselves, started until stop.
type workers struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
	// running counts the work under way, which wg waits for: none once it is zero after stop.
	running atomic.Int64
	// ctx ends at stop; made at its first use, so that a zero Registry is ready.
	ctx    context.Context
	cancel context.CancelFunc
}

func (w *workers) context() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.contextLocked()
}

func (w *workers) contextLocked() context.Context {
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(context.Background())
	}
	return w.ctx
}

func (w *workers) goRun(fn func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.running.Add(1)
	w.wg.Add(1)
	go func() {
		defer w.leave()
		fn()
	}()
	return true
}

// enter counts work that runs on its caller's goroutine, unless stop was called: under w.mu,
// so that no count is added once wait may have begun.
func (w *workers) enter() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.running.Add(1)
	w.wg.Add(1)
	return true
}

// leave ends what enter counted.
func (w *workers) leave() {
	w.running.Add(-1)
	w.wg.Done()
}

func (w *workers) stop() {
	w.mu.Lock()
	w.stopped = true
	w.contextLocked()
	w.cancel()
	w.mu.Unlock()
}

// wait waits for the workers until ctx ends; stop was called, so none starts any more. A ctx
// that ended already is no error when no work is under way.
func (w *workers) wait(ctx context.Context) error {
	if w.running.Load() == 0 {
		return nil
	}
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("channel handlers still running: %w", ctx.Err())
	}
}

// MethodShapes lists desc's methods as "method(request)reply" ("method(request)" for one-way),
// for the membership records.
func MethodShapes(desc *sdk.ChannelDesc) []string {
	out := make([]string, 0, len(desc.Methods))
	for _, md := range desc.Methods {
		s := md.Name + "(" + string(md.NewRequest().ProtoReflect().Descriptor().FullName()) + ")"
		if !md.OneWay {
			s += string(md.NewReply().ProtoReflect().Descriptor().FullName())
		}
		out = append(out, s)
	}
	return out
}
