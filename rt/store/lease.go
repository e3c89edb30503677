package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/rt/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// LeaseOptions configures a node's owner lease.
type LeaseOptions struct {
	// TTL is the lease's time to live (default 10 s; etcd rounds it up to whole seconds and to
	// its own minimum).
	TTL time.Duration
	// KeepAliveInterval is the time between keep-alives (default TTL/3).
	KeepAliveInterval time.Duration
	// GuardMargin is subtracted from every acknowledged expiry to cover the drift between this
	// node's clock and the server's (default TTL/10).
	GuardMargin time.Duration
}

func (o LeaseOptions) withDefaults() LeaseOptions {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.KeepAliveInterval <= 0 {
		o.KeepAliveInterval = o.TTL / 3
	}
	if o.GuardMargin <= 0 {
		o.GuardMargin = o.TTL / 10
	}
	return o
}

// LeaseGuard answers whether this node's owner lease is still certainly valid now (DESIGN §4).
//
// An etcd lease is not mutual exclusion: the server measures the TTL on its own clock and may
// have expired the lease before the client learns of it. The guard therefore measures on the
// local monotonic clock from the *send* time of the last acknowledged keep-alive: it is valid
// until send time + granted TTL − margin, which is never later than the server's expiry.
//
// Valid is read on every admission, so it is one atomic load: a timer clears it when the
// deadline passes (a timer fires a little late, which the margin covers), and each extension
// sets it again.
type LeaseGuard struct {
	base  time.Time    // monotonic origin
	until atomic.Int64 // nanoseconds after base
	lost  atomic.Bool  // the server said the lease no longer exists
	valid atomic.Bool

	mu    sync.Mutex
	timer *time.Timer
}

func newLeaseGuard() *LeaseGuard { return &LeaseGuard{base: time.Now()} }

// Valid reports whether the owner lease is certainly valid now.
func (g *LeaseGuard) Valid() bool { return g.valid.Load() }

// ValidUntil returns the instant until which the lease is certainly valid, as known now.
func (g *LeaseGuard) ValidUntil() time.Time {
	if g.lost.Load() {
		return g.base
	}
	return g.base.Add(time.Duration(g.until.Load()))
}

// Lost reports whether the server said the lease no longer exists.
func (g *LeaseGuard) Lost() bool { return g.lost.Load() }

// extend records an acknowledged keep-alive sent at sent that granted ttl.
func (g *LeaseGuard) extend(sent time.Time, ttl, margin time.Duration) {
	next := int64(sent.Sub(g.base) + ttl - margin)
	for {
		cur := g.until.Load()
		if next <= cur || g.until.CompareAndSwap(cur, next) {
			break
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.check()
}

// check sets valid from the clock and arms the timer for the deadline; g.mu is held.
func (g *LeaseGuard) check() {
	left := time.Duration(g.until.Load() - int64(time.Since(g.base)))
	if g.lost.Load() || left <= 0 {
		g.valid.Store(false)
		return
	}
	g.valid.Store(true)
	if g.timer == nil {
		g.timer = time.AfterFunc(left, g.expire)
	} else {
		g.timer.Reset(left)
	}
}

// expire runs at the deadline: the lease stays valid only if an extension moved it.
func (g *LeaseGuard) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.check()
}

// lose marks the lease gone for good and stops the timer.
func (g *LeaseGuard) lose() {
	g.lost.Store(true)
	g.valid.Store(false)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}

// Registration is a node registered in the Location Store: its descriptor under nodes/<rid>,
// its owner lease and the keep-alive loop that feeds the lease guard.
type Registration struct {
	store *Etcd
	owner Owner
	guard *LeaseGuard
	opts  LeaseOptions

	mu   sync.Mutex
	desc *storepb.NodeDescriptor

	lostOnce sync.Once
	lostCh   chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	closed   atomic.Bool
}

// Register implements Store.
func (s *Etcd) Register(ctx context.Context, desc *storepb.NodeDescriptor, opts LeaseOptions) (*Registration, error) {
	rid := sdk.NodeID(desc.GetNodeId())
	if err := rid.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	desc = cloneNode(desc)
	desc.Mesh = s.mesh
	val, err := encodeNode(desc)
	if err != nil {
		return nil, err
	}
	guard := newLeaseGuard()
	sent := time.Now()
	ttlSeconds := int64((opts.TTL + time.Second - 1) / time.Second)
	grant, err := s.client.Grant(ctx, ttlSeconds)
	if err != nil {
		return nil, fmt.Errorf("store: register %s: grant lease: %w", rid, err)
	}
	guard.extend(sent, time.Duration(grant.TTL)*time.Second, opts.GuardMargin)
	owner := Owner{Node: rid, Lease: int64(grant.ID)}
	nodeKey := s.keys.node(rid)
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)).
		Then(
			clientv3.OpPut(nodeKey, val, clientv3.WithLease(grant.ID)),
			clientv3.OpPut(s.keys.incarnation(rid, owner.Lease), time.Now().UTC().Format(time.RFC3339Nano)),
		).Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: %s", ErrNodeIDInUse, rid)
	}
	if err != nil {
		guard.lose()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, _ = s.client.Revoke(rctx, grant.ID)
		cancel()
		return nil, fmt.Errorf("store: register %s: %w", rid, err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	r := &Registration{
		store: s, owner: owner, guard: guard, opts: opts, desc: desc,
		lostCh: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	s.local.Store(owner, r)
	go r.keepAlive(kctx)
	return r, nil
}

// Owner returns the node ID and owner lease of this registration.
func (r *Registration) Owner() Owner { return r.owner }

// Guard returns the lease guard.
func (r *Registration) Guard() *LeaseGuard { return r.guard }

// Lost is closed when the server reports that the owner lease no longer exists. The node then
// owns nothing and must stop serving its objects.
func (r *Registration) Lost() <-chan struct{} { return r.lostCh }

// Descriptor returns a copy of the published descriptor.
func (r *Registration) Descriptor() *storepb.NodeDescriptor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cloneNode(r.desc)
}

// Update publishes a new descriptor on the same lease. It fails with ErrFenced when the lease
// no longer holds the descriptor.
func (r *Registration) Update(ctx context.Context, desc *storepb.NodeDescriptor) error {
	desc = cloneNode(desc)
	desc.NodeId, desc.Mesh = string(r.owner.Node), r.store.mesh
	nodeKey := r.store.keys.node(r.owner.Node)
	val, err := encodeNode(desc)
	if err != nil {
		return err
	}
	resp, err := r.store.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(nodeKey), "=", r.owner.Lease)).
		Then(clientv3.OpPut(nodeKey, val, clientv3.WithLease(clientv3.LeaseID(r.owner.Lease)))).
		Commit()
	if err != nil {
		return fmt.Errorf("store: update node %s: %w", r.owner.Node, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("store: update node %s: %w", r.owner.Node, ErrFenced)
	}
	r.mu.Lock()
	r.desc = desc
	r.mu.Unlock()
	return nil
}

func (r *Registration) keepAlive(ctx context.Context) {
	defer close(r.done)
	lease := clientv3.LeaseID(r.owner.Lease)
	wait := r.opts.KeepAliveInterval
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, r.opts.KeepAliveInterval)
		resp, err := r.store.client.KeepAliveOnce(actx, lease)
		cancel()
		switch {
		case err == nil:
			r.guard.extend(sent, time.Duration(resp.TTL)*time.Second, r.opts.GuardMargin)
			wait = r.opts.KeepAliveInterval
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			r.guard.lose()
			r.lostOnce.Do(func() { close(r.lostCh) })
			return
		default:
			// Unreachable store: the guard runs out on its own; try again soon.
			wait = r.opts.KeepAliveInterval / 4
		}
	}
}

// Close stops the keep-alives and revokes the owner lease: the descriptor disappears, so the
// node's remaining records turn Unavailable until they are reclaimed. Safe to call more than
// once.
func (r *Registration) Close(ctx context.Context) error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.cancel()
	<-r.done
	r.guard.lose()
	r.store.local.Delete(r.owner)
	_, err := r.store.client.Revoke(ctx, clientv3.LeaseID(r.owner.Lease))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("store: deregister %s: %w", r.owner.Node, err)
	}
	return nil
}
