package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

const pawnType = "game.Pawn"

// pawn is an Actor that counts its hops and keeps the count across moves (sdk.Relocatable).
type pawn struct {
	ac     sdk.ActorContext
	hops   int
	ticks  *atomic.Int64
	closes *atomic.Int64
}

func (p *pawn) OnClose(ctx context.Context, r sdk.CloseReason) {
	pawnCloseReasons.Lock()
	d := pawnCloseReasons.delay[p.ac.ID()]
	pawnCloseReasons.Unlock()
	time.Sleep(d)
	p.closes.Add(1)
	pawnCloseReasons.Lock()
	pawnCloseReasons.of[p.ac.ID()] = r
	pawnCloseReasons.ctxErr[p.ac.ID()] = ctx.Err()
	pawnCloseReasons.Unlock()
}

// pawnCloseReasons are the reasons of the pawns' OnClose calls, and their contexts' errors as
// they returned, by pawn ID; delay makes a pawn's OnClose take that long.
var pawnCloseReasons = struct {
	sync.Mutex
	of     map[string]sdk.CloseReason
	ctxErr map[string]error
	delay  map[string]time.Duration
}{of: map[string]sdk.CloseReason{}, ctxErr: map[string]error{}, delay: map[string]time.Duration{}}

// slowPawnClose makes the OnClose of the pawn id take d.
func slowPawnClose(id string, d time.Duration) {
	pawnCloseReasons.Lock()
	pawnCloseReasons.delay[id] = d
	pawnCloseReasons.Unlock()
}

// pawnCloseErr is the error of the context of the pawn id's OnClose as it returned.
func pawnCloseErr(id string) error {
	pawnCloseReasons.Lock()
	defer pawnCloseReasons.Unlock()
	return pawnCloseReasons.ctxErr[id]
}

func pawnCloseReason(id string) (sdk.CloseReason, bool) {
	pawnCloseReasons.Lock()
	defer pawnCloseReasons.Unlock()
	r, ok := pawnCloseReasons.of[id]
	return r, ok
}

func (p *pawn) MarshalState(context.Context) ([]byte, error) {
	return []byte(strconv.Itoa(p.hops)), nil
}

var pawnDesc = &sdk.SpotDesc{Name: pawnType, Kind: sdk.KindActor, Methods: []sdk.MethodDesc{
	actorMethod("Hop", func(p *pawn, _ context.Context, in string) (string, error) {
		p.hops++
		return fmt.Sprintf("%s hop %d in %v", in, p.hops, p.ac.Host()), nil
	}),
	oneWayActorMethod("Note", func(p *pawn) { p.hops++ }),
	actorMethod("TurnStart", func(p *pawn, _ context.Context, in string) (string, error) {
		return fmt.Sprint(p.ac.TurnStart().UnixNano()), nil
	}),
	actorMethod("Tick", func(p *pawn, _ context.Context, in string) (string, error) {
		p.ac.Every(time.Millisecond, func(context.Context) { p.ticks.Add(1) })
		return "ticking", nil
	}),
}}

func actorMethod(name string, fn func(p *pawn, ctx context.Context, in string) (string, error)) sdk.MethodDesc {
	return sdk.MethodDesc{
		Name:       name,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			out, err := fn(impl.(*pawn), ctx, req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return str(out), nil
		},
	}
}

func oneWayActorMethod(name string, fn func(p *pawn)) sdk.MethodDesc {
	return sdk.MethodDesc{
		Name:       name,
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			fn(impl.(*pawn))
			return nil, nil
		},
	}
}

// spots remembers the SpotContext of every Spot made, by ID.
type spots struct {
	mu sync.Mutex
	m  map[string]sdk.SpotContext
}

func (s *spots) get(id string) sdk.SpotContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

func actorNode(t *testing.T, ticks *atomic.Int64, cfg ...func(*catalog.Config)) (*node, *spots) {
	return actorNodeWith(t, ticks, nodeOpts{}, cfg...)
}

func actorNodeWith(t *testing.T, ticks *atomic.Int64, o nodeOpts, cfg ...func(*catalog.Config)) (*node, *spots) {
	if len(cfg) > 0 {
		o.cfg = cfg[0]
	}
	return pawnsNode(t, o, func(ac sdk.ActorContext) (any, error) {
		p := &pawn{ac: ac, ticks: ticks, closes: &pawnCloses}
		if b := ac.RestoredState(); b != nil {
			p.hops, _ = strconv.Atoi(string(b))
		}
		return p, nil
	})
}

// pawnsNode is a node of o with Rooms, whose contexts it keeps, and pawns that newPawn makes.
func pawnsNode(t *testing.T, o nodeOpts, newPawn func(ac sdk.ActorContext) (any, error)) (*node, *spots) {
	sp := &spots{m: map[string]sdk.SpotContext{}}
	o.register = func(ts *catalog.Types, f *fixture) {
		build := factory(f)
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods}, func(sc sdk.SpotContext) (any, error) {
			sp.mu.Lock()
			sp.m[sc.ID()] = sc
			sp.mu.Unlock()
			return build(sc)
		}))
		must(ts.RegisterActor(pawnDesc, newPawn))
	}
	return newNode(t, o), sp
}

// roomsNode is an actor node with OperationTimeout op whose store wrap puts the test's store
// between the catalog and etcd, and the Rooms rooms active; ticks counts its pawns' ticks.
func roomsNode(t *testing.T, ticks *atomic.Int64, op time.Duration, wrap func(*store.Etcd) store.Store, rooms ...string) (*node, *spots) {
	n, sp := actorNodeWith(t, ticks, nodeOpts{wrap: wrap}, func(c *catalog.Config) { c.OperationTimeout = op })
	for _, id := range rooms {
		_, err := n.call(id, "Join", "ann")
		require.NoError(t, err)
	}
	return n, sp
}

// pawnCloses counts the OnClose calls of every pawn.
var pawnCloses atomic.Int64

func pawnAt(id string) sdk.Target { return sdk.ActorTarget(pawnType, id) }

// An Actor spawned into a Spot runs on that Spot's queue; spawning it again anywhere is
// ErrAlreadyExists, and bad spawns say what is wrong.
func TestActorSpawnAndCallOnItsSpot(t *testing.T) {
	var ticks atomic.Int64
	n, sp := actorNode(t, &ticks)
	_, err := n.call("room-1", "Join", "ann")
	require.NoError(t, err)
	_, err = n.call("room-2", "Join", "bob")
	require.NoError(t, err)
	sc := sp.get("room-1")
	require.NoError(t, sc.Spawn(ctx, pawnDesc, "p1"))
	out, err := n.callT(pawnAt("p1"), "Hop", "p1")
	require.NoError(t, err)
	assert.Equal(t, `p1 hop 1 in Instance test.Room/"room-1"`, out)
	assert.EqualValues(t, 1, n.cat.ActiveActors())
	before := time.Now()
	out, err = n.callT(pawnAt("p1"), "TurnStart", "")
	require.NoError(t, err)
	ns, err := strconv.ParseInt(out, 10, 64)
	require.NoError(t, err)
	assert.False(t, time.Unix(0, ns).Before(before), "an Actor's turn starts as its Spot's turns do (C1)")

	require.ErrorIs(t, sp.get("room-2").Spawn(ctx, pawnDesc, "p1"), sdk.ErrAlreadyExists)
	require.ErrorIs(t, sc.Spawn(ctx, nil, "p2"), sdk.ErrInvalidArgument)
	require.ErrorIs(t, sc.Spawn(ctx, pawnDesc, ""), sdk.ErrInvalidID)
	require.ErrorIs(t, sc.Spawn(ctx, &sdk.SpotDesc{Name: "game.Other", Kind: sdk.KindActor}, "p2"), sdk.ErrUnhandled)
	require.ErrorIs(t, sc.Spawn(ctx, &sdk.SpotDesc{Name: roomType, Kind: sdk.KindActor}, "p2"), sdk.ErrInvalidArgument)
	assert.EqualValues(t, 1, n.cat.ActiveActors(), "no failed spawn left an Actor")
	_, err = n.callT(pawnAt("p2"), "Hop", "p2")
	require.Error(t, err)
}

// A move between two Spots of one node carries the Actor's state; its timers stop in the Spot
// it left.
func TestActorMoveBetweenSpotsOfOneNode(t *testing.T) {
	var ticks atomic.Int64
	n, sp := actorNode(t, &ticks)
	for _, id := range []string{"room-1", "room-2"} {
		_, err := n.call(id, "Join", "ann")
		require.NoError(t, err)
	}
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "p1"))
	_, err := n.callT(pawnAt("p1"), "Hop", "p1")
	require.NoError(t, err)
	_, err = n.callT(pawnAt("p1"), "Tick", "")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ticks.Load() > 3 }, 5*time.Second, time.Millisecond)

	client := catClient{n.cat}
	require.NoError(t, client.MoveActor(ctx, pawnAt("p1"), sdk.InstanceTarget(roomType, "room-2")))
	out, err := n.callT(pawnAt("p1"), "Hop", "p1")
	require.NoError(t, err)
	assert.Equal(t, `p1 hop 2 in Instance test.Room/"room-2"`, out, "its state came along")
	settled := ticks.Load()
	time.Sleep(30 * time.Millisecond)
	assert.LessOrEqual(t, ticks.Load(), settled+1, "its timer stopped when it left")
	assert.EqualValues(t, 1, n.cat.ActiveActors())

	require.ErrorIs(t, client.MoveActor(ctx, pawnAt("p1"), sdk.InstanceTarget(roomType, "room-2")), sdk.ErrInvalidArgument)
	require.ErrorIs(t, client.MoveActor(ctx, pawnAt("p1"), sdk.InstanceTarget(roomType, "room-9")), sdk.ErrNotFound)
	out, err = n.callT(pawnAt("p1"), "Hop", "p1")
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(out, `in Instance test.Room/"room-2"`), out)
}

// RegisterActor takes Actor descriptors only, never an idle timeout, and shares the names of
// Spot types.
func TestRegisterActorRefusesWhatIsNotAnActorType(t *testing.T) {
	mk := func(sdk.ActorContext) (any, error) { return struct{}{}, nil }
	ts := &catalog.Types{}
	require.ErrorIs(t, ts.RegisterActor(nil, mk), sdk.ErrInvalidArgument)
	require.ErrorIs(t, ts.RegisterActor(pawnDesc, nil), sdk.ErrInvalidArgument)
	err := ts.RegisterActor(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods}, mk)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "RegisterSpot")
	require.ErrorIs(t, ts.RegisterActor(pawnDesc, mk, sdk.WithIdleTimeout(time.Second)), sdk.ErrInvalidArgument)
	require.NoError(t, ts.RegisterActor(pawnDesc, mk))
	require.ErrorIs(t, ts.RegisterSpot(&sdk.SpotDesc{Name: pawnType, Kind: sdk.KindInstance, Methods: methods}, factory(newFixture())), sdk.ErrInvalidArgument)
	assert.Equal(t, []string{pawnType}, ts.Names())
}

// An Actor descriptor is not a Spot type: RegisterSpot refuses it and names RegisterActor.
func TestRegisterSpotRefusesAnActorDescriptor(t *testing.T) {
	ts := &catalog.Types{}
	err := ts.RegisterSpot(&sdk.SpotDesc{Name: pawnType, Kind: sdk.KindActor, Methods: methods}, factory(newFixture()))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "RegisterActor")
	assert.Empty(t, ts.Names())
}

// Messages held while a move waits for a long turn go back on the lane when the move gives up,
// all of them, even past the lane's limits: they were admitted once (E5).
func TestHeldMessagesReturnPastTheLaneLimits(t *testing.T) {
	var ticks atomic.Int64
	n, sp := actorNode(t, &ticks, func(c *catalog.Config) { c.Exec.Application.Count = 8 })
	for _, id := range []string{"room-1", "room-2"} {
		_, err := n.call(id, "Join", "ann")
		require.NoError(t, err)
	}
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "p1"))
	blocked := make(chan error, 1)
	go func() {
		_, err := n.call("room-1", "Block", "")
		blocked <- err
	}()
	require.Equal(t, "room-1", <-n.f.blocked)
	mctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	moved := make(chan error, 1)
	go func() {
		moved <- catClient{n.cat}.MoveActor(mctx, pawnAt("p1"), sdk.InstanceTarget(roomType, "room-2"))
	}()
	time.Sleep(50 * time.Millisecond) // the move is waiting for the turn
	// Twenty senders at once: each message is held, and each sender is answered once its
	// message is back in the lane, past the lane's limit of 8.
	var sends sync.WaitGroup
	sent := make(chan error, 20)
	for range 20 {
		sends.Go(func() { sent <- n.cat.Send(ctx, pawnAt("p1"), "Note", str("")) })
	}
	require.ErrorIs(t, <-moved, context.DeadlineExceeded)
	sends.Wait()
	close(sent)
	for err := range sent {
		require.NoError(t, err)
	}
	close(n.f.release)
	require.NoError(t, <-blocked)
	var out string
	require.Eventually(t, func() bool {
		var err error
		out, err = n.callT(pawnAt("p1"), "Hop", "p1") // refused unrun while the lane is over its limit
		return err == nil
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, `p1 hop 21 in Instance test.Room/"room-1"`, out, "every held message ran, in its Spot")
}

// C1: an Actor's closing callback is a turn of its Spot and checks the owner lease as the
// Spot's does: an explicit close whose callback waited while the lease ended runs it with
// CloseOwnerLost, and does not count as a turn's start.
func TestC1_AnActorsClosingCallbackChecksTheLease(t *testing.T) {
	var ticks atomic.Int64
	n := newNode(t, nodeOpts{lease: shortLease(), register: func(ts *catalog.Types, f *fixture) {
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: lobbyType, Kind: sdk.KindEntry, Methods: methods}, factory(f)))
		must(ts.RegisterActor(pawnDesc, func(ac sdk.ActorContext) (any, error) {
			return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
		}))
	}})
	// An Entry Spot hosts the Actor: the end of the lease stops its turns.
	host := lobbyBlocked(t, n, "p-end")
	lastTurn := host.TurnStart()
	closed := make(chan error, 1)
	go func() { closed <- n.cat.CloseTarget(ctx, pawnAt("p-end")) }()
	time.Sleep(100 * time.Millisecond) // the callback queues behind the blocked turn
	endLease(t, n)
	close(n.f.release)
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the close did not end")
	}
	r, ok := pawnCloseReason("p-end")
	require.True(t, ok, "the closing callback ran")
	assert.Equal(t, sdk.CloseOwnerLost, r)
	assert.Equal(t, lastTurn, host.TurnStart(), "the refused check started no turn")
}

// C1: the Actors of an Entry Spot end with the owner lease their records name, though the
// Entry Spot serves again once its node registers again: the reclaimer deletes those records,
// the Actor may then be spawned elsewhere, and the old copy must not run beside it.
func TestC1_AnEntrySpotsActorsEndWithTheLeaseTheirRecordsName(t *testing.T) {
	mesh := uniqueMesh(t)
	peers := &movePeers{to: map[sdk.NodeID]*catalog.Catalog{}}
	a := leasedPeerNode(t, mesh, "node-a", peers)
	b := peerNode(t, mesh, "node-b", nil, peers)
	peers.to["node-a"], peers.to["node-b"] = a.cat, b.cat

	lobby := sdk.EntryTarget(lobbyType, "node-a")
	_, err := a.callT(lobby, "Join", "x")
	require.NoError(t, err)
	const id = "entry-lease"
	require.NoError(t, a.f.spotContext("").Spawn(ctx, pawnDesc, id))
	_, err = a.callT(pawnAt(id), "Hop", "a")
	require.NoError(t, err)

	// The lease ends (a pause, a partition); the node registers again.
	endLease(t, a)
	registerAgain(t, a)

	// A surviving node reclaims the ended lease's records, and spawns the Actor again.
	_, err = b.store.Reclaim(ctx, b.reg.Owner())
	require.NoError(t, err)
	_, err = b.call("room-1", "Join", "ann")
	require.NoError(t, err)
	require.NoError(t, b.f.spotContext("room-1").Spawn(ctx, pawnDesc, id))

	outB, err := b.callT(pawnAt(id), "Hop", "b")
	require.NoError(t, err)
	assert.Equal(t, `b hop 1 in Instance test.Room/"room-1"`, outB)
	_, err = a.callT(pawnAt(id), "Hop", "a")
	require.Error(t, err, "the old copy does not run beside the new one")
	require.Eventually(t, func() bool {
		_, here := a.cat.LocalActor(pawnAt(id))
		return !here
	}, 5*time.Second, 5*time.Millisecond, "the old copy ended")
	r, ok := pawnCloseReason(id)
	require.True(t, ok, "its closing callback ran")
	assert.Equal(t, sdk.CloseOwnerLost, r)
}

// An explicit close of an Actor and the close of its Spot race: its OnClose runs once, and
// the node's count of Actors ends at zero.
func TestActorCloseRacesItsSpotsClose(t *testing.T) {
	var ticks atomic.Int64
	n, sp := actorNode(t, &ticks)
	for i := range 20 {
		room := fmt.Sprintf("race-%d", i)
		_, err := n.call(room, "Join", "ann")
		require.NoError(t, err)
		require.NoError(t, sp.get(room).Spawn(ctx, pawnDesc, room))
		before := pawnCloses.Load()
		var wg sync.WaitGroup
		wg.Go(func() { _ = n.cat.CloseTarget(ctx, pawnAt(room)) })
		wg.Go(func() { _ = n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, room)) })
		wg.Wait()
		assert.Equal(t, before+1, pawnCloses.Load(), "round %d", i)
		assert.Zero(t, n.cat.ActiveActors(), "round %d", i)
	}
}

// lossyStore loses the answer of the first Actor move it commits, and then does not answer
// while dark is set.
type lossyStore struct {
	*store.Etcd
	lose, dark atomic.Bool
	readsToo   bool // dark covers reads, not only moves
}

func (l *lossyStore) wrap(e *store.Etcd) store.Store {
	l.Etcd = e
	return l
}

func (l *lossyStore) MoveActor(ctx context.Context, loc store.ActorLocation, from, to store.Host) (store.ActorLocation, error) {
	if l.dark.Load() {
		return store.ActorLocation{}, fmt.Errorf("%w: the store is dark", store.ErrOutcomeUnknown)
	}
	moved, err := l.Etcd.MoveActor(ctx, loc, from, to)
	if err == nil && l.lose.CompareAndSwap(true, false) {
		l.dark.Store(true)
		return store.ActorLocation{}, fmt.Errorf("%w: the answer was lost", store.ErrOutcomeUnknown)
	}
	return moved, err
}

func (l *lossyStore) LookupActor(ctx context.Context, key store.ActorKey) (store.ActorLocation, error) {
	if l.readsToo && l.dark.Load() {
		return store.ActorLocation{}, fmt.Errorf("%w: the store is dark", sdk.ErrStoreUnavailable)
	}
	return l.Etcd.LookupActor(ctx, key)
}

// A move whose commit answer is lost, while the store's writes (and, in one case, its reads)
// stay dark past the arrival's own wait: the Actor holds its messages, its arrival does not
// settle on its own while its move is under way on this node, and once the store tells that
// the commit happened, they follow it, every one.
func TestActorMoveWithALostCommitAnswerKeepsEveryMessage(t *testing.T) {
	for _, readsToo := range []bool{false, true} {
		t.Run(fmt.Sprintf("dark-reads=%v", readsToo), func(t *testing.T) {
			var ticks atomic.Int64
			lossy := &lossyStore{readsToo: readsToo}
			n, sp := roomsNode(t, &ticks, 200*time.Millisecond, lossy.wrap, "room-1", "room-2")
			require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "p1"))
			lossy.lose.Store(true)
			err := catClient{n.cat}.MoveActor(ctx, pawnAt("p1"), sdk.InstanceTarget(roomType, "room-2"))
			require.ErrorIs(t, err, sdk.ErrStoreUnavailable, "the outcome is not known yet")
			// The senders wait while the Actor holds their messages: they are answered once the
			// messages are admitted where the Actor is.
			var sends sync.WaitGroup
			sent := make(chan error, 5)
			for range 5 {
				sends.Go(func() { sent <- n.cat.Send(ctx, pawnAt("p1"), "Note", str("")) })
			}
			time.Sleep(600 * time.Millisecond) // past the arrival's wait (2 × OperationTimeout)
			assert.Empty(t, sent, "no sender is answered while the outcome is unknown")
			lossy.dark.Store(false)
			sends.Wait()
			close(sent)
			for err := range sent {
				require.NoError(t, err)
			}
			var out string
			require.Eventually(t, func() bool {
				out, err = n.callT(pawnAt("p1"), "Hop", "p1")
				return err == nil
			}, 5*time.Second, 10*time.Millisecond)
			assert.Equal(t, `p1 hop 6 in Instance test.Room/"room-2"`, out, "the move committed, and every held message followed it")
			assert.EqualValues(t, 1, n.cat.ActiveActors())
		})
	}
}

// D9: an Actor whose move committed, and whose new Spot closes before the move settles, is
// that Spot's member: it ends with it, its OnClose run once with the Spot's reason and the
// state it carried, rather than dropped as never served there. Its source, which learns of the
// commit later, does not serve it again. The close's wait for the move does not spend the
// budget of its members' callbacks (D3): a fellow member's OnClose of 0.6 of it ends in time.
func TestD9_AnArrivalWhoseMoveCommittedEndsWithItsClosingSpot(t *testing.T) {
	var ticks atomic.Int64
	lossy := &lossyStore{}
	n, sp := roomsNode(t, &ticks, 200*time.Millisecond, lossy.wrap, "room-1", "room-2")
	const id, fellow = "d9-arrival", "d9-fellow"
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, id))
	require.NoError(t, sp.get("room-2").Spawn(ctx, pawnDesc, fellow))
	slowPawnClose(fellow, 120*time.Millisecond)
	_, err := n.callT(pawnAt(id), "Hop", "")
	require.NoError(t, err)
	closesBefore := pawnCloses.Load()

	// The commit happens, but its answer is lost and the store's writes stay dark: the source
	// cannot tell the arrival to settle.
	lossy.lose.Store(true)
	err = catClient{n.cat}.MoveActor(ctx, pawnAt(id), sdk.InstanceTarget(roomType, "room-2"))
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable, "the outcome is not known yet")
	loc, err := n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
	require.NoError(t, err)
	require.Equal(t, "room-2", loc.Host.ID, "the move committed")

	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "room-2")))
	reason, ok := pawnCloseReason(id)
	require.True(t, ok, "the Actor's OnClose ran with its new Spot's close")
	assert.Equal(t, sdk.CloseExplicit, reason)
	_, ok = pawnCloseReason(fellow)
	require.True(t, ok, "the fellow member's OnClose ran")
	assert.NoError(t, pawnCloseErr(fellow), "the fellow member's OnClose ended within its budget")
	assert.Equal(t, closesBefore+2, pawnCloses.Load())

	// The store answers again: the source learns that its move committed and lets go.
	lossy.dark.Store(false)
	require.Eventually(t, func() bool { return n.cat.ActiveActors() == 0 }, 5*time.Second, 5*time.Millisecond)
	_, err = n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
	require.ErrorIs(t, err, sdk.ErrNotFound, "its record went with its Spot's")
	_, here := n.cat.LocalActor(pawnAt(id))
	assert.False(t, here, "its source does not serve it again")
	_, err = n.callT(pawnAt(id), "Hop", "")
	require.Error(t, err, "nowhere serves it")
	assert.Equal(t, closesBefore+2, pawnCloses.Load(), "its OnClose ran once")
}

// B8: a spawn whose record landed while its answer was lost leaves no record behind that
// names the Spot and no Actor: the node releases it, and the ID can be spawned again.
func TestB8_ASpawnOfUnknownOutcomeLeavesNoRecordBehind(t *testing.T) {
	var ticks atomic.Int64
	s := newGatedStore()
	n, sp := roomsNode(t, &ticks, 200*time.Millisecond, s.wrap, "room-1")
	const id = "spawn-unknown"
	s.loseSpawn.Store(true)
	require.ErrorIs(t, sp.get("room-1").Spawn(ctx, pawnDesc, id), sdk.ErrStoreUnavailable)
	require.Eventually(t, func() bool {
		_, err := n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
		return errors.Is(err, sdk.ErrNotFound)
	}, 10*time.Second, 10*time.Millisecond, "the record was released")
	require.Eventually(t, func() bool { return sp.get("room-1").Spawn(ctx, pawnDesc, id) == nil }, 5*time.Second, 10*time.Millisecond)
	out, err := n.callT(pawnAt(id), "Hop", "x")
	require.NoError(t, err)
	assert.Equal(t, `x hop 1 in Instance test.Room/"room-1"`, out)
}

// B3, B8: an explicit close of an Actor whose release failed frees the ID all the same: the
// node releases the record again, and the ID can be spawned again.
func TestB8_AnActorCloseWhoseReleaseFailedFreesItsID(t *testing.T) {
	var ticks atomic.Int64
	s := newGatedStore()
	n, sp := roomsNode(t, &ticks, 200*time.Millisecond, s.wrap, "room-1")
	const id = "close-unknown"
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, id))
	s.dark.Store(true)
	require.ErrorIs(t, n.cat.CloseTarget(ctx, pawnAt(id)), sdk.ErrStoreUnavailable)
	require.Eventually(t, func() bool {
		_, err := n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
		return errors.Is(err, sdk.ErrNotFound)
	}, 10*time.Second, 10*time.Millisecond, "the record was released")
	require.Eventually(t, func() bool { return sp.get("room-1").Spawn(ctx, pawnDesc, id) == nil }, 5*time.Second, 10*time.Millisecond)
}

// B8, C1: a spawn of an ID while another spawn of it is under way on the node is refused at
// once, so a failed one never releases in the background the record of the one that won,
// which would leave that Actor active with no record for another node to find.
func TestB8_ASecondSpawnOfAnIDUnderWayLeavesTheFirstItsRecord(t *testing.T) {
	var ticks atomic.Int64
	const id = "racing-spawn"
	entered, hold := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s := newGatedStore()
	mesh := uniqueMesh(t)
	// The first factory is held past a release's time, within its own OperationTimeout.
	n, sp := pawnsNode(t, nodeOpts{mesh: mesh, id: "node-a", wrap: s.wrap,
		cfg: func(c *catalog.Config) { c.OperationTimeout = 5 * time.Second }},
		func(ac sdk.ActorContext) (any, error) {
			if ac.ID() == id && first.CompareAndSwap(false, true) {
				close(entered)
				<-hold
			}
			return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
		})
	_, err := n.call("room-1", "Join", "ann")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- sp.get("room-1").Spawn(ctx, pawnDesc, id) }()
	<-entered
	s.failSpawn.Store(true)
	require.ErrorIs(t, sp.get("room-1").Spawn(ctx, pawnDesc, id), sdk.ErrAlreadyExists)
	time.Sleep(500 * time.Millisecond) // time for a release in the background, if one ran
	close(hold)
	require.NoError(t, <-done, "the first spawn succeeded")
	_, here := n.cat.LocalActor(pawnAt(id))
	require.True(t, here, "the first is active here")
	_, err = n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
	require.NoError(t, err, "the record of the live Actor is still there")
	b := peerNode(t, mesh, "node-b", nil, nil)
	_, err = b.call("room-2", "Join", "bob")
	require.NoError(t, err)
	require.ErrorIs(t, b.f.spotContext("room-2").Spawn(ctx, pawnDesc, id), sdk.ErrAlreadyExists, "no second activation")
}

// holdPeers holds a PrepareArrival until hold closes, then refuses it: the move rolls back.
type holdPeers struct {
	*movePeers
	entered, hold chan struct{}
}

func (p *holdPeers) PrepareArrival(_ context.Context, _ sdk.NodeID, _, _ sdk.Target, _ []byte, _ uint64) (store.Host, error) {
	close(p.entered)
	<-p.hold
	return store.Host{}, fmt.Errorf("%w: refused by the test", sdk.ErrNotServing)
}

// C1: an Entry Spot's Actor that is moving when its node's lease ends, whose move rolls back
// only after the end of the lease stopped waiting for it and the node registered again, ends
// at its first refusal.
func TestC1_AnEntryActorWhoseMoveRolledBackAfterItsLeaseEndedEndsAtItsRefusal(t *testing.T) {
	mesh := uniqueMesh(t)
	mp := &movePeers{to: map[sdk.NodeID]*catalog.Catalog{}}
	hp := &holdPeers{movePeers: mp, entered: make(chan struct{}), hold: make(chan struct{})}
	a := leasedPeerNode(t, mesh, "node-a", hp)
	b := peerNode(t, mesh, "node-b", nil, hp)
	mp.to["node-a"], mp.to["node-b"] = a.cat, b.cat

	lobby := sdk.EntryTarget(lobbyType, "node-a")
	_, err := a.callT(lobby, "Join", "x")
	require.NoError(t, err)
	_, err = b.call("room-1", "Join", "ann")
	require.NoError(t, err)
	const id = "entry-rolled-back"
	require.NoError(t, a.f.spotContext("").Spawn(ctx, pawnDesc, id))

	moved := make(chan error, 1)
	go func() { moved <- catClient{a.cat}.MoveActor(ctx, pawnAt(id), room("room-1")) }()
	<-hp.entered

	endLease(t, a)
	time.Sleep(time.Second) // watchLoss waits OperationTimeout for the moving Actor, and gives up
	registerAgain(t, a)

	close(hp.hold)
	require.Error(t, <-moved)
	_, err = a.callT(pawnAt(id), "Hop", "a")
	require.Error(t, err, "refused: its lease ended")
	require.Eventually(t, func() bool {
		_, here := a.cat.LocalActor(pawnAt(id))
		return !here
	}, 5*time.Second, 10*time.Millisecond, "the old copy ended at its refusal")
	assert.Zero(t, a.cat.ActiveActors())
}

// C1: the closing callback of an explicit close of an Entry Spot's Actor that waited while
// the lease its record names ended, and the node registered again, gets CloseOwnerLost and
// starts no turn under the new registration; the close leaves the record to the reclaimer.
func TestC1_AStaleEntryActorsExplicitCloseGetsOwnerLostAndStartsNoTurn(t *testing.T) {
	n := newNode(t, nodeOpts{lease: shortLease(), register: registerMovers,
		cfg: shortOperations})
	const id = "p-stale-close"
	host := lobbyBlocked(t, n, id)
	closed := make(chan error, 1)
	go func() { closed <- n.cat.CloseTarget(ctx, pawnAt(id)) }()
	time.Sleep(100 * time.Millisecond) // the callback queues behind the blocked turn
	endLease(t, n)
	registerAgain(t, n)
	time.Sleep(500 * time.Millisecond)
	lastTurn := host.TurnStart()
	close(n.f.release)
	var cerr error
	select {
	case cerr = <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the close did not end")
	}
	require.NoError(t, cerr)
	r, ok := pawnCloseReason(id)
	require.True(t, ok, "the closing callback ran")
	assert.Equal(t, sdk.CloseOwnerLost, r, "the Actor's lease ended: not an explicit close under the new registration")
	assert.Equal(t, lastTurn, host.TurnStart(), "a stale Actor's callback starts no turn under the new registration")
}

// C1: the closing callback of an Entry Spot's Actor that its lease's end closes, which runs
// only once the node registered again, starts no turn under the new registration.
func TestC1_AStaleEntryActorsClosingCallbackStartsNoTurn(t *testing.T) {
	mesh := uniqueMesh(t)
	a := leasedPeerNode(t, mesh, "node-a", nil)
	const id = "entry-stale-turn"
	// Block the Entry Spot so that the end of the lease cannot run the callback in time.
	host := lobbyBlocked(t, a, id)
	endLease(t, a)
	registerAgain(t, a)
	time.Sleep(500 * time.Millisecond)
	lastTurn := host.TurnStart()
	close(a.f.release)
	require.Eventually(t, func() bool { _, ok := pawnCloseReason(id); return ok }, 5*time.Second, 5*time.Millisecond)
	r, _ := pawnCloseReason(id)
	assert.Equal(t, sdk.CloseOwnerLost, r)
	assert.Equal(t, lastTurn, host.TurnStart(), "a stale Actor's callback starts no turn under the new registration")
}

// lobbyBlocked spawns the Actor id into n's Entry Spot, then blocks that Spot in a turn until
// n.f.release closes; it returns the Spot's context.
func lobbyBlocked(t *testing.T, n *node, id string) sdk.SpotContext {
	t.Helper()
	lobby := sdk.EntryTarget(lobbyType, "node-a")
	_, err := n.callT(lobby, "Join", "x")
	require.NoError(t, err)
	host := n.f.spotContext("")
	require.NotNil(t, host)
	require.NoError(t, host.Spawn(ctx, pawnDesc, id))
	require.NoError(t, n.cat.Send(ctx, lobby, "BlockSend", str("")))
	require.Equal(t, "", <-n.f.blocked)
	return host
}

// gatedStore can pause the next Spawn before it writes (pauseSpawn), fail it unwritten
// (failSpawn) or lose its answer once it is written (loseSpawn), pause the next LookupActor
// (pauseLookup), and fail the next ReleaseActor, unapplied, with its outcome unknown (dark).
// A pause says it began on entered and lasts until hold closes.
type gatedStore struct {
	*store.Etcd
	pauseSpawn, failSpawn, loseSpawn, pauseLookup, dark atomic.Bool
	entered, hold                                       chan struct{}
}

func newGatedStore() *gatedStore {
	return &gatedStore{entered: make(chan struct{}), hold: make(chan struct{})}
}

func (s *gatedStore) wrap(e *store.Etcd) store.Store {
	s.Etcd = e
	return s
}

func (s *gatedStore) pause() {
	close(s.entered)
	<-s.hold
}

func (s *gatedStore) Spawn(ctx context.Context, key store.ActorKey, host store.Host) (store.ActorLocation, error) {
	if s.failSpawn.CompareAndSwap(true, false) {
		return store.ActorLocation{}, fmt.Errorf("%w: etcd did not answer", sdk.ErrStoreUnavailable)
	}
	if s.pauseSpawn.CompareAndSwap(true, false) {
		s.pause()
	}
	loc, err := s.Etcd.Spawn(ctx, key, host)
	if err == nil && s.loseSpawn.CompareAndSwap(true, false) {
		return store.ActorLocation{}, fmt.Errorf("%w: %w: the answer was lost", store.ErrOutcomeUnknown, sdk.ErrStoreUnavailable)
	}
	return loc, err
}

func (s *gatedStore) LookupActor(ctx context.Context, key store.ActorKey) (store.ActorLocation, error) {
	if s.pauseLookup.CompareAndSwap(true, false) {
		s.pause()
	}
	return s.Etcd.LookupActor(ctx, key)
}

func (s *gatedStore) ReleaseActor(ctx context.Context, loc store.ActorLocation, host store.Host) error {
	if s.dark.CompareAndSwap(true, false) {
		return fmt.Errorf("%w: %w: the answer was lost", store.ErrOutcomeUnknown, sdk.ErrStoreUnavailable)
	}
	return s.Etcd.ReleaseActor(ctx, loc, host)
}

// arrivedAndClosed moves the Actor id, spawned into node-b's room-9, to node-a's Entry Spot,
// and closes it there with its release failing; it returns once the close did.
func arrivedAndClosed(t *testing.T, a, b *node, s *gatedStore, id string) {
	t.Helper()
	require.NoError(t, catClient{b.cat}.MoveActor(ctx, pawnAt(id), sdk.EntryTarget(lobbyType, "node-a")))
	_, here := a.cat.LocalActor(pawnAt(id))
	require.True(t, here)
	s.dark.Store(true)
	require.ErrorIs(t, a.cat.CloseTarget(ctx, pawnAt(id)), sdk.ErrStoreUnavailable)
}

// twoMovers is node-a, whose store is s's, and node-b, each with a Room active, and the Actor
// id spawned into node-b's.
func twoMovers(t *testing.T, s *gatedStore, id string) (a, b *node) {
	t.Helper()
	mesh := uniqueMesh(t)
	peers := &movePeers{to: map[sdk.NodeID]*catalog.Catalog{}}
	a = peerNode(t, mesh, "node-a", s.wrap, peers)
	b = peerNode(t, mesh, "node-b", nil, peers)
	peers.to["node-a"], peers.to["node-b"] = a.cat, b.cat
	_, err := a.call("room-1", "Join", "ann")
	require.NoError(t, err)
	_, err = b.call("room-9", "Join", "bob")
	require.NoError(t, err)
	require.NoError(t, b.f.spotContext("room-9").Spawn(ctx, pawnDesc, id))
	return a, b
}

func recordReleased(t *testing.T, n *node, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := n.store.LookupActor(ctx, store.ActorKey{Type: pawnType, ID: id})
		return errors.Is(err, sdk.ErrNotFound)
	}, 10*time.Second, 20*time.Millisecond, "the record of the closed Actor, which names a Spot that holds nothing, was released")
}

// B8: the release in the background of a closed Actor's record waits for a spawn of its ID
// under way on the node, which fails on that very record and releases nothing, and goes
// before any spawn that comes after it.
func TestB8_ACloseReleaseWaitsForASpawnOfItsIDUnderWay(t *testing.T) {
	const id = "close-behind-spawn"
	s := newGatedStore()
	a, b := twoMovers(t, s, id)
	s.pauseSpawn.Store(true)
	spawned := make(chan error, 1)
	go func() { spawned <- a.f.spotContext("room-1").Spawn(ctx, pawnDesc, id) }()
	<-s.entered
	arrivedAndClosed(t, a, b, s, id)
	close(s.hold)
	require.ErrorIs(t, <-spawned, sdk.ErrAlreadyExists, "the record was still there")
	// The waiting release goes first: a spawn that comes now does not take the ID before it.
	err := a.f.spotContext("room-1").Spawn(ctx, pawnDesc, id)
	if err == nil {
		_, here := a.cat.LocalActor(pawnAt(id))
		require.True(t, here, "the release had ended already, and the spawn took the ID")
		return
	}
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable, "refused while the release waits, not by the record")
	recordReleased(t, a, id)
}

// B8: the release in the background of a closed Actor's record waits for the release of an
// earlier spawn of its ID into another Spot, which owes this record nothing.
func TestB8_ACloseReleaseWaitsForAnotherSpotsRelease(t *testing.T) {
	const id = "close-behind-release"
	s := newGatedStore()
	a, b := twoMovers(t, s, id)
	s.failSpawn.Store(true)
	s.pauseLookup.Store(true)
	require.ErrorIs(t, a.f.spotContext("room-1").Spawn(ctx, pawnDesc, id), sdk.ErrStoreUnavailable)
	<-s.entered // the failed spawn's release in the background reads, paused
	arrivedAndClosed(t, a, b, s, id)
	close(s.hold)
	recordReleased(t, a, id)
}

// B8: a factory that panics, or fails, leaves the ID free to spawn again at once.
func TestB8_AFailedFactoryLeavesItsIDFree(t *testing.T) {
	var ticks, n atomic.Int64
	nd, sp := pawnsNode(t, nodeOpts{cfg: shortOperations},
		func(ac sdk.ActorContext) (any, error) {
			switch n.Add(1) {
			case 1:
				panic("boom")
			case 2:
				return nil, errors.New("no")
			}
			return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
		})
	_, err := nd.call("room-1", "Join", "ann")
	require.NoError(t, err)
	require.ErrorIs(t, sp.get("room-1").Spawn(ctx, pawnDesc, "fp"), sdk.ErrCreationFailed)
	require.ErrorIs(t, sp.get("room-1").Spawn(ctx, pawnDesc, "fp"), sdk.ErrCreationFailed)
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "fp"))
}

// B8: an Actor's factory that never returns fails its spawn at OperationTimeout, as a Spot's
// fails its creation: the ID is free to spawn again, and what the factory does when it
// returns at last (a timer it arms, the object it returns) is dropped.
func TestB8_AnActorFactoryThatNeverReturnsFailsItsSpawn(t *testing.T) {
	var ticks, lateTicks, builds atomic.Int64
	release, stuck := make(chan struct{}), make(chan struct{})
	returned := make(chan struct{})
	nd, sp := pawnsNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = time.Second }},
		func(ac sdk.ActorContext) (any, error) {
			if builds.Add(1) == 1 {
				close(stuck)
				<-release
				defer close(returned)
				ac.Every(time.Millisecond, func(context.Context) { lateTicks.Add(1) })
			}
			return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
		})
	_, err := nd.call("room-1", "Join", "ann")
	require.NoError(t, err)

	spawned := make(chan error, 1)
	go func() { spawned <- sp.get("room-1").Spawn(ctx, pawnDesc, "stuck") }()
	err = wait.For(t, spawned)
	require.ErrorIs(t, err, sdk.ErrCreationFailed)
	assert.Contains(t, err.Error(), "did not return within")
	wait.For(t, stuck)
	recordReleased(t, nd, "stuck")
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "stuck"), "the ID is free to spawn again")

	close(release)
	wait.For(t, returned)
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, lateTicks.Load(), "the timer the late factory armed ran")
	out, err := nd.callT(pawnAt("stuck"), "Hop", "x")
	require.NoError(t, err, "the second spawn's Actor serves")
	assert.Equal(t, "x hop 1 in "+room("room-1").String(), out, "and only it")
}

// B8, G5: Actor factories run in MaxConcurrentActivations places, as Spot creations do, and
// one left running by the spawn that stopped waiting for it keeps its place until it returns:
// a spawn meanwhile waits for a place within its time and fails for capacity, not as a failed
// creation, leaving its ID free; one that waits while the stuck factory returns gets the place.
func TestB8_StuckActorFactoriesAreBounded(t *testing.T) {
	var ticks atomic.Int64
	release := make(chan struct{})
	nd, sp := pawnsNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.OperationTimeout = time.Second
		c.MaxConcurrentActivations = 1
	}}, func(ac sdk.ActorContext) (any, error) {
		if ac.ID() == "stuck" {
			<-release
		}
		return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
	})
	_, err := nd.call("room-1", "Join", "ann")
	require.NoError(t, err)
	require.ErrorIs(t, sp.get("room-1").Spawn(ctx, pawnDesc, "stuck"), sdk.ErrCreationFailed)

	err = sp.get("room-1").Spawn(ctx, pawnDesc, "next")
	require.ErrorIs(t, err, sdk.ErrCapacityExceeded)
	assert.NotErrorIs(t, err, sdk.ErrCreationFailed, "its factory did not run")
	recordReleased(t, nd, "next")

	spawned := make(chan error, 1)
	go func() { spawned <- sp.get("room-1").Spawn(ctx, pawnDesc, "next") }()
	time.Sleep(100 * time.Millisecond) // it waits for the place
	close(release)
	require.NoError(t, wait.For(t, spawned), "the spawn that waited got the place the stuck factory gave back")
}

// B8: a spawn whose context ends while its factory runs fails with the context's error, not as
// a failed creation, and leaves the ID free.
func TestB8_ASpawnWhoseContextEndsDuringItsFactoryFailsWithItsContextsError(t *testing.T) {
	var ticks, builds atomic.Int64
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	nd, sp := pawnsNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = 5 * time.Second }},
		func(ac sdk.ActorContext) (any, error) {
			if builds.Add(1) == 1 {
				<-release
			}
			return &pawn{ac: ac, ticks: &ticks, closes: &pawnCloses}, nil
		})
	_, err := nd.call("room-1", "Join", "ann")
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = sp.get("room-1").Spawn(sctx, pawnDesc, "cancelled")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, sdk.ErrCreationFailed, "the factory did not fail")
	recordReleased(t, nd, "cancelled")
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "cancelled"), "the ID is free to spawn again")
}

// C1: an Actor whose move to another node committed is no longer this node's, though the
// move's end has not yet taken it out of the index here: a peer's message along the old route
// is redirected to where it went, and a local sender's looks for it again, rather than judged
// here (by the unhandled-message policy, for a method this node has no handler for).
func TestC1_AnActorWhoseMoveCommittedIsNotHeldHere(t *testing.T) {
	var ticks atomic.Int64
	n, sp := actorNode(t, &ticks)
	_, err := n.call("room-1", "Join", "ann")
	require.NoError(t, err)
	require.NoError(t, sp.get("room-1").Spawn(ctx, pawnDesc, "c1-committed"))
	require.NoError(t, n.cat.CheckOwner(pawnAt("c1-committed")), "it is here")

	require.True(t, n.cat.InCommittedMove(pawnAt("c1-committed"), "elsewhere", func() {
		var moved *catalog.MovedError
		require.ErrorAs(t, n.cat.CheckOwner(pawnAt("c1-committed")), &moved)
		assert.Equal(t, sdk.NodeID("elsewhere"), moved.Node)
		act, ok := n.cat.LocalActor(pawnAt("c1-committed"))
		require.True(t, ok)
		_, admitted, err := n.cat.DeliverActor(ctx, act, "Forgotten", str(""), true)
		assert.False(t, admitted)
		assert.True(t, catalog.IsActorMoved(err), "a local sender looks for it again: %v", err)
	}))
	require.True(t, n.cat.InCommittedMove(pawnAt("c1-committed"), n.reg.Owner().Node, func() {
		assert.NoError(t, n.cat.CheckOwner(pawnAt("c1-committed")), "a move into another Spot of this node keeps it here")
		act, ok := n.cat.LocalActor(pawnAt("c1-committed"))
		require.True(t, ok)
		_, _, err := n.cat.DeliverActor(ctx, act, "Forgotten", str(""), true)
		assert.ErrorIs(t, err, sdk.ErrUnhandled, "this node judges it")
	}))
}
