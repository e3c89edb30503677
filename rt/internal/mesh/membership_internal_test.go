package mesh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
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
	return registerTestNodeWith(t, endpoints, id, testNodeOpts{})
}

// testNodeOpts changes what registerTestNodeWith builds.
type testNodeOpts struct {
	// built runs in the Ledger's factory, before it returns.
	built func(id string)
	// wrap puts a store of the test's between the catalog and etcd; the mesh keeps etcd's.
	wrap func(*store.Etcd) store.Store
	// unhandled is the node's unhandled-message policy.
	unhandled sdk.UnhandledDispatchOptions
	// beacon registers the Beacon Entry Spot and its Mark Actors too.
	beacon bool
	// maxActive caps the Spots active on the node (D6; 0: no cap).
	maxActive int
	// user registers the User Ledger too.
	user bool
}

// registerTestNodeWith is registerTestNode with opts.
func registerTestNodeWith(t *testing.T, endpoints []string, id sdk.NodeID, opts testNodeOpts) *testNode {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := &testNode{st: newTestStore(t, endpoints)}
	var err error
	n.m, err = Listen(Config{Node: id, ObjectServer: true, Transport: transport.Config{ListenAddr: "127.0.0.1:0"}, Logger: logger, Unhandled: opts.unhandled})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.m.Close() })
	types := &catalog.Types{}
	require.NoError(t, rttest.RegisterLedger(types, func(string, string) {}, opts.built))
	if opts.beacon {
		require.NoError(t, rttest.RegisterBeacon(types, nil))
	}
	if opts.user {
		require.NoError(t, rttest.RegisterUserLedger(types, func(string, string) {}))
	}
	n.reg, err = n.st.Register(ctx, &storepb.NodeDescriptor{
		NodeId: string(id), Roles: RoleObjectServer, Weight: 1, SpotTypes: types.Names(), Endpoint: n.m.Endpoint(),
		State: uint32(sdk.RuntimeStateServing),
	}, store.LeaseOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.reg.Close(context.Background()) })
	var catStore store.Store = n.st
	if opts.wrap != nil {
		catStore = opts.wrap(n.st)
	}
	n.cat, err = catalog.New(catalog.Config{Node: id, Exec: exec.DefaultConfig(), Logger: logger, MaxActive: opts.maxActive}, catStore, n.reg, types, nil)
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
	_, rev, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
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
	_, _, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
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

// compactHistory advances the store's revision past rev with writes outside the membership and
// compacts it, so that a membership watch from rev must resync. It returns the revision the
// history was compacted at.
func compactHistory(t *testing.T, ctx context.Context, st *store.Etcd) int64 {
	t.Helper()
	var now int64
	for range 2 {
		resp, err := st.Client().Put(ctx, "/elsewhere", "x")
		require.NoError(t, err)
		now = resp.Header.Revision
	}
	_, err := st.Client().Compact(ctx, now)
	require.NoError(t, err)
	return now
}

// awaitPeerState waits until the link to peer is in state.
func awaitPeerState(t *testing.T, ctx context.Context, m *Mesh, peer sdk.NodeID, state sdk.PeerState) {
	t.Helper()
	for m.tr.PeerState(peer) != state {
		select {
		case <-ctx.Done():
			t.Fatalf("the link to %s never became %v (it is %v)", peer, state, m.tr.PeerState(peer))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A membership watch that lost its history resyncs without touching the peers that did not
// change: their links stay up (G2: a peer's state does not flap), their routes stay cached and
// no reclaim starts.
func TestG2_ResyncKeepsUnchangedPeersLinked(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner := registerTestNode(t, endpoints, "owner")
	require.NoError(t, owner.m.Start(ctx, owner.st, owner.reg, owner.cat, serving))
	caller := registerTestNode(t, endpoints, "caller")
	_, rev, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	awaitPeerState(t, ctx, caller.m, "owner", sdk.PeerStateReady)
	target := sdk.InstanceIntent(rttest.LedgerType, "kept")
	caller.m.routes.put(target, "owner")

	now := compactHistory(t, ctx, caller.st)
	caller.m.watchMembership(rev)
	require.NoError(t, caller.m.seen.wait(ctx, now), "the resync was applied")

	assert.Equal(t, sdk.PeerStateReady, caller.m.tr.PeerState("owner"), "the link was kept, not redialled")
	route, ok := caller.m.routes.get(target)
	assert.True(t, ok && route == "owner", "the route to an unchanged peer is kept")
	assert.Empty(t, caller.m.reclaimKick, "no reclaim: no owner ended")
	assert.Equal(t, []sdk.NodeID{"caller", "owner"}, memberIDs(caller.m))
}

// A resync compares the listing with the members: a node that left is gone, a node that
// registered again loses its routes (its link, to the same process, stays), a new node is
// connected, and the others are untouched.
func TestG2_ResyncAppliesOnlyWhatChanged(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	registerTestNode(t, endpoints, "kept")
	left := registerTestNode(t, endpoints, "left")
	again := registerTestNode(t, endpoints, "again")
	caller := registerTestNode(t, endpoints, "caller")
	_, rev, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	for _, peer := range []sdk.NodeID{"kept", "left", "again"} {
		awaitPeerState(t, ctx, caller.m, peer, sdk.PeerStateReady)
		caller.m.routes.put(sdk.InstanceIntent(rttest.LedgerType, string(peer)), peer)
	}

	require.NoError(t, left.reg.Close(ctx))
	require.NoError(t, again.reg.Close(ctx))
	reg, err := again.st.Register(ctx, again.reg.Descriptor(), store.LeaseOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	registerTestNode(t, endpoints, "joined")
	now := compactHistory(t, ctx, caller.st)
	caller.m.watchMembership(rev)
	require.NoError(t, caller.m.seen.wait(ctx, now), "the resync was applied")

	assert.Equal(t, []sdk.NodeID{"again", "caller", "joined", "kept"}, memberIDs(caller.m))
	assert.Equal(t, sdk.PeerStateReady, caller.m.tr.PeerState("kept"), "an unchanged peer keeps its link")
	assert.Equal(t, sdk.PeerStateNotConnected, caller.m.tr.PeerState("left"), "a peer that left is disconnected")
	for peer, want := range map[sdk.NodeID]bool{"kept": true, "left": false, "again": false} {
		_, ok := caller.m.routes.get(sdk.InstanceIntent(rttest.LedgerType, string(peer)))
		assert.Equal(t, want, ok, "route to %s", peer)
	}
	assert.Len(t, caller.m.reclaimKick, 1, "ended owners are reclaimed")
	awaitPeerState(t, ctx, caller.m, "again", sdk.PeerStateReady)
	awaitPeerState(t, ctx, caller.m, "joined", sdk.PeerStateReady)
}

func memberIDs(m *Mesh) []sdk.NodeID {
	var ids []sdk.NodeID
	for _, n := range m.sortedMembers() {
		ids = append(ids, n.ID)
	}
	return ids
}

// C3: placement sends a call elsewhere only when the chosen node refused it unrun; an error
// that came after admission, even one that says "activation cap", ends the call there.
func TestC3_PlacementMovesOnOnlyFromARefusal(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	registerTestNode(t, endpoints, "a")
	registerTestNode(t, endpoints, "b")
	caller := registerTestNode(t, endpoints, "caller")
	_, _, _, err := caller.m.join(ctx, caller.st, caller.reg, caller.cat, serving)
	require.NoError(t, err)
	awaitPeerState(t, ctx, caller.m, "a", sdk.PeerStateReady)
	awaitPeerState(t, ctx, caller.m, "b", sdk.PeerStateReady)
	full := &sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: 1}
	target := sdk.InstanceIntent(rttest.LedgerType, "c3")

	tried := 0
	err = caller.m.placed(target, sdk.CallOptions{}, func(sdk.NodeID) (bool, error) {
		tried++
		return false, fmt.Errorf("admitted, then: %w", full)
	})
	require.ErrorIs(t, err, sdk.ErrCapacityExceeded)
	assert.Equal(t, 1, tried, "an admitted call is never sent again, whatever its error says")

	var nodes []sdk.NodeID
	err = caller.m.placed(target, sdk.CallOptions{}, func(n sdk.NodeID) (bool, error) {
		nodes = append(nodes, n)
		if len(nodes) == 1 {
			return true, full
		}
		return false, nil
	})
	require.NoError(t, err)
	require.Len(t, nodes, 2, "a refusal at the cap moves the call to the next node")
	assert.NotEqual(t, nodes[0], nodes[1])
}
