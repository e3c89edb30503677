package mesh

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/catalog"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/exec"
	"github.com/zlink-go/zlink/rt/rttest"
	"github.com/zlink-go/zlink/rt/store"
	"github.com/zlink-go/zlink/rt/store/storepb"
	"github.com/zlink-go/zlink/rt/transport"
	"github.com/zlink-go/zlink/rt/wire"
	"github.com/zlink-go/zlink/sdk"
)

// testNode is one node of a mesh built from its parts: its own store client, registration,
// catalog and mesh, on a shared etcd.
type testNode struct {
	m   *Mesh
	st  *store.Etcd
	reg *store.Registration
	cat *catalog.Catalog
}

func newTestStore(t *testing.T, endpoints []string) *store.Etcd {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	st, err := store.New(client, "membership-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// registerTestNode registers an Object Server that hosts the test Ledger; the caller joins
// it to the mesh.
func registerTestNode(t *testing.T, endpoints []string, id sdk.NodeID) *testNode {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := &testNode{st: newTestStore(t, endpoints)}
	var err error
	n.m, err = Listen(Config{Node: id, ObjectServer: true, Transport: transport.Config{ListenAddr: "127.0.0.1:0"}, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.m.Close() })
	types := &catalog.Types{}
	require.NoError(t, rttest.RegisterLedger(types, func(string, string) {}, nil))
	n.reg, err = n.st.Register(ctx, &storepb.NodeDescriptor{
		NodeId: string(id), Roles: RoleObjectServer, Weight: 1, SpotTypes: types.Names(), Endpoint: n.m.Endpoint(),
		State: uint32(sdk.RuntimeStateServing),
	}, store.LeaseOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.reg.Close(context.Background()) })
	n.cat, err = catalog.New(catalog.Config{Node: id, Exec: exec.DefaultConfig(), Logger: logger}, n.st, n.reg, types, nil)
	require.NoError(t, err)
	require.NoError(t, n.cat.Start(ctx))
	t.Cleanup(func() { _ = n.cat.Close(context.Background()) })
	return n
}

// startEtcd starts an embedded etcd for one test and returns its endpoints and a context that
// bounds the test.
func startEtcd(t *testing.T) ([]string, context.Context) {
	t.Helper()
	etcd, err := devetcd.Start(context.Background(), devetcd.WithoutFsync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = etcd.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return etcd.Endpoints(), ctx
}

func serving() sdk.RuntimeState { return sdk.RuntimeStateServing }

// A node can learn of an owner from its Spot record before its membership watch reports the
// owner's registration. The call waits for the membership instead of failing with "no
// connection".
func TestCallToAnOwnerTheWatchHasNotReportedWaitsForIt(t *testing.T) {
	endpoints, ctx := startEtcd(t)

	caller := registerTestNode(t, endpoints, "caller")
	_, rev, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	// The caller's membership stops at rev: it does not watch yet.

	owner := registerTestNode(t, endpoints, "owner")
	require.NoError(t, owner.m.Start(ctx, owner.st, owner.reg, owner.cat, serving))
	target := sdk.InstanceIntent(rttest.LedgerType, "late").WithDesc(&rttest.LedgerDesc)
	_, err = owner.m.Call(ctx, target, rttest.LedgerRecord, wrapperspb.String("m1"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err, "the owner activates the Spot")

	done := make(chan error, 1)
	go func() {
		_, err := caller.m.Call(ctx, target.Plain(), rttest.LedgerRecord, wrapperspb.String("m2"), sdk.CallOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the call ended before the caller knew the owner: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	assert.Equal(t, sdk.PeerStateNotConnected, caller.m.tr.PeerState("owner"), "no link yet")

	caller.m.watchMembership(rev)
	select {
	case err := <-done:
		require.NoError(t, err, "the call reaches the owner once the membership caught up")
	case <-ctx.Done():
		t.Fatal("the call did not end")
	}
	count, err := caller.m.Call(ctx, target.Plain(), rttest.LedgerCount, &wrapperspb.Int64Value{}, sdk.CallOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), count.(*wrapperspb.Int64Value).GetValue(), "each message ran once, on the owner")
}

// A call that waits for the membership ends when its node's mesh closes.
func TestCallWaitingForTheMembershipEndsWhenTheMeshCloses(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	caller := registerTestNode(t, endpoints, "caller")
	_, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	owner := registerTestNode(t, endpoints, "owner")
	require.NoError(t, owner.m.Start(ctx, owner.st, owner.reg, owner.cat, serving))

	done := make(chan error, 1)
	go func() { done <- caller.m.awaitMember(ctx, "owner") }()
	require.NoError(t, caller.m.Close())
	err = <-done
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.ErrorContains(t, err, "context canceled", "the mesh's close, not the dial timeout, ended the wait")
}

func TestCallToANodeThatIsNotRegisteredIsUnavailable(t *testing.T) {
	endpoints, ctx := startEtcd(t)

	n := registerTestNode(t, endpoints, "alone")
	require.NoError(t, n.m.Start(ctx, n.st, n.reg, n.cat, serving))
	_, err := n.m.call(ctx, "nobody", &wire.Request{})
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.ErrorContains(t, err, "node nobody is not in the mesh")
}

func TestRevisionGateWaitsForTheRevision(t *testing.T) {
	var g revisionGate
	g.advance(5)
	require.NoError(t, g.wait(context.Background(), 5))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, g.wait(ctx, 6), context.DeadlineExceeded)

	done := make(chan error, 1)
	go func() { done <- g.wait(context.Background(), 7) }()
	g.advance(6)
	g.advance(3) // an older revision changes nothing
	select {
	case err := <-done:
		t.Fatalf("woke at revision 6: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.advance(7)
	require.NoError(t, <-done)
}
