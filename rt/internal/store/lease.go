package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
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
// Valid reads the clock itself, so it is right at once after the process was paused (SIGSTOP,
// a frozen VM, a long GC stall): a flag cleared by a timer would still say valid until the
// timer's goroutine got to run. Once the deadline has passed the guard never becomes valid
// again: the registration treats it as the end of the lease.
type LeaseGuard struct {
	base  time.Time    // monotonic origin
	until atomic.Int64 // nanoseconds after base
	lost  atomic.Bool  // the lease ended or can no longer be trusted
}

func newLeaseGuard() *LeaseGuard { return &LeaseGuard{base: time.Now()} }

// Valid reports whether the owner lease is certainly valid now.
func (g *LeaseGuard) Valid() bool {
	_, ok := g.ValidNow()
	return ok
}

// ValidNow reads the clock and reports whether the owner lease is certainly valid at that
// reading, which it returns: time.Now's. The guard measures on its monotonic part; its wall
// part is the wall clock's at that instant, so that a turn's start orders rightly with the
// process's other readings of the wall clock, and with other processes' on the host, even
// when the wall clock was set since the guard began. (The guard's beginning advanced by the
// monotonic time since would spare one read of the wall clock, but after such a setting its
// wall part would be off the wall clock by the setting, behind or ahead, for as long as the
// guard lasts.)
func (g *LeaseGuard) ValidNow() (time.Time, bool) {
	now := time.Now()
	since := now.Sub(g.base)
	return now, !g.lost.Load() && since >= 0 && int64(since) < g.until.Load()
}

// ValidAt reports whether the owner lease was certainly valid at now, a reading of the clock
// that carries its monotonic part (time.Now's). A reading from before the guard began is
// refused: the guard knows nothing of that instant.
func (g *LeaseGuard) ValidAt(now time.Time) bool {
	since := now.Sub(g.base)
	return !g.lost.Load() && since >= 0 && int64(since) < g.until.Load()
}

// ValidUntil returns the instant until which the lease is certainly valid, as known now.
func (g *LeaseGuard) ValidUntil() time.Time {
	if g.lost.Load() {
		return g.base
	}
	return g.base.Add(time.Duration(g.until.Load()))
}

// left is the time until the deadline, as known now; ≤ 0 once it has passed.
func (g *LeaseGuard) left() time.Duration {
	if g.lost.Load() {
		return 0
	}
	return time.Duration(g.until.Load() - int64(time.Since(g.base)))
}

// Lost reports whether the lease ended or its guard ran out.
func (g *LeaseGuard) Lost() bool { return g.lost.Load() }

// extend records an acknowledged keep-alive sent at sent that granted ttl. An extension that
// arrives after the deadline has passed does not revive the guard: the lease may have expired
// on the server meanwhile. (One that races the deadline may; its new deadline is still sound,
// since the acknowledged keep-alive was sent before it.)
func (g *LeaseGuard) extend(sent time.Time, ttl, margin time.Duration) {
	if g.left() <= 0 && g.until.Load() != 0 {
		return
	}
	next := int64(sent.Sub(g.base) + ttl - margin)
	for {
		cur := g.until.Load()
		if next <= cur || g.until.CompareAndSwap(cur, next) {
			return
		}
	}
}

// lose marks the lease gone for good.
func (g *LeaseGuard) lose() { g.lost.Store(true) }

// Lease-loss causes, reported by Registration.Cause.
var (
	// ErrLeaseNotFound: etcd answered that the owner lease no longer exists.
	ErrLeaseNotFound = errors.New("store: the owner lease no longer exists")
	// ErrLeaseGuardExpired: no keep-alive was acknowledged in time, so the lease may have
	// expired on the server; the node stops acting as the owner of anything.
	ErrLeaseGuardExpired = errors.New("store: the owner lease guard ran out before a keep-alive was acknowledged")
)

// Registration is a node registered in the Location Store: its descriptor under nodes/<rid>,
// its owner lease and the keep-alive loop that feeds the lease guard.
type Registration struct {
	store *Etcd
	owner Owner
	guard *LeaseGuard
	opts  LeaseOptions
	// revision is the store revision the registration was written at: it grows with every
	// registration of any node.
	revision int64

	mu       sync.Mutex
	desc     *storepb.NodeDescriptor
	channels []ChannelMembership
	// joining counts the JoinChannel calls under way per membership the registration does not
	// hold yet: each such membership holds a slot of the bound until its join ends.
	joining map[membershipKey]int

	lostOnce sync.Once
	lostCh   chan struct{}
	cause    error // set before lostCh closes
	cancel   context.CancelFunc
	done     chan struct{}
	closed   atomic.Bool
	held     atomic.Pointer[chan struct{}] // see HoldKeepAlive
}

// Register implements Store.
// channels are the node's channel memberships, written on the lease in the same transaction.
func (s *Etcd) Register(ctx context.Context, desc *storepb.NodeDescriptor, opts LeaseOptions, channels ...ChannelMembership) (*Registration, error) {
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
		return nil, fmt.Errorf("store: register %s: grant lease: %w", rid, unavailable(err))
	}
	leaseTTL := time.Duration(grant.TTL) * time.Second
	s.granted.add(int64(grant.ID), leaseTTL)
	guard.extend(sent, leaseTTL, opts.GuardMargin)
	owner := Owner{Node: rid, Lease: int64(grant.ID)}
	nodeKey := s.keys.node(rid)
	ops, err := s.channelOps(rid, owner.Lease, channels)
	if err != nil {
		guard.lose()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = s.revokeOwn(rctx, owner.Lease)
		cancel()
		return nil, err
	}
	ops = append(ops,
		clientv3.OpPut(nodeKey, val, clientv3.WithLease(grant.ID)),
		clientv3.OpPut(s.keys.incarnation(rid, owner.Lease), time.Now().UTC().Format(time.RFC3339Nano)))
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)).
		Then(ops...).Else(clientv3.OpGet(nodeKey)).Commit()
	if err == nil && !resp.Succeeded {
		err = s.idInUse(ctx, rid, resp)
	}
	if err != nil {
		guard.lose()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = s.revokeOwn(rctx, owner.Lease)
		cancel()
		return nil, fmt.Errorf("store: register %s: %w", rid, unavailable(err))
	}
	kctx, cancel := context.WithCancel(context.Background())
	r := &Registration{
		store: s, owner: owner, guard: guard, opts: opts, desc: desc, revision: resp.Header.Revision,
		channels: append([]ChannelMembership(nil), channels...),
		lostCh:   make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	s.local.Store(owner, r)
	s.granted.settle(owner.Lease)
	go r.keepAlive(kctx)
	return r, nil
}

// Owner returns the node ID and owner lease of this registration.
func (r *Registration) Owner() Owner { return r.owner }

// Revision is the store revision the registration was written at: a later registration, of
// this node or another, has a larger one.
func (r *Registration) Revision() int64 { return r.revision }

// Guard returns the lease guard.
func (r *Registration) Guard() *LeaseGuard { return r.guard }

// Lost is closed when the owner lease ended: the server reported that it no longer exists, or
// the lease guard ran out before a keep-alive was acknowledged (after a pause of the process or
// a partition from etcd). The node then owns nothing and must stop serving its objects; the
// registration is over and a new one is needed to own objects again.
func (r *Registration) Lost() <-chan struct{} { return r.lostCh }

// Cause says why Lost closed: ErrLeaseNotFound or ErrLeaseGuardExpired; nil before.
func (r *Registration) Cause() error {
	select {
	case <-r.lostCh:
		return r.cause
	default:
		return nil
	}
}

// end marks the lease lost with cause.
func (r *Registration) end(cause error) {
	r.guard.lose()
	r.lostOnce.Do(func() {
		r.cause = cause
		close(r.lostCh)
	})
}

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
		return fmt.Errorf("store: update node %s: %w", r.owner.Node, unavailable(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("store: update node %s: %w", r.owner.Node, ErrFenced)
	}
	r.mu.Lock()
	r.desc = desc
	r.mu.Unlock()
	return nil
}

// keepAlive extends the lease every KeepAliveInterval, and ends the registration when the
// server says the lease is gone or when the guard's deadline passes first.
func (r *Registration) keepAlive(ctx context.Context) {
	defer close(r.done)
	lease := clientv3.LeaseID(r.owner.Lease)
	wait := r.opts.KeepAliveInterval
	for {
		if !r.waitWhileHeld(ctx) {
			return
		}
		left := r.guard.left()
		if left <= 0 {
			r.end(ErrLeaseGuardExpired)
			return
		}
		timer := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if !r.waitWhileHeld(ctx) {
			return
		}
		if !r.guard.Valid() {
			r.end(ErrLeaseGuardExpired)
			return
		}
		sent := time.Now()
		// An attempt never outlives the guard: its end is noticed at the deadline.
		actx, cancel := context.WithTimeout(ctx, min(r.opts.KeepAliveInterval, max(r.guard.left(), time.Millisecond)))
		resp, err := r.store.client.KeepAliveOnce(actx, lease)
		cancel()
		switch {
		case err == nil:
			r.guard.extend(sent, time.Duration(resp.TTL)*time.Second, r.opts.GuardMargin)
			wait = r.opts.KeepAliveInterval
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			r.end(ErrLeaseNotFound)
			return
		case ctx.Err() != nil:
			return
		default:
			// Unreachable store: try again soon; the guard runs out on its own.
			wait = r.opts.KeepAliveInterval / 4
		}
	}
}

// HoldKeepAlive holds the keep-alive loop until release is called: no keep-alive is sent, and
// the end of the guard is not noticed, as in a process paused past the guard's deadline whose
// keep-alive goroutine has not run yet. The guard still runs out on the clock. It exists for
// fault tests; holds must not overlap (a second replaces the first).
func (r *Registration) HoldKeepAlive() (release func()) {
	held := make(chan struct{})
	r.held.Store(&held)
	return sync.OnceFunc(func() {
		r.held.Store(nil)
		close(held)
	})
}

// waitWhileHeld waits for a hold of the keep-alive loop to be released, and reports false if
// ctx ended first.
func (r *Registration) waitWhileHeld(ctx context.Context) bool {
	h := r.held.Load()
	if h == nil {
		return true
	}
	select {
	case <-*h:
		return true
	case <-ctx.Done():
		return false
	}
}

// Revoke revokes the owner lease, whether or not the registration was closed: the node's ID is
// free at once instead of at the lease's expiry. A lease that is already gone is no error.
func (r *Registration) Revoke(ctx context.Context) error {
	if err := r.store.revokeOwn(ctx, r.owner.Lease); err != nil {
		return fmt.Errorf("store: revoke the lease of %s: %w", r.owner.Node, unavailable(err))
	}
	return nil
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
	if err := r.store.revokeOwn(ctx, r.owner.Lease); err != nil {
		return fmt.Errorf("store: deregister %s: %w", r.owner.Node, err)
	}
	return nil
}

// idInUse says who holds the node ID rid, from the node key that a registration's failed
// transaction resp read: a registration of this process, live or under way; a lease that this
// process was granted and lost track of, as when a registration's answer was lost and its
// revoke failed (revoked now, so that the next try takes the ID); or another process
// (*NodeIDInUseError).
func (s *Etcd) idInUse(ctx context.Context, rid sdk.NodeID, resp *clientv3.TxnResponse) error {
	var kvs []*mvccpb.KeyValue
	if len(resp.Responses) > 0 {
		kvs = resp.Responses[0].GetResponseRange().GetKvs()
	}
	if len(kvs) == 0 {
		return fmt.Errorf("%w: %s, by a registration that ended just now", ErrNodeIDInUse, rid)
	}
	holder := kvs[0].Lease
	if _, live := s.local.Load(Owner{Node: rid, Lease: holder}); live {
		return fmt.Errorf("%w: %s, by a live registration of this process", ErrNodeIDInUse, rid)
	}
	switch s.granted.state(holder) {
	case leaseRegistering:
		return fmt.Errorf("%w: %s, by a registration of this process under way", ErrNodeIDInUse, rid)
	case leaseSettled, leaseLeft: // closed, or closing: its revoke failed or is about to run
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := s.revokeOwn(rctx, holder); err != nil {
			return fmt.Errorf("%w: %s, by an earlier lease of this process, not revoked yet: %w", ErrNodeIDInUse, rid, unavailable(err))
		}
		return fmt.Errorf("%w: %s, by an earlier lease of this process, revoked now", ErrNodeIDInUse, rid)
	}
	inUse := &NodeIDInUseError{Node: rid, Lease: holder}
	if d, err := decodeNode(kvs[0].Value); err == nil {
		inUse.Endpoint = d.GetEndpoint()
	}
	if ttl, err := s.client.TimeToLive(ctx, clientv3.LeaseID(holder)); err == nil && ttl.GrantedTTL > 0 {
		inUse.TTL = time.Duration(ttl.GrantedTTL) * time.Second
	}
	return inUse
}

// revokeOwn revokes the owner lease that this store granted; a lease already gone is no error.
// One that could not be revoked is left behind, and remembered as this process's.
func (s *Etcd) revokeOwn(ctx context.Context, lease int64) error {
	_, err := s.client.Revoke(ctx, clientv3.LeaseID(lease))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.granted.leave(lease)
		return err
	}
	s.granted.remove(lease)
	return nil
}

// maxOwnLeases bounds the leases an ownLeases holds, past what forgetting old ones leaves: a
// lease granted past it is not noted, and a node ID that it came to hold would be taken for
// another process's until the lease expired.
const maxOwnLeases = 4096

// ownLeases are the owner leases a store granted for registrations and has not seen revoked:
// registering from their grant until their registration is made (settled) or fails; a lease
// left behind by a registration whose revoke failed (leave) is this process's until it has
// certainly expired, three of its TTLs later (nothing keeps it alive, and an etcd leader change
// renews a lease only once), and is forgotten then.
type ownLeases struct {
	mu     sync.Mutex
	leases map[int64]ownLease
}

type ownLease struct {
	ttl      time.Duration
	use      leaseUse
	forgetAt time.Time // of a lease left behind
}

// leaseUse is what an owner lease a store granted is for now.
type leaseUse uint8

const (
	leaseUnknown     leaseUse = iota // not one of the store's
	leaseRegistering                 // its registration is under way
	leaseSettled                     // its registration was made
	leaseLeft                        // left behind by a registration that failed or closed
)

func (o *ownLeases) add(lease int64, ttl time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.leases == nil {
		o.leases = make(map[int64]ownLease)
	}
	now := time.Now()
	for id, l := range o.leases {
		if l.use == leaseLeft && now.After(l.forgetAt) {
			delete(o.leases, id)
		}
	}
	if len(o.leases) < maxOwnLeases {
		o.leases[lease] = ownLease{ttl: ttl, use: leaseRegistering}
	}
}

func (o *ownLeases) set(lease int64, use leaseUse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.leases[lease]; ok {
		l.use = use
		if use == leaseLeft {
			l.forgetAt = time.Now().Add(3 * l.ttl)
		}
		o.leases[lease] = l
	}
}

func (o *ownLeases) settle(lease int64) { o.set(lease, leaseSettled) }
func (o *ownLeases) leave(lease int64)  { o.set(lease, leaseLeft) }

func (o *ownLeases) remove(lease int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.leases, lease)
}

// state is what lease is for now, as far as the store knows.
func (o *ownLeases) state(lease int64) leaseUse {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leases[lease].use
}
