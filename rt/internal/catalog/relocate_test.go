package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// F7: what Unsettled no longer reports has shown itself: read before the active Spots, as a
// relocation reads them, the two never both miss a creation that ends between the reads.
func TestF7_UnsettledReadFirstNeverMissesACreation(t *testing.T) {
	n := newNode(t, nodeOpts{})
	n.f.building["late"] = true
	created := make(chan error, 1)
	go func() {
		_, err := n.call("late", "Join", "x")
		created <- err
	}()
	require.Equal(t, "factory:late", <-n.f.blocked)
	n.cat.SetRelocating(true)
	unsettled := n.cat.Unsettled()
	close(n.f.release)
	require.NoError(t, <-created)
	active := n.cat.LocalSpots()
	assert.True(t, unsettled || len(active) > 0, "a relocation reading in this order would answer Relocated")
	assert.True(t, unsettled, "the creation under way is unsettled")
	assert.False(t, n.cat.Unsettled(), "and settled once it is active")
}

// F7: a relocation waits for objects on their way in, never for an Actor's factory: one that
// does not return leaves the node settled, and the spawn is refused when it returns.
func TestF7_AnActorFactoryThatHangsLeavesTheNodeSettled(t *testing.T) {
	h := newHangingSpawn(t)
	h.n.cat.SetRelocating(true)
	assert.False(t, h.n.cat.Unsettled(), "the hung factory holds no relocation")
	h.release()
	require.ErrorIs(t, <-h.spawned, sdk.ErrNotServing, "the spawn is refused as the node relocates")
	assert.Zero(t, h.n.cat.ActiveActors())
}

// slowPeers takes rtt over each prepare and settle of a unit, and reports each settle's end.
type slowPeers struct {
	*directPeers
	preparing chan struct{}
	rtt       time.Duration
	settled   chan error
}

func (p *slowPeers) PrepareSpot(ctx context.Context, node sdk.NodeID, in catalog.Arrival) (store.Owner, error) {
	close(p.preparing)
	time.Sleep(p.rtt)
	return p.directPeers.PrepareSpot(ctx, node, in)
}

func (p *slowPeers) SettleSpot(ctx context.Context, node sdk.NodeID, t sdk.Target, token uint64, rec store.Record) error {
	select {
	case <-ctx.Done():
		p.settled <- ctx.Err()
		return ctx.Err()
	case <-time.After(p.rtt):
	}
	p.settled <- nil
	return p.directPeers.SettleSpot(ctx, node, t, token, rec)
}

// F9: the source's close waits for a unit under way to end, settle included: its target hears
// that the unit committed and serves the Spot at once, not after its wait for the settle.
func TestF9_ACloseDoesNotCutTheSettleOfAUnitThatCommitted(t *testing.T) {
	var p *slowPeers
	a, b, x, unit := unitUnderWay(t, nil, func(direct *directPeers) (catalog.Peers, chan struct{}) {
		p = &slowPeers{directPeers: direct, preparing: make(chan struct{}), rtt: 200 * time.Millisecond, settled: make(chan error, 1)}
		return p, p.preparing
	})
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, a.cat.Close(cctx))
	require.NoError(t, <-unit)
	require.NoError(t, <-p.settled, "the settle ran to its end")
	_, onB := b.cat.LocalSpot(x)
	assert.True(t, onB, "the target serves the Spot")
}

// An Actor refused after its factory ran (its node began to relocate meanwhile) leaves nothing
// running: the timer its factory armed stops with it.
func TestF7_ASpawnRefusedAfterItsFactoryStopsItsTimers(t *testing.T) {
	h := newHangingSpawn(t)
	h.n.cat.SetRelocating(true)
	h.release()
	require.ErrorIs(t, <-h.spawned, sdk.ErrNotServing)
	require.Zero(t, h.n.cat.ActiveActors())
	before := h.ticks.Load()
	time.Sleep(200 * time.Millisecond) // a hundred periods of the timer
	assert.Equal(t, before, h.ticks.Load(), "the refused Actor's timer runs no more")
}

// deadSettle takes a while over each prepare and never answers a settle.
type deadSettle struct {
	*directPeers
	preparing chan struct{}
}

func (p *deadSettle) PrepareSpot(ctx context.Context, node sdk.NodeID, in catalog.Arrival) (store.Owner, error) {
	close(p.preparing)
	time.Sleep(100 * time.Millisecond)
	return p.directPeers.PrepareSpot(ctx, node, in)
}

func (p *deadSettle) SettleSpot(ctx context.Context, _ sdk.NodeID, _ sdk.Target, _ uint64, _ store.Record) error {
	<-ctx.Done()
	return ctx.Err()
}

// F8, F9: a close waits for a committed unit's settle half of what its context leaves at most:
// a target that stops answering after the commit does not hold the close to its deadline.
func TestF9_ACloseWaitsForASettleToADeadTargetHalfItsTimeAtMost(t *testing.T) {
	a, _, _, unit := unitUnderWay(t, func(c *catalog.Config) { c.OperationTimeout = 5 * time.Second },
		func(direct *directPeers) (catalog.Peers, chan struct{}) {
			p := &deadSettle{directPeers: direct, preparing: make(chan struct{})}
			return p, p.preparing
		})
	cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	require.NoError(t, a.cat.Close(cctx))
	assert.NoError(t, cctx.Err(), "the close ended before its deadline")
	<-unit
}

// unitUnderWay starts node-a and node-b (with cfg, if set), makes a Room active on node-a and
// starts its relocation unit to node-b through the peers that peers wraps around the direct
// ones; it returns once the unit prepares (preparing closed), with the unit's end to come.
func unitUnderWay(t *testing.T, cfg func(*catalog.Config), peers func(*directPeers) (catalog.Peers, chan struct{})) (a, b *node, x sdk.Target, unit <-chan error) {
	mesh, f := uniqueMesh(t), newFixture()
	a = newNode(t, nodeOpts{mesh: mesh, id: "node-a", fixture: f, cfg: cfg})
	b = newNode(t, nodeOpts{mesh: mesh, id: "node-b", fixture: f, cfg: cfg})
	direct := &directPeers{to: map[sdk.NodeID]*catalog.Catalog{"node-a": a.cat, "node-b": b.cat}}
	p, preparing := peers(direct)
	a.cat.SetPeers(p)
	b.cat.SetPeers(direct)
	x = sdk.InstanceTarget(roomType, "under-way")
	_, err := a.call(x.ID(), "Join", "x")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.cat.RelocateSpot(ctx, x, "node-b") }()
	<-preparing
	return a, b, x, done
}

// timedPawns is a node whose pawns' factories arm a timer of 2 ms, noted in timers by ID and
// counting its runs in ticks, and then do what behave says.
func timedPawns(t *testing.T, ticks *atomic.Int64, timers *sync.Map, behave func(ac sdk.ActorContext) (any, error)) (*node, *spots) {
	return pawnsNode(t, nodeOpts{}, func(ac sdk.ActorContext) (any, error) {
		timers.Store(ac.ID(), ac.Every(2*time.Millisecond, func(context.Context) { ticks.Add(1) }))
		return behave(ac)
	})
}

// A member of an arriving Spot whose factory fails, or which is on the node already, leaves
// no timer armed.
func TestF7_AnArrivingMemberRefusedAfterItsFactoryStopsItsTimers(t *testing.T) {
	var ticks atomic.Int64
	var timers sync.Map
	fail := atomic.Bool{}
	n, sp := timedPawns(t, &ticks, &timers, func(ac sdk.ActorContext) (any, error) {
		if fail.Load() {
			return nil, errors.New("it cannot start")
		}
		return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
	})
	_, err := n.call("room", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, sp.get("room").Spawn(ctx, pawnDesc, "dup"))
	_, err = n.cat.PrepareSpot(ctx, catalog.Arrival{Spot: sdk.InstanceTarget(roomType, "arriving-1"),
		Members: []catalog.MemberState{{Actor: pawnAt("dup")}}, Token: 7})
	require.ErrorIs(t, err, sdk.ErrAlreadyExists)
	dup, _ := timers.Load("dup")
	assert.False(t, dup.(sdk.Timer).Stop(), "the refused copy's timer was stopped")

	fail.Store(true)
	_, err = n.cat.PrepareSpot(ctx, catalog.Arrival{Spot: sdk.InstanceTarget(roomType, "arriving-2"),
		Members: []catalog.MemberState{{Actor: pawnAt("bad")}}, Token: 9})
	require.ErrorIs(t, err, sdk.ErrCreationFailed)
	bad, _ := timers.Load("bad")
	assert.False(t, bad.(sdk.Timer).Stop(), "the failed member's timer was stopped")
}

// A timer a spawned Actor's factory arms runs only once the Actor is a member.
func TestASpawnedActorsTimerWaitsForItsRegistration(t *testing.T) {
	h := newHangingSpawn(t)
	time.Sleep(100 * time.Millisecond) // fifty periods of the timer
	assert.Zero(t, h.ticks.Load(), "no run while the factory builds the Actor")
	h.release()
	require.NoError(t, <-h.spawned)
	require.Eventually(t, func() bool { return h.ticks.Load() > 0 }, 5*time.Second, time.Millisecond, "it runs once a member")
}

// A spawn whose Spot closes while the factory runs is refused, and the Actor it built never
// runs: its timer is stopped and has not run.
func TestASpawnIntoASpotThatClosedMeanwhileLeavesNoTimer(t *testing.T) {
	h := newHangingSpawn(t)
	require.NoError(t, h.n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "room")))
	h.release()
	require.ErrorIs(t, <-h.spawned, sdk.ErrClosed)
	assert.Zero(t, h.n.cat.ActiveActors())
	timer, _ := h.timers.Load("p")
	assert.False(t, timer.(sdk.Timer).Stop(), "the refused Actor's timer was stopped")
	assert.Zero(t, h.ticks.Load())
}

// hangingSpawn is a node of timedPawns with the pawn "p" being spawned into its Room "room",
// whose factory, having armed its timer, waits for release.
type hangingSpawn struct {
	n       *node
	ticks   atomic.Int64
	timers  sync.Map
	release func()
	spawned <-chan error
}

func newHangingSpawn(t *testing.T) *hangingSpawn {
	t.Helper()
	h := &hangingSpawn{}
	hang, started := make(chan struct{}), make(chan struct{})
	h.release = sync.OnceFunc(func() { close(hang) })
	t.Cleanup(h.release)
	n, sp := timedPawns(t, &h.ticks, &h.timers, func(ac sdk.ActorContext) (any, error) {
		close(started)
		<-hang
		return &pawn{ac: ac}, nil
	})
	h.n, h.spawned = n, spawnHeld(t, n, sp, started)
	return h
}

// spawnHeld makes the Room "room" active on n and spawns the pawn "p" into it on a goroutine of
// its own; it returns once the pawn's factory began (started closed), with the spawn's end to
// come.
func spawnHeld(t *testing.T, n *node, sp *spots, started <-chan struct{}) <-chan error {
	t.Helper()
	_, err := n.call("room", "Join", "x")
	require.NoError(t, err)
	spawned := make(chan error, 1)
	go func() { spawned <- sp.get("room").Spawn(context.Background(), pawnDesc, "p") }()
	<-started
	return spawned
}

// B8, F2: a creation that cannot start because the node is closing refuses every caller that
// joined it meanwhile too, at once, rather than leave them waiting for their deadlines.
func TestB8_TheCallersThatJoinACreationThatCannotStartAreRefused(t *testing.T) {
	n := newNode(t, nodeOpts{})
	target := sdk.InstanceIntent(roomType, "unstarted")
	sealAndUnlock := n.cat.LockBackground()
	creator := make(chan error, 1)
	go func() {
		_, err := n.cat.Call(ctx, target, "Join", str("a"))
		creator <- err
	}()
	require.Eventually(t, func() bool { return n.cat.CreationPending(target) }, 5*time.Second, time.Millisecond)
	joiner := make(chan error, 1)
	go func() {
		jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := n.cat.Call(jctx, target, "Join", str("b"))
		joiner <- err
	}()
	// Time for the joiner to find the creation and wait on it; one that comes later starts a
	// creation of its own, which is refused the same way.
	time.Sleep(100 * time.Millisecond)
	sealAndUnlock()
	require.ErrorIs(t, <-creator, sdk.ErrNotServing)
	err := <-joiner
	require.ErrorIs(t, err, sdk.ErrNotServing, "the joiner is refused, not left to its deadline")
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
}
