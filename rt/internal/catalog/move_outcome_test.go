package catalog_test

import (
	"context"
	"fmt"
	"strconv"
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

// The outcome of an Actor's move whose commit answer was lost, met by closes of either Spot and
// by the target's own settle by the record: whatever happens, the Actor lives in one place, and
// its OnClose runs once.

// D9, single activation: the source Spot closes while its member's move is unknown (its commit
// landed). The close finds the record naming the target and leaves the Actor to its move: it
// runs no OnClose at the source, and the Actor serves on in its new Spot, whose close runs the
// one OnClose.
func TestD9_ASourceClosingWhileItsMoveIsUnknownLeavesTheActorToItsMove(t *testing.T) {
	var ticks atomic.Int64
	lossy := &lossyStore{}
	n, sp := roomsNode(t, &ticks, 200*time.Millisecond, lossy.wrap, "room-1", "room-2")
	const id = "d9-source-closes"
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, id))
	before := pawnCloses.Load()
	lossy.lose.Store(true) // the commit lands, its answer is lost, and moves stay unanswered
	err := catClient{n.cat}.MoveActor(ctx, pawnAt(id), room("room-2"))
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	require.NoError(t, n.cat.CloseTarget(ctx, room("room-1")))
	assert.Equal(t, before, pawnCloses.Load(), "no OnClose at the source: the Actor moved")

	lossy.dark.Store(false)
	var out string
	require.Eventually(t, func() bool {
		out, err = n.callT(pawnAt(id), "Hop", "x")
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, out, "room-2")
	require.NoError(t, n.cat.CloseTarget(ctx, room("room-2")))
	assert.Equal(t, before+1, pawnCloses.Load(), "its OnClose ran once, in its new Spot")
}

// slowLossStore loses the answers of the moves it commits while lose is set, and takes slow
// over each read of Actors.
type slowLossStore struct {
	*store.Etcd
	lose atomic.Bool
	slow atomic.Int64
}

func (s *slowLossStore) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *slowLossStore) MoveActor(ctx context.Context, loc store.ActorLocation, from, to store.Host) (store.ActorLocation, error) {
	if s.lose.Load() {
		_, _ = s.Etcd.MoveActor(ctx, loc, from, to)
		return store.ActorLocation{}, fmt.Errorf("%w: the answer was lost", store.ErrOutcomeUnknown)
	}
	return s.Etcd.MoveActor(ctx, loc, from, to)
}

func (s *slowLossStore) wait(ctx context.Context) error {
	select {
	case <-time.After(time.Duration(s.slow.Load())):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", sdk.ErrStoreUnavailable, ctx.Err())
	}
}

func (s *slowLossStore) LookupActor(ctx context.Context, key store.ActorKey) (store.ActorLocation, error) {
	if err := s.wait(ctx); err != nil {
		return store.ActorLocation{}, err
	}
	return s.Etcd.LookupActor(ctx, key)
}

func (s *slowLossStore) HostActors(ctx context.Context, host store.HostRef) ([]store.ActorKey, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Etcd.HostActors(ctx, host)
}

// D9: twenty moves into a Spot committed with their answers lost, and the Spot closes while
// each read of the store takes a fifth of the budget: every one of the twenty is its member and
// ends with it, its OnClose run.
func TestD9_EveryCommittedArrivalEndsWithItsSpotOverASlowStore(t *testing.T) {
	const op, arrivals = 200 * time.Millisecond, 20
	var ticks atomic.Int64
	s := &slowLossStore{}
	n, sp := roomsNode(t, &ticks, op, s.wrap, "room-1", "room-2")
	for i := range arrivals {
		require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, fmt.Sprintf("d9-slow-%d", i)))
	}
	before := pawnCloses.Load()
	s.lose.Store(true)
	for i := range arrivals {
		err := catClient{n.cat}.MoveActor(ctx, pawnAt(fmt.Sprintf("d9-slow-%d", i)), room("room-2"))
		require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	}
	s.slow.Store(int64(op / 5))
	require.NoError(t, n.cat.CloseTarget(ctx, room("room-2")))
	s.slow.Store(0)
	s.lose.Store(false)
	require.Eventually(t, func() bool { return n.cat.ActiveActors() == 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, before+arrivals, pawnCloses.Load(), "every committed member's OnClose ran")
}

// darkStore leaves moves unanswered and unwritten while dark is set, and commits them with
// their answers lost while lose is set.
type darkStore struct {
	*store.Etcd
	dark, lose atomic.Bool
}

func (s *darkStore) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *darkStore) MoveActor(ctx context.Context, loc store.ActorLocation, from, to store.Host) (store.ActorLocation, error) {
	if s.lose.Load() {
		_, _ = s.Etcd.MoveActor(ctx, loc, from, to)
		return store.ActorLocation{}, fmt.Errorf("%w: the answer was lost", store.ErrOutcomeUnknown)
	}
	if s.dark.Load() {
		return store.ActorLocation{}, fmt.Errorf("%w: the store is dark", store.ErrOutcomeUnknown)
	}
	return s.Etcd.MoveActor(ctx, loc, from, to)
}

// movePeers joins the catalogs of one test for Actor moves.
type movePeers struct {
	to map[sdk.NodeID]*catalog.Catalog
}

func (*movePeers) PrepareSpot(context.Context, sdk.NodeID, catalog.Arrival) (store.Owner, error) {
	return store.Owner{}, errNotInThisTest
}

func (*movePeers) SettleSpot(context.Context, sdk.NodeID, sdk.Target, uint64, store.Record) error {
	return errNotInThisTest
}

func (*movePeers) AbortSpot(context.Context, sdk.NodeID, sdk.Target, uint64) error {
	return errNotInThisTest
}

func (p *movePeers) PrepareArrival(_ context.Context, node sdk.NodeID, actor, host sdk.Target, state []byte, token uint64) (store.Host, error) {
	return p.to[node].PrepareArrival(ctx, actor, host, state, token)
}

func (p *movePeers) SettleArrival(_ context.Context, node sdk.NodeID, actor sdk.Target, token uint64) error {
	p.to[node].SettleArrival(actor, token)
	return nil
}

func (p *movePeers) AbortArrival(_ context.Context, node sdk.NodeID, actor sdk.Target, token uint64) error {
	p.to[node].AbortArrival(actor, token)
	return nil
}

// Follow admits a held message to the Actor on node ahead of those sent there directly, as the
// mesh's follow request does, and waits for a request's outcome.
func (p *movePeers) Follow(ctx context.Context, node sdk.NodeID, actor sdk.Target, method string, req proto.Message, oneWay bool) (proto.Message, error) {
	type outcome struct {
		reply proto.Message
		err   error
	}
	done := make(chan outcome, 1)
	err := p.to[node].AdmitActor(ctx, actor, method, req, proto.Size(req), oneWay, true,
		catalog.AnswerFunc(func(reply proto.Message, err error) { done <- outcome{reply, err} }))
	if err != nil || oneWay {
		return nil, err
	}
	select {
	case o := <-done:
		return o.reply, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// peerNode is a node of a two-node test with Rooms, the Lobby and pawns, its peers set before
// it starts.
func peerNode(t *testing.T, mesh, id string, wrap func(*store.Etcd) store.Store, peers catalog.Peers) *node {
	return newNode(t, nodeOpts{mesh: mesh, id: id, wrap: wrap, peers: peers, register: registerMovers, cfg: shortOperations})
}

// leasedPeerNode is peerNode on a short owner lease, which the test may end (endLease).
func leasedPeerNode(t *testing.T, mesh, id string, peers catalog.Peers) *node {
	return newNode(t, nodeOpts{mesh: mesh, id: id, peers: peers, register: registerMovers, lease: shortLease(), cfg: shortOperations})
}

// shortOperations bounds a peer node's store operations at 200 ms.
func shortOperations(c *catalog.Config) { c.OperationTimeout = 200 * time.Millisecond }

// registerMovers registers the Rooms, the Lobby and the pawns, which keep their hops as they move.
func registerMovers(types *catalog.Types, f *fixture) {
	must(types.RegisterSpot(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods}, factory(f)))
	must(types.RegisterSpot(&sdk.SpotDesc{Name: lobbyType, Kind: sdk.KindEntry, Methods: methods}, factory(f)))
	var ticks atomic.Int64
	must(types.RegisterActor(pawnDesc, func(ac sdk.ActorContext) (any, error) {
		p := &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}
		if b := ac.RestoredState(); b != nil {
			p.hops, _ = strconv.Atoi(string(b))
		}
		return p, nil
	}))
}

// movingPair starts node-a, whose store's moves the test darkens, and node-b.
func movingPair(t *testing.T) (a, b *node, ds *darkStore) {
	mesh := uniqueMesh(t)
	peers := &movePeers{to: map[sdk.NodeID]*catalog.Catalog{}}
	ds = &darkStore{}
	a = peerNode(t, mesh, "node-a", ds.wrap, peers)
	b = peerNode(t, mesh, "node-b", nil, peers)
	peers.to["node-a"], peers.to["node-b"] = a.cat, b.cat
	return a, b, ds
}

// K1, single activation: the source cannot reach etcd past the target's wait, so the target
// settles the arrival by the record, which still names the source, and drops it. The drop
// fences the record first: the source's commit, issued again once etcd answers, can no longer
// land and name a Spot that holds nothing. The Actor serves on at the source.
func TestK1_AnArrivalDroppedByTheRecordFencesTheLateCommit(t *testing.T) {
	a, b, ds := movingPair(t)
	_, err := a.call("room-1", "Join", "ann")
	require.NoError(t, err)
	const id = "k1-late-commit"
	require.NoError(t, a.f.spotContext("room-1").Spawn(ctx, pawnDesc, id))
	ds.dark.Store(true)
	err = catClient{a.cat}.MoveActor(ctx, pawnAt(id), sdk.EntryTarget(lobbyType, "node-b"))
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	require.Eventually(t, func() bool {
		_, ok := b.cat.LocalActor(pawnAt(id))
		return !ok
	}, 5*time.Second, 10*time.Millisecond, "node-b drops the arrival by the record")

	ds.dark.Store(false)
	requireServesInRoom1(t, a, id)
	assert.EqualValues(t, 1, a.cat.ActiveActors())
	assert.Zero(t, b.cat.ActiveActors())
}

// D9: a move committed with its answer lost; the target settled by the record, and the Actor
// moved on from there. The source, reading a record that names neither of its Spots but a later
// move of the same record, knows its move committed: the message it held follows the Actor
// and runs, rather than failing as if the Actor were gone.
func TestD9_AMoveFoundCommittedAndMovedOnLetsItsHeldMessageFollow(t *testing.T) {
	a, b, ds := movingPair(t)
	_, err := a.call("room-1", "Join", "ann")
	require.NoError(t, err)
	_, err = b.call("room-9", "Join", "bob")
	require.NoError(t, err)
	const id = "d9-moved-on"
	require.NoError(t, a.f.spotContext("room-1").Spawn(ctx, pawnDesc, id))
	ds.lose.Store(true)
	err = catClient{a.cat}.MoveActor(ctx, pawnAt(id), sdk.EntryTarget(lobbyType, "node-b"))
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	ds.lose.Store(false)
	ds.dark.Store(true)
	sent := make(chan error, 1)
	go func() { sent <- a.cat.Send(ctx, pawnAt(id), "Note", str("")) }() // held at the source
	require.Eventually(t, func() bool {
		_, err := b.callT(pawnAt(id), "Hop", "x")
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "node-b settles the arrival by the record")
	require.NoError(t, catClient{b.cat}.MoveActor(ctx, pawnAt(id), room("room-9")))
	ds.dark.Store(false)
	select {
	case err = <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the held Send was never answered")
	}
	require.NoError(t, err, "the held message followed the Actor")
	out, err := b.callT(pawnAt(id), "Hop", "x")
	require.NoError(t, err, "the Actor is alive")
	assert.Equal(t, `x hop 3 in Instance test.Room/"room-9"`, out, "the held message ran between the two hops")
	// The move's end takes it out of the source's index once its held messages have left.
	assert.Eventually(t, func() bool {
		_, here := a.cat.LocalActor(pawnAt(id))
		return !here
	}, 5*time.Second, 10*time.Millisecond, "the source does not serve it")
}

// leftToItsMove sets up an Actor whose move committed with its answer lost and whose source
// Spot then closed, leaving it to its move: it returns the outcome channel of a request the
// Actor holds, the node, the store and the OnClose count before.
func leftToItsMove(t *testing.T, id string) (held <-chan error, n *node, lossy *lossyStore, before int64) {
	var ticks atomic.Int64
	lossy = &lossyStore{}
	n, sp := roomsNode(t, &ticks, 200*time.Millisecond, lossy.wrap, "room-1", "room-2")
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, id))
	before = pawnCloses.Load()
	blocked := make(chan error, 1)
	go func() {
		_, err := n.call("room-1", "Block", "")
		blocked <- err
	}()
	require.Equal(t, "room-1", <-n.f.blocked)
	lossy.lose.Store(true) // the commit lands, its answer is lost, and moves stay unanswered
	moved := make(chan error, 1)
	go func() { moved <- catClient{n.cat}.MoveActor(ctx, pawnAt(id), room("room-2")) }()
	require.Eventually(t, func() bool { return n.cat.ActorMoving(pawnAt(id)) }, 5*time.Second, time.Millisecond)
	out := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_, err := n.cat.Call(cctx, pawnAt(id), "Hop", str("held"))
		out <- err
	}()
	require.Eventually(t, func() bool { return n.cat.ActorHolds(pawnAt(id)) > 0 }, 5*time.Second, time.Millisecond)
	close(n.f.release)
	require.NoError(t, <-blocked)
	require.ErrorIs(t, <-moved, sdk.ErrStoreUnavailable)
	require.NoError(t, n.cat.CloseTarget(ctx, room("room-1")))
	assert.Equal(t, before, pawnCloses.Load(), "no OnClose at the source")
	return out, n, lossy, before
}

// D9, E5: a request held by an Actor whose move's outcome is unknown, and whose source Spot
// then closes, follows the Actor once the move is known to have committed: the close leaves
// the Actor and what it holds to its move, rather than ending them as if the Actor had closed
// with it.
func TestD9_AHeldRequestFollowsWhenTheSourceClosesDuringAnUnknownMove(t *testing.T) {
	held, n, lossy, _ := leftToItsMove(t, "d9-held-follows")
	lossy.dark.Store(false)
	select {
	case err := <-held:
		require.NoError(t, err, "the held request followed the Actor")
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was never answered")
	}
	out, err := n.callT(pawnAt("d9-held-follows"), "Hop", "after")
	require.NoError(t, err)
	assert.Equal(t, `after hop 2 in Instance test.Room/"room-2"`, out, "the held request ran in the new Spot first")
}

// F8: an Actor left to its move ends with its node if the move's outcome is still unknown
// when the node stops: its held request is answered, and nothing of it is left behind.
func TestF8_AnActorLeftToItsMoveEndsWithItsNode(t *testing.T) {
	held, n, _, before := leftToItsMove(t, "f8-left-to-move")
	require.NoError(t, n.cat.Close(ctx))
	select {
	case err := <-held:
		require.Error(t, err, "the held request ended unrun")
		require.NotErrorIs(t, err, context.DeadlineExceeded, "it was answered as the node stopped, not left to its deadline")
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was never answered")
	}
	assert.Zero(t, n.cat.ActiveActors())
	_, here := n.cat.LocalActor(pawnAt("f8-left-to-move"))
	assert.False(t, here)
	assert.Equal(t, before+1, pawnCloses.Load(), "one OnClose, as its new Spot closed with the node")
}

// slowLookups delays the next read of an Actor's record, once per Actor the test names.
type slowLookups struct {
	*store.Etcd
	mu    sync.Mutex
	delay map[string]time.Duration
}

func (s *slowLookups) set(id string, d time.Duration) {
	s.mu.Lock()
	s.delay[id] = d
	s.mu.Unlock()
}

// pending reports whether the delay set for id still waits for its read.
func (s *slowLookups) pending(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.delay[id]
	return ok
}

func (s *slowLookups) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *slowLookups) LookupActor(ctx context.Context, key store.ActorKey) (store.ActorLocation, error) {
	s.mu.Lock()
	d := s.delay[key.ID]
	delete(s.delay, key.ID)
	s.mu.Unlock()
	time.Sleep(d)
	return s.Etcd.LookupActor(ctx, key)
}

// D3, single activation: no member starts to leave a Spot whose close is under way. A move
// begun while the close waits for another member's move is refused, and the member ends with
// its Spot: nothing of it stays in the node's index, and its ID can be spawned again.
func TestD3_AMemberCannotStartToLeaveAClosingSpot(t *testing.T) {
	var ticks atomic.Int64
	slow := &slowLookups{delay: map[string]time.Duration{}}
	n, sp := roomsNode(t, &ticks, time.Second, slow.wrap, "src", "target")
	const stays, leaves = "d3-stays", "d3-leaves"
	require.NoError(t, sp.get("src").Spawn(ctx, pawnDesc, stays))
	require.NoError(t, sp.get("src").Spawn(ctx, pawnDesc, leaves))
	slow.set(leaves, 400*time.Millisecond) // the move the close waits for
	moved := make(chan error, 1)
	go func() { moved <- catClient{n.cat}.MoveActor(ctx, pawnAt(leaves), room("target")) }()
	require.Eventually(t, func() bool { return n.cat.ActorMoving(pawnAt(leaves)) }, 5*time.Second, time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- n.cat.CloseTarget(ctx, room("src")) }()
	require.Eventually(t, func() bool { return n.cat.Closing(room("src")) }, 5*time.Second, time.Millisecond)

	slow.set(stays, 1500*time.Millisecond) // a move that got so far would still be reading
	err := catClient{n.cat}.MoveActor(ctx, pawnAt(stays), room("target"))
	require.ErrorIs(t, err, sdk.ErrNotFound, "its Spot is closing")
	assert.Contains(t, err.Error(), "closing")
	assert.True(t, slow.pending(stays), "refused before it began: it never read its record")
	require.NoError(t, <-closed)
	<-moved
	_, here := n.cat.LocalActor(pawnAt(stays))
	assert.False(t, here, "it ended with its Spot")
	require.NoError(t, sp.get("target").Spawn(ctx, pawnDesc, stays), "its ID is free")
}

// gatedCommit holds the next Actor move at etcd's door until the test opens it, then commits
// it whatever its caller's context says and loses the answer: a source paused mid-commit.
type gatedCommit struct {
	*store.Etcd
	armed atomic.Bool
	held  chan struct{} // closed once the move is held
	open  chan struct{}
}

func (g *gatedCommit) wrap(e *store.Etcd) store.Store {
	g.Etcd = e
	return g
}

func (g *gatedCommit) MoveActor(ctx context.Context, loc store.ActorLocation, from, to store.Host) (store.ActorLocation, error) {
	if !g.armed.CompareAndSwap(true, false) {
		return g.Etcd.MoveActor(ctx, loc, from, to)
	}
	close(g.held)
	<-g.open
	_, err := g.Etcd.MoveActor(context.Background(), loc, from, to)
	return store.ActorLocation{}, fmt.Errorf("%w: the answer was lost (the commit said %v)", store.ErrOutcomeUnknown, err)
}

// K1, single activation: an Entry Spot closing with its node has no Releasing record to fence
// the moves into it. It fences the record of a member still arriving itself, so the commit of
// a source paused mid-commit lands after the close as a failure. The Actor serves on at its
// source, and no record names the closed Spot.
func TestK1_AnEntrySpotsCloseFencesTheMovesStillComingIn(t *testing.T) {
	mesh := uniqueMesh(t)
	peers := &movePeers{to: map[sdk.NodeID]*catalog.Catalog{}}
	gate := &gatedCommit{held: make(chan struct{}), open: make(chan struct{})}
	a := peerNode(t, mesh, "node-a", gate.wrap, peers)
	b := peerNode(t, mesh, "node-b", nil, peers)
	peers.to["node-a"], peers.to["node-b"] = a.cat, b.cat
	_, err := a.call("room-1", "Join", "ann")
	require.NoError(t, err)
	const id = "k1-entry-fence"
	require.NoError(t, a.f.spotContext("room-1").Spawn(ctx, pawnDesc, id))

	gate.armed.Store(true)
	moved := make(chan error, 1)
	go func() { moved <- catClient{a.cat}.MoveActor(ctx, pawnAt(id), sdk.EntryTarget(lobbyType, "node-b")) }()
	awaitClosed(t, gate.held, "the move's commit is held")
	require.NoError(t, b.cat.Close(ctx), "node-b closes, its Lobby with it")
	close(gate.open)
	require.Error(t, <-moved, "the move failed: the close fenced its commit")
	requireServesInRoom1(t, a, id)
}

// requireServesInRoom1 waits until the Actor id answers on n, in the Room room-1 its move
// started from, and checks that its record names that Room.
func requireServesInRoom1(t *testing.T, n *node, id string) {
	t.Helper()
	var out string
	var err error
	require.Eventually(t, func() bool {
		out, err = n.callT(pawnAt(id), "Hop", "x")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the Actor serves on at its source")
	assert.Contains(t, out, "room-1")
	loc, err := n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
	require.NoError(t, err)
	assert.Equal(t, "room-1", loc.Host.ID, "its record names its source")
}

// awaitClosed waits for ch to close, failing the test after 10 s.
func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never happened", what)
	}
}

// K1: an Entry Spot closing with its node fences only the moves that can still commit. A member
// whose move out committed with its answer lost is left to its move, and its record is left as
// the commit wrote it: the Actor serves on in its new Spot, and its next move from there, fenced
// on that revision, commits.
func TestK1_AnEntrySpotsCloseLeavesACommittedMoveOutUnfenced(t *testing.T) {
	mesh := uniqueMesh(t)
	peers := &movePeers{to: map[sdk.NodeID]*catalog.Catalog{}}
	lossy := &lossyStore{}
	a := peerNode(t, mesh, "node-a", lossy.wrap, peers)
	b := peerNode(t, mesh, "node-b", nil, peers)
	peers.to["node-a"], peers.to["node-b"] = a.cat, b.cat
	_, err := a.callT(sdk.EntryTarget(lobbyType, "node-a"), "Join", "x")
	require.NoError(t, err)
	_, err = b.call("room-1", "Join", "ann")
	require.NoError(t, err)
	const id = "k1-committed-out"
	require.NoError(t, a.f.spotContext("").Spawn(ctx, pawnDesc, id))

	lossy.lose.Store(true) // the commit lands, its answer is lost, and moves stay unanswered
	err = catClient{a.cat}.MoveActor(ctx, pawnAt(id), room("room-1"))
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	key := store.ActorKey{Type: pawnType, ID: id}
	committed, err := b.store.LookupActor(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "room-1", committed.Host.ID, "the move committed")

	require.NoError(t, a.cat.Close(ctx), "node-a closes, its Lobby with it")
	after, err := b.store.LookupActor(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, committed.Revision, after.Revision, "the close left the committed record as it was")

	var out string
	require.Eventually(t, func() bool {
		out, err = b.callT(pawnAt(id), "Hop", "x")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the Actor serves in its new Spot")
	assert.Contains(t, out, "room-1")
	_, err = b.call("room-2", "Join", "bob")
	require.NoError(t, err)
	require.NoError(t, catClient{b.cat}.MoveActor(ctx, pawnAt(id), room("room-2")), "its next move commits")
}
