package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// The internal tests run the store on a real embedded etcd of their own and replace only its
// transaction sender, to lose answers that etcd gave or to hold transactions like a store
// that does not answer.

// startEtcd starts an embedded etcd for one test and returns a client of it.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	srv, err := devetcd.Start(context.Background(), devetcd.WithoutFsync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return newClient(t, srv.Endpoints())
}

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newFaultyStore returns a store on its own etcd whose transactions go through faults.
func newFaultyStore(t *testing.T, opts ...Option) (*Etcd, *faults) {
	t.Helper()
	s, err := New(startEtcd(t), "settle", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	f := &faults{next: s.kv}
	setSender(s, f)
	return s, f
}

// plainStore returns a second store on s's client and mesh that writes without faults: the
// other nodes of a test.
func plainStore(t *testing.T, s *Etcd) *Etcd {
	t.Helper()
	p, err := New(s.client, s.mesh)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// setSender makes tx the transaction sender of s. Call it while s has no write in flight.
func setSender(s *Etcd, tx txnSender) {
	s.kv = tx
	if s.batch != nil {
		s.batch.mu.Lock()
		s.batch.kv = tx
		s.batch.mu.Unlock()
	}
}

// fault is what faults does to one transaction.
type fault uint8

const (
	pass fault = iota
	// loseAnswer sends the transaction, so that etcd applies it, and then fails it with
	// rpctypes.ErrTimeout as if the answer had been lost.
	loseAnswer
	// failUnsent fails the transaction with rpctypes.ErrTimeout without sending it: a write that
	// was not applied but whose failure is ambiguous.
	failUnsent
)

type step struct {
	fault fault
	// then runs after the fault, before the transaction returns: what happens meanwhile.
	then func()
}

// faults is a transaction sender that applies a plan of steps to the transactions it sends,
// one step each, in order, and then always.
type faults struct {
	next txnSender

	mu     sync.Mutex
	plan   []step
	always fault
	calls  int
}

func (f *faults) add(steps ...step) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = append(f.plan, steps...)
}

func (f *faults) setAlways(x fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.always = x
}

// sent returns the number of transactions given to f so far and resets it.
func (f *faults) sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.calls
	f.calls = 0
	return n
}

func (f *faults) txn(ctx context.Context, req *pb.TxnRequest) (*txnReply, error) {
	f.mu.Lock()
	st := step{fault: f.always}
	if len(f.plan) > 0 {
		st, f.plan = f.plan[0], f.plan[1:]
	}
	f.calls++
	f.mu.Unlock()
	var resp *txnReply
	var err error
	switch st.fault {
	case loseAnswer:
		if _, err = f.next.txn(ctx, req); err == nil {
			err = rpctypes.ErrTimeout
		}
	case failUnsent:
		err = rpctypes.ErrTimeout
	default:
		resp, err = f.next.txn(ctx, req)
	}
	if st.then != nil {
		st.then()
	}
	return resp, err
}

// stall holds every transaction until its context ends (and then fails it as clientv3 does,
// with the context's error) or until open is closed (and then sends it): a store that does not
// answer for a while. It records the deadline, size and width of every transaction.
type stall struct {
	next txnSender
	open chan struct{}
	once sync.Once

	mu    sync.Mutex
	seen  []stalled
	given chan struct{} // buffered: one token per transaction given
}

type stalled struct {
	deadline time.Time
	size     int
	writes   int // nested transactions; 1 for a transaction sent alone
}

func newStall(next txnSender) *stall {
	return &stall{next: next, open: make(chan struct{}), given: make(chan struct{}, 1024)}
}

func (s *stall) txn(ctx context.Context, req *pb.TxnRequest) (*txnReply, error) {
	dl, _ := ctx.Deadline()
	writes := 1
	if len(req.Compare) == 0 && len(req.Success) > 0 && req.Success[0].GetRequestTxn() != nil {
		writes = len(req.Success)
	}
	s.mu.Lock()
	s.seen = append(s.seen, stalled{deadline: dl, size: proto.Size(req), writes: writes})
	s.mu.Unlock()
	s.given <- struct{}{}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.open:
	}
	return s.next.txn(ctx, req)
}

// release lets every transaction through, now and from now on.
func (s *stall) release() { s.once.Do(func() { close(s.open) }) }

func (s *stall) transactions() []stalled {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stalled(nil), s.seen...)
}

// waitGiven waits until n more transactions reached the stall.
func (s *stall) waitGiven(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.given:
		case <-time.After(10 * time.Second):
			t.Fatal("a transaction never reached the store")
		}
	}
}

var ctx = context.Background()

func spot(id string) SpotKey { return SpotKey{Type: "chat.Room", ID: id} }

// registerNode registers a node on s and closes it at the end of the test.
func registerNode(t *testing.T, s *Etcd, id string) *Registration {
	t.Helper()
	reg, err := s.Register(ctx, &storepb.NodeDescriptor{NodeId: id, Roles: 1, Weight: 1}, LeaseOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	return reg
}

func mustReserve(t *testing.T, s *Etcd, k SpotKey, owner Owner) Reservation {
	t.Helper()
	r, err := s.Reserve(ctx, k, sdk.KindInstance, owner)
	require.NoError(t, err)
	require.True(t, r.Won, "reservation of %s", k)
	return r.Reservation
}

func mustReady(t *testing.T, s *Etcd, k SpotKey, owner Owner) Record {
	t.Helper()
	rec, err := s.CommitReady(ctx, mustReserve(t, s, k, owner))
	require.NoError(t, err)
	return rec
}

func lookup(t *testing.T, s *Etcd, k SpotKey) Resolution {
	t.Helper()
	res, err := s.Lookup(ctx, k)
	require.NoError(t, err)
	return res
}

// endLease revokes reg's owner lease behind its back, as its expiry would.
func endLease(t *testing.T, s *Etcd, reg *Registration) func() {
	return func() {
		_, err := s.client.Revoke(ctx, clientv3.LeaseID(reg.Owner().Lease))
		require.NoError(t, err)
	}
}

// storeWithNodeIDHeld is a store on an etcd of its own whose node ID id a lease it granted
// holds, a lease put to use as far as the store knows.
func storeWithNodeIDHeld(t *testing.T, id string, use leaseUse) (*Etcd, clientv3.LeaseID) {
	t.Helper()
	s, err := New(startEtcd(t), "held")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	grant, err := s.client.Grant(ctx, 60)
	require.NoError(t, err)
	s.granted.add(int64(grant.ID), time.Minute)
	s.granted.set(int64(grant.ID), use)
	val, err := encodeNode(&storepb.NodeDescriptor{NodeId: id, Endpoint: "127.0.0.1:1"})
	require.NoError(t, err)
	_, err = s.client.Put(ctx, s.keys.node(sdk.NodeID(id)), val, clientv3.WithLease(grant.ID))
	require.NoError(t, err)
	return s, grant.ID
}

// DESIGN §4: a registration whose answer was lost and whose revoke failed leaves the node ID
// held by a lease of this process. The next registration revokes that lease and says so, the
// one after takes the ID: the process is not taken for another that holds it.
func TestARegistrationLeftByThisProcessIsRevokedNotTakenForAnotherProcess(t *testing.T) {
	s, left := storeWithNodeIDHeld(t, "node-a", leaseLeft)

	_, err := s.Register(ctx, &storepb.NodeDescriptor{NodeId: "node-a", Roles: 1, Weight: 1}, LeaseOptions{})
	require.ErrorIs(t, err, ErrNodeIDInUse)
	var taken *NodeIDInUseError
	assert.False(t, errors.As(err, &taken), "the ID is held by this process's own lease: %v", err)
	assert.Contains(t, err.Error(), "revoked now")
	ttl, err := s.client.TimeToLive(ctx, left)
	require.NoError(t, err)
	assert.EqualValues(t, -1, ttl.TTL, "the lease left behind is revoked")
	assert.Equal(t, leaseUnknown, s.granted.state(int64(left)))
	assert.Empty(t, s.granted.leases, "the failed registration's own lease is revoked and forgotten too")

	reg := registerNode(t, s, "node-a")
	assert.Equal(t, leaseSettled, s.granted.state(reg.Owner().Lease))
	require.NoError(t, reg.Close(ctx))
	assert.Empty(t, s.granted.leases, "a closed registration's lease is forgotten")
}

// DESIGN §4: two registrations of one node ID under way in one process at once: the one that
// loses says so, and leaves the lease of the one that won alone, although that one's
// registration is not yet among the store's live ones.
func TestARegistrationUnderWayIsNotTakenForALeaseLeftBehind(t *testing.T) {
	s, winning := storeWithNodeIDHeld(t, "node-a", leaseRegistering) // its registration not made yet

	_, err := s.Register(ctx, &storepb.NodeDescriptor{NodeId: "node-a", Roles: 1, Weight: 1}, LeaseOptions{})
	require.ErrorIs(t, err, ErrNodeIDInUse)
	assert.Contains(t, err.Error(), "under way")
	ttl, err := s.client.TimeToLive(ctx, winning)
	require.NoError(t, err)
	assert.Positive(t, ttl.TTL, "the winner's lease was revoked")
}

// A lease left behind is forgotten once it has certainly expired: the set of a store's own
// leases stays bounded by the recent ones.
func TestALeaseLeftBehindIsForgottenOnceItHasExpired(t *testing.T) {
	var o ownLeases
	o.add(1, time.Millisecond)
	o.leave(1)
	o.add(2, time.Minute)
	assert.Equal(t, leaseLeft, o.state(1))
	time.Sleep(5 * time.Millisecond)
	o.add(3, time.Minute)
	assert.Equal(t, leaseUnknown, o.state(1), "forgotten three TTLs after it was left")
	assert.Equal(t, leaseRegistering, o.state(2), "a lease under way is kept")
	assert.Equal(t, leaseRegistering, o.state(3))
}
