package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// directPeers joins the catalogs of one test for relocation units; dropSettle loses every
// settle on its way.
type directPeers struct {
	to         map[sdk.NodeID]*catalog.Catalog
	dropSettle bool
}

var errNotInThisTest = errors.New("not in this test")

func (p *directPeers) PrepareSpot(ctx context.Context, node sdk.NodeID, in catalog.Arrival) (store.Owner, error) {
	return p.to[node].PrepareSpot(ctx, in)
}

func (p *directPeers) SettleSpot(_ context.Context, node sdk.NodeID, t sdk.Target, token uint64, rec store.Record) error {
	if p.dropSettle {
		return errors.New("the settle was lost")
	}
	p.to[node].SettleSpot(t, token, rec)
	return nil
}

func (p *directPeers) AbortSpot(_ context.Context, node sdk.NodeID, t sdk.Target, token uint64) error {
	p.to[node].AbortSpot(t, token)
	return nil
}

func (*directPeers) PrepareArrival(context.Context, sdk.NodeID, sdk.Target, sdk.Target, []byte, uint64) (store.Host, error) {
	return store.Host{}, errNotInThisTest
}

func (*directPeers) SettleArrival(context.Context, sdk.NodeID, sdk.Target, uint64) error {
	return errNotInThisTest
}

func (*directPeers) AbortArrival(context.Context, sdk.NodeID, sdk.Target, uint64) error {
	return errNotInThisTest
}

func (*directPeers) Follow(context.Context, sdk.NodeID, sdk.Target, string, proto.Message, bool) (proto.Message, error) {
	return nil, errNotInThisTest
}

// A unit whose settle was lost committed all the same: the target that closes before it heard
// of it settles the arrival by the record and closes it with the node (Shutdown), releasing the
// record, rather than dropping a Spot the record gives it.
func TestF9_ATargetClosingWithAnUnsettledArrivalClosesItWithTheNode(t *testing.T) {
	mesh, f := uniqueMesh(t), newFixture()
	a := newNode(t, nodeOpts{mesh: mesh, id: "node-a", fixture: f})
	b := newNode(t, nodeOpts{mesh: mesh, id: "node-b", fixture: f})
	peers := &directPeers{to: map[sdk.NodeID]*catalog.Catalog{"node-a": a.cat, "node-b": b.cat}, dropSettle: true}
	a.cat.SetPeers(peers)
	b.cat.SetPeers(peers)
	_, err := a.call("unsettled", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, a.cat.RelocateSpot(ctx, sdk.InstanceTarget(roomType, "unsettled"), "node-b"))
	res := a.lookup(t, roomType, "unsettled")
	require.Equal(t, store.StateReady, res.State)
	require.Equal(t, b.reg.Owner(), res.Record.Owner, "the unit committed")

	require.NoError(t, b.cat.Close(ctx))
	assert.Equal(t, store.StateMissing, a.lookup(t, roomType, "unsettled").State, "released with the node's close")
	// The source's callback runs on its own queue, and may come after the target's close.
	require.Eventually(t, func() bool { return len(f.closeReasons("unsettled")) == 2 }, 10*time.Second, time.Millisecond)
	assert.ElementsMatch(t, []sdk.CloseReason{sdk.CloseRelocated, sdk.CloseShutdown}, f.closeReasons("unsettled"),
		"its source saw Relocated, its target Shutdown")
}

// fencedAfterCommit commits the next Spot move, runs meanwhile (the target moves the record
// on), and then answers fenced: what the store answers when a commit's answer was lost and its
// re-read finds the record moved on.
type fencedAfterCommit struct {
	*store.Etcd
	meanwhile atomic.Pointer[func()]
}

func (s *fencedAfterCommit) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *fencedAfterCommit) MoveSpot(ctx context.Context, key store.SpotKey, rec store.Record, to store.Owner, attempt uint64) (store.Record, error) {
	out, err := s.Etcd.MoveSpot(ctx, key, rec, to, attempt)
	if fn := s.meanwhile.Swap(nil); fn != nil && err == nil {
		(*fn)()
		return store.Record{}, fmt.Errorf("store: move %s to %s: %w", key, to.Node, store.ErrFenced)
	}
	return out, err
}

// K1, single activation: a unit whose commit took, answered fenced because its target released
// the record before the source heard, does not roll back: the source never serves the Spot
// again, so a new activation elsewhere is the only one.
func TestK1_AUnitAnsweredFencedAfterItsCommitDoesNotRollBack(t *testing.T) {
	mesh, f := uniqueMesh(t), newFixture()
	fs := &fencedAfterCommit{}
	a := newNode(t, nodeOpts{mesh: mesh, id: "node-a", fixture: f, wrap: fs.wrap})
	b := newNode(t, nodeOpts{mesh: mesh, id: "node-b", fixture: f})
	c := newNode(t, nodeOpts{mesh: mesh, id: "node-c", fixture: f})
	peers := &directPeers{to: map[sdk.NodeID]*catalog.Catalog{"node-a": a.cat, "node-b": b.cat}}
	a.cat.SetPeers(peers)
	b.cat.SetPeers(peers)
	x := sdk.InstanceTarget(roomType, "moved-then-released")
	_, err := a.call(x.ID(), "Join", "x")
	require.NoError(t, err)
	closeB := func() { require.NoError(t, b.cat.Close(ctx)) }
	fs.meanwhile.Store(&closeB)
	require.Error(t, a.cat.RelocateSpot(ctx, x, "node-b"))
	_, onA := a.cat.LocalSpot(x)
	assert.False(t, onA, "the source does not serve a Spot whose commit took")

	_, err = c.call(x.ID(), "Join", "from c")
	require.NoError(t, err, "the Spot is made afresh elsewhere")
	_, err = a.callT(x, "Join", "from a")
	require.Error(t, err, "the source does not run it")
	_, onA = a.cat.LocalSpot(x)
	_, onC := c.cat.LocalSpot(x)
	assert.True(t, onC)
	assert.False(t, onA, "one activation")
}
