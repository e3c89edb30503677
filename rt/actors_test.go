package rt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
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

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// The Actor fixture: tally is an Actor that counts numbered messages ("caller:seq") and checks
// that each caller's arrive once and in order; its state moves with it (sdk.Relocatable).
// Room (Instance) and Lobby (Entry) are Spots whose handlers spawn tallies into themselves and
// move them out from their own turn.

const (
	tallyType = "test.Tally"
	roomType  = "test.Room"
	lobbyType = "test.Lobby"
)

type tallyState struct {
	Total    int64            `json:"total"`
	Last     map[string]int64 `json:"last"`
	Disorder int64            `json:"disorder"` // a number that was not its caller's next: lost, repeated or reordered
	Seen     []string         `json:"seen"`     // the first messages out of order, where they ran
	Moves    int64            `json:"moves"`    // arrivals by a move
	Host     string           `json:"host"`
	Node     string           `json:"node"`
}

type tally struct {
	ac    sdk.ActorContext
	state tallyState
	fx    *actorFixture
}

func (t *tally) add(msg string) {
	caller, seq, _ := strings.Cut(msg, ":")
	n, _ := strconv.ParseInt(seq, 10, 64)
	if n != t.state.Last[caller]+1 {
		t.state.Disorder++
		if len(t.state.Seen) < 8 {
			t.state.Seen = append(t.state.Seen, fmt.Sprintf("%s after %d on %s in %s (move %d)", msg, t.state.Last[caller], t.ac.Node(), t.ac.Host(), t.state.Moves))
		}
	}
	if n > t.state.Last[caller] {
		t.state.Last[caller] = n
	}
	t.state.Total++
}

func (t *tally) MarshalState(context.Context) ([]byte, error) { return json.Marshal(t.state) }

func (t *tally) OnClose(_ context.Context, reason sdk.CloseReason) {
	t.fx.closed(tallyType+"/"+t.ac.ID(), reason)
}

var tallyDesc = &sdk.SpotDesc{Name: tallyType, Kind: sdk.KindActor, Methods: []sdk.MethodDesc{
	{
		Name: "Add", OneWay: true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			impl.(*tally).add(req.(*wrapperspb.StringValue).GetValue())
			return nil, nil
		},
	},
	{
		Name:       "AddR",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			t := impl.(*tally)
			t.add(req.(*wrapperspb.StringValue).GetValue())
			return wrapperspb.Int64(t.state.Total), nil
		},
	},
	{
		Name:       "Get",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			t := impl.(*tally)
			st := t.state
			st.Host, st.Node = t.ac.Host().String(), string(t.ac.Node())
			b, err := json.Marshal(st)
			return wrapperspb.String(string(b)), err
		},
	},
}}

// spotOps is what Room and Lobby handlers do: "spawn <id>" and "move <id> <spot>", answered
// "ok" or the error's text, so that the caller sees the runtime's error itself.
func spotOps(sc sdk.SpotContext, fx *actorFixture) func(any, context.Context, proto.Message) (proto.Message, error) {
	return func(_ any, ctx context.Context, req proto.Message) (proto.Message, error) {
		f := strings.Fields(req.(*wrapperspb.StringValue).GetValue())
		var err error
		switch {
		case len(f) == 2 && f[0] == "spawn":
			err = sc.Spawn(ctx, tallyDesc, f[1])
		case len(f) == 3 && f[0] == "move":
			err = sc.Client().MoveActor(ctx, sdk.ActorTarget(tallyType, f[1]), spotTarget(f[2]))
		case len(f) == 2 && f[0] == "close":
			err = sc.Client().CloseSpot(ctx, sdk.ActorTarget(tallyType, f[1]))
		case len(f) == 4 && f[0] == "sendafter":
			// "sendafter <id> <ms> <n>": wait, then send n numbered Adds to the Actor from this turn.
			ms, _ := strconv.Atoi(f[2])
			n, _ := strconv.Atoi(f[3])
			time.Sleep(time.Duration(ms) * time.Millisecond)
			for i := 1; i <= n && err == nil; i++ {
				err = sc.Client().Send(ctx, sdk.ActorTarget(tallyType, f[1]), "Add", wrapperspb.String("own:"+strconv.Itoa(i)))
			}
		default:
			err = fmt.Errorf("bad op %q", f)
		}
		return wrapperspb.String(answer(err)), nil
	}
}

// answer is how a fixture handler reports err: "ok", or the name of the sentinel it matches.
func answer(err error) string {
	for _, s := range []error{sdk.ErrAlreadyExists, sdk.ErrNotFound, sdk.ErrInvalidArgument, sdk.ErrInvalidID, sdk.ErrCapacityExceeded, sdk.ErrClosed} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// spotTarget parses "room:<id>", "room+:<id>" (create-intent) and "lobby:<node>".
func spotTarget(s string) sdk.Target {
	kind, id, _ := strings.Cut(s, ":")
	switch kind {
	case "room":
		return sdk.InstanceTarget(roomType, id)
	case "room+":
		return sdk.InstanceIntent(roomType, id)
	case "lobby":
		return sdk.EntryTarget(lobbyType, sdk.NodeID(id))
	}
	return sdk.Target{}
}

type spotObj struct {
	sc sdk.SpotContext
	fx *actorFixture
}

func (s *spotObj) OnClose(_ context.Context, reason sdk.CloseReason) {
	s.fx.closed(s.sc.Type()+"/"+s.sc.ID(), reason)
}

func spotDesc(name string, kind sdk.SpotKind) *sdk.SpotDesc {
	return &sdk.SpotDesc{Name: name, Kind: kind, Methods: []sdk.MethodDesc{{
		Name:       "Do",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			s := impl.(*spotObj)
			return spotOps(s.sc, s.fx)(impl, ctx, req)
		},
	}}}
}

var (
	roomDesc  = spotDesc(roomType, sdk.KindInstance)
	lobbyDesc = spotDesc(lobbyType, sdk.KindEntry)
)

// actorFixture registers the fixture's types and records closes in order.
type actorFixture struct {
	mu     sync.Mutex
	closes []string
}

func (fx *actorFixture) closed(what string, reason sdk.CloseReason) {
	fx.mu.Lock()
	fx.closes = append(fx.closes, what+" "+reason.String())
	fx.mu.Unlock()
}

func (fx *actorFixture) closeLog() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return append([]string(nil), fx.closes...)
}

// register registers Tally and Room, and Lobby when withLobby.
func (fx *actorFixture) register(withLobby bool, opts ...sdk.TypeOption) func(sdk.Registrar) error {
	return func(r sdk.Registrar) error {
		if err := r.RegisterActor(tallyDesc, func(ac sdk.ActorContext) (any, error) {
			t := &tally{ac: ac, fx: fx, state: tallyState{Last: map[string]int64{}}}
			if b := ac.RestoredState(); b != nil {
				if err := json.Unmarshal(b, &t.state); err != nil {
					return nil, err
				}
				t.state.Moves++
			}
			return t, nil
		}); err != nil {
			return err
		}
		mk := func(sc sdk.SpotContext) (any, error) { return &spotObj{sc: sc, fx: fx}, nil }
		if err := r.RegisterSpot(roomDesc, mk, opts...); err != nil {
			return err
		}
		if withLobby {
			return r.RegisterSpot(lobbyDesc, mk)
		}
		return nil
	}
}

func do(t *testing.T, c sdk.Client, spot sdk.Target, op string, opts ...sdk.CallOption) string {
	t.Helper()
	out, err := c.Call(ctx, spot, "Do", wrapperspb.String(op), opts...)
	require.NoError(t, err)
	return out.(*wrapperspb.StringValue).GetValue()
}

func tallyOf(id string) sdk.Target { return sdk.ActorTarget(tallyType, id).WithDesc(tallyDesc) }

func getTally(c sdk.Client, id string) (tallyState, error) {
	out, err := c.Call(ctx, tallyOf(id), "Get", wrapperspb.String(""))
	if err != nil {
		return tallyState{}, err
	}
	var st tallyState
	err = json.Unmarshal([]byte(out.(*wrapperspb.StringValue).GetValue()), &st)
	return st, err
}

func actorCluster(t *testing.T, n int, fx *actorFixture, mutate func(i int, cfg *rt.Config)) *cluster {
	return newCluster(t, n, func(i int, cfg *rt.Config) {
		cfg.Register = fx.register(true)
		if os.Getenv("ACTOR_DEBUG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		if mutate != nil {
			mutate(i, cfg)
		}
	})
}

// An Actor spawned from a Spot's handler takes calls and one-way messages on that Spot's
// queue, from any node; a second spawn of its ID is ErrAlreadyExists; its close runs its
// OnClose and releases it, and its Spot serves on.
func TestActorSpawnCallAndClose(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	room := sdk.InstanceIntent(roomType, "r1")
	require.Equal(t, "ok", do(t, a, room, "spawn t1"), "the first spawn")
	require.Equal(t, sdk.ErrAlreadyExists.Error(), do(t, a, room, "spawn t1"))
	require.Equal(t, sdk.ErrInvalidID.Error(), do(t, a, room, "spawn "+strings.Repeat("x", sdk.MaxIDBytes+1)))

	for i, h := range []*rt.Host{a, b, a, b} {
		require.NoError(t, h.Send(ctx, tallyOf("t1"), "Add", wrapperspb.String("x:"+strconv.Itoa(i+1))))
	}
	st, err := getTally(b, "t1")
	require.NoError(t, err)
	assert.EqualValues(t, 4, st.Total)
	assert.Zero(t, st.Disorder)
	assert.Equal(t, sdk.InstanceTarget(roomType, "r1").String(), st.Host)

	require.NoError(t, b.CloseSpot(ctx, tallyOf("t1")))
	assert.Contains(t, fx.closeLog(), tallyType+"/t1 Explicit")
	_, err = getTally(a, "t1")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	_, err = getTally(b, "t1")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	require.ErrorIs(t, a.CloseSpot(ctx, tallyOf("t1")), sdk.ErrNotFound)
	// Its Spot serves on, and the ID may be spawned again.
	require.Equal(t, "ok", do(t, b, sdk.InstanceTarget(roomType, "r1"), "spawn t1"))
	st, err = getTally(b, "t1")
	require.NoError(t, err)
	assert.Zero(t, st.Total)
}

// G3: Placement.ActiveActorCount counts the Actors active in this process only.
func TestG3_ActiveActorCount(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	for i := range 5 {
		require.Equal(t, "ok", do(t, a, sdk.EntryTarget(lobbyType, a.LocalNode()), fmt.Sprintf("spawn g%d", i)))
	}
	require.Equal(t, "ok", do(t, b, sdk.EntryTarget(lobbyType, b.LocalNode()), "spawn h0"))
	assert.Equal(t, 5, a.MeshStatus().Placement.ActiveActorCount)
	assert.Equal(t, 1, b.MeshStatus().Placement.ActiveActorCount)
	require.NoError(t, a.MoveActor(ctx, tallyOf("g0"), sdk.EntryTarget(lobbyType, b.LocalNode())))
	require.Eventually(t, func() bool {
		return a.MeshStatus().Placement.ActiveActorCount == 4 && b.MeshStatus().Placement.ActiveActorCount == 2
	}, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, b.CloseSpot(ctx, tallyOf("h0")))
	assert.Equal(t, 1, b.MeshStatus().Placement.ActiveActorCount)
	assert.Equal(t, 4, a.MeshStatus().Placement.ActiveActorCount)
}

// D2: an Instance Spot with an Actor member is never idle-evicted; once the Actor leaves, it
// is, like the Spot beside it that never had one.
func TestD2_SpotWithActorsIsNotEvicted(t *testing.T) {
	fx := &actorFixture{}
	c := newCluster(t, 1, func(_ int, cfg *rt.Config) {
		cfg.Register = fx.register(true, sdk.WithIdleTimeout(150*time.Millisecond))
	})
	h := c.hosts[0]
	require.Equal(t, "ok", do(t, h, sdk.InstanceIntent(roomType, "held"), "spawn d1"))
	require.Equal(t, "ok", do(t, h, sdk.InstanceIntent(roomType, "empty"), "spawn d2"))
	require.NoError(t, h.CloseSpot(ctx, tallyOf("d2")))
	require.Eventually(t, func() bool {
		return contains(fx.closeLog(), roomType+"/empty IdleEvicted")
	}, 10*time.Second, 10*time.Millisecond, "the room without Actors is evicted")
	time.Sleep(500 * time.Millisecond) // several timeouts and scans
	assert.NotContains(t, fx.closeLog(), roomType+"/held IdleEvicted")
	st, err := getTally(h, "d1")
	require.NoError(t, err)
	assert.Equal(t, sdk.InstanceTarget(roomType, "held").String(), st.Host)

	// The Actor leaves for the Lobby: now the room is evicted.
	require.NoError(t, h.MoveActor(ctx, tallyOf("d1"), sdk.EntryTarget(lobbyType, h.LocalNode())))
	require.Eventually(t, func() bool {
		return contains(fx.closeLog(), roomType+"/held IdleEvicted")
	}, 10*time.Second, 10*time.Millisecond)
	_, err = getTally(h, "d1")
	require.NoError(t, err)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// A Spot that closes takes its Actors with it: their OnClose runs first, with the Spot's
// reason, and afterwards a call to one is ErrNotFound on every node.
func TestClosedHostSpotTakesItsActors(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	room := sdk.InstanceIntent(roomType, "doomed")
	require.Equal(t, "ok", do(t, a, room, "spawn c1"))
	require.Equal(t, "ok", do(t, a, room, "spawn c2"))
	_, err := getTally(b, "c1")
	require.NoError(t, err)

	require.NoError(t, b.CloseSpot(ctx, room.Plain()))
	log := fx.closeLog()
	require.Len(t, log, 3)
	assert.ElementsMatch(t, []string{tallyType + "/c1 Explicit", tallyType + "/c2 Explicit"}, log[:2])
	assert.Equal(t, roomType+"/doomed Explicit", log[2], "the Spot's own OnClose runs last")
	for _, h := range []*rt.Host{a, b} {
		for _, id := range []string{"c1", "c2"} {
			_, err := getTally(h, id)
			require.ErrorIs(t, err, sdk.ErrNotFound, "%s from %s", id, h.LocalNode())
		}
	}
	assert.Zero(t, a.MeshStatus().Placement.ActiveActorCount)
	// The IDs are free again.
	require.Equal(t, "ok", do(t, b, sdk.InstanceIntent(roomType, "other"), "spawn c1"))
}

// K1: of 32 goroutines on 3 nodes that spawn one Actor ID into different Spots at once,
// exactly one wins and the others get ErrAlreadyExists.
func TestK1_ActorSpawnRaceHasOneWinner(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 3, fx, nil)
	var wg sync.WaitGroup
	answers := make([]string, 32)
	start := make(chan struct{})
	for i := range answers {
		h := c.hosts[i%3]
		room := sdk.InstanceIntent(roomType, fmt.Sprintf("race-%d", i%6))
		// Each room is made on its own node first, so the race is among the spawns.
		do(t, h, room, "spawn warm-"+strconv.Itoa(i))
		wg.Go(func() {
			<-start
			out, err := h.Call(ctx, room, "Do", wrapperspb.String("spawn k1"))
			if err != nil {
				answers[i] = err.Error()
				return
			}
			answers[i] = out.(*wrapperspb.StringValue).GetValue()
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, a := range answers {
		if a == "ok" {
			won++
			continue
		}
		assert.Equal(t, sdk.ErrAlreadyExists.Error(), a)
	}
	assert.Equal(t, 1, won, "%v", answers)
	_, err := getTally(c.hosts[2], "k1")
	require.NoError(t, err)
}

// Bad moves get a clear typed error and change nothing: into an Entry Spot of a node that does
// not host its type, into a missing Spot, to an invalid ID, to where the Actor is, of a missing
// Actor, and of something that is not an Actor.
func TestActorMoveBadInputChangesNothing(t *testing.T) {
	fx := &actorFixture{}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.Register = fx.register(i == 0) // node-b has no Lobby
	})
	a, b := c.hosts[0], c.hosts[1]
	home := sdk.InstanceIntent(roomType, "home")
	require.Equal(t, "ok", do(t, a, home, "spawn m1", sdk.OnNode(a.LocalNode())))

	err := a.MoveActor(ctx, tallyOf("m1"), sdk.EntryTarget(lobbyType, b.LocalNode()))
	require.ErrorIs(t, err, sdk.ErrNotFound)
	assert.Contains(t, err.Error(), "Entry Spot "+lobbyType)
	require.ErrorIs(t, b.MoveActor(ctx, tallyOf("m1"), sdk.InstanceTarget(roomType, "nowhere")), sdk.ErrNotFound)
	require.ErrorIs(t, a.MoveActor(ctx, tallyOf("m1"), sdk.InstanceTarget(roomType, strings.Repeat("x", sdk.MaxIDBytes+1))), sdk.ErrInvalidID)
	require.ErrorIs(t, b.MoveActor(ctx, tallyOf("m1"), home), sdk.ErrInvalidArgument)
	require.ErrorIs(t, a.MoveActor(ctx, tallyOf("ghost"), home), sdk.ErrNotFound)
	require.ErrorIs(t, a.MoveActor(ctx, home, home), sdk.ErrInvalidArgument)
	require.ErrorIs(t, a.MoveActor(ctx, tallyOf("m1"), tallyOf("m2")), sdk.ErrInvalidArgument)

	require.NoError(t, b.Send(ctx, tallyOf("m1"), "Add", wrapperspb.String("x:1")))
	st, err := getTally(b, "m1")
	require.NoError(t, err)
	assert.Equal(t, home.Plain().String(), st.Host, "it stayed where it was")
	assert.EqualValues(t, 1, st.Total)
	assert.Zero(t, st.Moves)
	assert.Equal(t, 1, a.MeshStatus().Placement.ActiveActorCount)
	assert.Zero(t, b.MeshStatus().Placement.ActiveActorCount)

	// A move to a missing Instance Spot that states create-intent makes it.
	require.NoError(t, b.MoveActor(ctx, tallyOf("m1"), sdk.InstanceIntent(roomType, "fresh")))
	st, err = getTally(b, "m1")
	require.NoError(t, err)
	assert.Equal(t, sdk.InstanceTarget(roomType, "fresh").String(), st.Host)
	assert.EqualValues(t, 1, st.Total, "its state came along")
	assert.EqualValues(t, 1, st.Moves)
}

// A Spot's handler moves one of its Actors out from its own turn: the move is checked there
// (a bad one answers at once) and runs once that turn ended, without waiting for it.
func TestActorMoveFromItsSpotsOwnTurn(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	lobbyA := sdk.EntryTarget(lobbyType, a.LocalNode())
	require.Equal(t, "ok", do(t, a, lobbyA, "spawn o1"))
	require.NoError(t, a.Send(ctx, tallyOf("o1"), "Add", wrapperspb.String("x:1")))
	require.Equal(t, sdk.ErrNotFound.Error(), do(t, a, lobbyA, "move o1 room:missing"))
	require.Equal(t, sdk.ErrInvalidArgument.Error(), do(t, a, lobbyA, "move o1 lobby:"+string(a.LocalNode())))
	require.Equal(t, "ok", do(t, a, lobbyA, "move o1 lobby:"+string(b.LocalNode())))
	var st tallyState
	require.Eventually(t, func() bool {
		var err error
		st, err = getTally(a, "o1")
		return err == nil && st.Node == string(b.LocalNode())
	}, 5*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 1, st.Total)
	// And back, by the Lobby of node-b, into a room made by the move.
	require.Equal(t, "ok", do(t, b, sdk.EntryTarget(lobbyType, b.LocalNode()), "move o1 room+:from-lobby"))
	require.Eventually(t, func() bool {
		var err error
		st, err = getTally(b, "o1")
		return err == nil && st.Host == sdk.InstanceTarget(roomType, "from-lobby").String()
	}, 5*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 2, st.Moves)
}

// A turn of an Actor's Spot that sends to the Actor while a move of it waits for that very turn
// is answered at once (the move cannot take the Actor before the turn ends): no deadlock, and
// the messages follow the Actor in order.
func TestActorOwnSpotSendsWhileAMoveWaitsForItsTurn(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	room := sdk.InstanceIntent(roomType, "own")
	require.Equal(t, "ok", do(t, a, room, "spawn o1", sdk.OnNode(a.LocalNode())))
	do(t, b, sdk.InstanceIntent(roomType, "dest"), "spawn warm", sdk.OnNode(b.LocalNode()))
	turn := make(chan string, 1)
	go func() { turn <- do(t, a, room.Plain(), "sendafter o1 300 5") }()
	time.Sleep(100 * time.Millisecond) // the turn sleeps; the move below waits for it
	start := time.Now()
	require.NoError(t, a.MoveActor(ctx, tallyOf("o1"), sdk.InstanceTarget(roomType, "dest")))
	assert.Equal(t, "ok", <-turn)
	assert.Less(t, time.Since(start), 10*time.Second, "neither waited for the other until a timeout")
	var st tallyState
	require.Eventually(t, func() bool {
		var err error
		st, err = getTally(b, "o1")
		return err == nil && st.Total == 5
	}, 10*time.Second, 10*time.Millisecond, "%+v", st)
	assert.Zero(t, st.Disorder, "%v", st.Seen)
	assert.Equal(t, sdk.InstanceTarget(roomType, "dest").String(), st.Host)
}

// Eight callers send numbered one-way messages to one Actor while it moves back and forth 50
// times between Spots on two nodes: every message runs exactly once and in its caller's order,
// and the Actor's state, carried by MarshalState, counts them all.
func TestActorMoveUnderLoadAcrossTwoNodes(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	roomA, roomB := sdk.InstanceIntent(roomType, "ra"), sdk.InstanceIntent(roomType, "rb")
	do(t, a, roomA, "spawn warm-a", sdk.OnNode(a.LocalNode()))
	do(t, b, roomB, "spawn warm-b", sdk.OnNode(b.LocalNode()))
	require.Equal(t, "ok", do(t, a, roomA, "spawn mover"))
	moveUnderLoad(t, c, "mover", []sdk.Target{roomB.Plain(), roomA.Plain()})
}

// The same between two Spots of one node, where the Actor's place in the node's index passes
// from the one that leaves to the one that arrives.
func TestActorMoveUnderLoadBetweenSpotsOfOneNode(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a := c.hosts[0]
	room, lobby := sdk.InstanceIntent(roomType, "r1"), sdk.EntryTarget(lobbyType, a.LocalNode())
	require.Equal(t, "ok", do(t, a, room, "spawn local-mover", sdk.OnNode(a.LocalNode())))
	moveUnderLoad(t, c, "local-mover", []sdk.Target{lobby, room.Plain()})
}

// moveUnderLoad moves the Actor id 50 times, to spots in turn, while eight callers on the
// cluster's nodes send it numbered messages (one-way from half of them, requests from the
// others), and checks that each ran once and in order.
func moveUnderLoad(t *testing.T, c *cluster, id string, spots []sdk.Target) {
	callers := 8
	if n, err := strconv.Atoi(os.Getenv("ACTOR_CALLERS")); err == nil {
		callers = n
	}
	stop := make(chan struct{})
	sent := make([]atomic.Int64, callers)
	var refused atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		h := c.hosts[i%len(c.hosts)]
		wg.Go(func() {
			name := "c" + strconv.Itoa(i)
			for n := int64(1); ; {
				select {
				case <-stop:
					return
				default:
				}
				msg := wrapperspb.String(name + ":" + strconv.FormatInt(n, 10))
				var err error
				if i%2 == 0 {
					err = h.Send(ctx, tallyOf(id), "Add", msg)
				} else {
					_, err = h.Call(ctx, tallyOf(id), "AddR", msg) // its reply comes back across the move
				}
				switch {
				case err == nil:
					sent[i].Store(n)
					n++
					// Paced like a player's input, so that eight callers do not starve the
					// nodes' lease keep-alives on a small machine.
					time.Sleep(time.Millisecond)
				case errors.Is(err, sdk.ErrStaleRoute):
					refused.Add(1) // refused unrun: the caller sends it again
				default:
					t.Errorf("%s: message %d: %v", name, n, err)
					return
				}
			}
		})
	}
	const moves = 50
	for i := range moves {
		require.NoError(t, c.hosts[i%len(c.hosts)].MoveActor(ctx, tallyOf(id), spots[i%len(spots)]), "move %d", i)
	}
	close(stop)
	wg.Wait()
	var total int64
	for i := range callers {
		total += sent[i].Load()
	}
	var last tallyState
	require.Eventually(t, func() bool {
		st, err := getTally(c.hosts[0], id)
		last = st
		return err == nil && st.Total == total
	}, 10*time.Second, 10*time.Millisecond, "%d sent, the Actor has %+v", total, &last)
	st := last
	assert.Zero(t, st.Disorder, "no message lost, repeated or out of its caller's order: %v", st.Seen)
	assert.EqualValues(t, moves, st.Moves)
	assert.Equal(t, spots[(moves-1)%len(spots)].Plain().String(), st.Host)
	for i := range callers {
		assert.Equal(t, sent[i].Load(), st.Last["c"+strconv.Itoa(i)])
	}
	t.Logf("%d messages across %d moves, %d refused unrun and sent again", total, moves, refused.Load())
}

// Two moves of one Actor at once: each waits for the other or fails cleanly, and the Actor
// ends in exactly one Spot, active on exactly one node, with every message it took.
func TestConcurrentMovesOfOneActor(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, nil)
	a, b := c.hosts[0], c.hosts[1]
	spots := []sdk.Target{sdk.InstanceIntent(roomType, "x"), sdk.InstanceIntent(roomType, "y"), sdk.EntryTarget(lobbyType, a.LocalNode()), sdk.EntryTarget(lobbyType, b.LocalNode())}
	do(t, a, spots[0], "spawn warm-x", sdk.OnNode(a.LocalNode()))
	do(t, b, spots[1], "spawn warm-y", sdk.OnNode(b.LocalNode()))
	require.Equal(t, "ok", do(t, a, spots[0], "spawn both"))
	var wg sync.WaitGroup
	var moved atomic.Int64
	for i := range 8 {
		h := c.hosts[i%2]
		wg.Go(func() {
			err := h.MoveActor(ctx, tallyOf("both"), spots[i%4].Plain())
			switch {
			case err == nil:
				moved.Add(1)
			case errors.Is(err, sdk.ErrInvalidArgument): // it was there already
			default:
				t.Errorf("move %d: %v", i, err)
			}
			if err := h.Send(ctx, tallyOf("both"), "Add", wrapperspb.String("m"+strconv.Itoa(i)+":1")); err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	assert.Positive(t, moved.Load())
	// The condition runs on a goroutine of its own, which may still run when Eventually gives
	// up and reports: the last state it saw is handed over atomically.
	var last atomic.Pointer[tallyState]
	settled := assert.Eventually(t, func() bool {
		st, err := getTally(a, "both")
		last.Store(&st)
		return err == nil && st.Total == 8
	}, 10*time.Second, 10*time.Millisecond)
	require.True(t, settled, "the last state seen: %+v", last.Load())
	st, err := getTally(b, "both")
	require.NoError(t, err)
	assert.Zero(t, st.Disorder)
	assert.EqualValues(t, moved.Load(), st.Moves)
	require.Eventually(t, func() bool {
		return a.MeshStatus().Placement.ActiveActorCount+b.MeshStatus().Placement.ActiveActorCount == 3
	}, 5*time.Second, 10*time.Millisecond, "one activation of it, beside the two warm ones")
}

// MaxActiveActors caps a node's Actors: a spawn over it, and a move into a Spot of it, fail
// with ErrCapacityExceeded and change nothing.
func TestMaxActiveActorsCapsSpawnsAndArrivals(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 2, fx, func(i int, cfg *rt.Config) {
		if i == 1 {
			cfg.MaxActiveActors = 1
		}
	})
	a, b := c.hosts[0], c.hosts[1]
	lobbyB := sdk.EntryTarget(lobbyType, b.LocalNode())
	require.Equal(t, "ok", do(t, b, lobbyB, "spawn cap1"))
	require.Equal(t, sdk.ErrCapacityExceeded.Error(), do(t, b, lobbyB, "spawn cap2"))
	require.Equal(t, "ok", do(t, a, sdk.EntryTarget(lobbyType, a.LocalNode()), "spawn cap2"))
	err := a.MoveActor(ctx, tallyOf("cap2"), lobbyB)
	require.ErrorIs(t, err, sdk.ErrCapacityExceeded)
	st, err := getTally(b, "cap2")
	require.NoError(t, err)
	assert.Equal(t, string(a.LocalNode()), st.Node, "it stayed")
	assert.Equal(t, 1, b.MeshStatus().Placement.ActiveActorCount)
}

// A Spot's handler closes one of its Actors from its own turn: the close runs after that turn,
// and the Actor is gone soon after, its OnClose run.
func TestActorClosedFromItsSpotsOwnTurn(t *testing.T) {
	fx := &actorFixture{}
	c := actorCluster(t, 1, fx, nil)
	h := c.hosts[0]
	room := sdk.InstanceIntent(roomType, "closer")
	require.Equal(t, "ok", do(t, h, room, "spawn gone"))
	require.NoError(t, h.Send(ctx, tallyOf("gone"), "Add", wrapperspb.String("x:1")))
	require.Equal(t, "ok", do(t, h, room, "close gone"))
	require.Eventually(t, func() bool {
		_, err := getTally(h, "gone")
		return errors.Is(err, sdk.ErrNotFound)
	}, 5*time.Second, 5*time.Millisecond)
	// A message that finds it closing is refused as not found before its OnClose has run.
	require.Eventually(t, func() bool { return slices.Contains(fx.closeLog(), tallyType+"/gone Explicit") },
		5*time.Second, 5*time.Millisecond, "%v", fx.closeLog())
	require.Eventually(t, func() bool { return do(t, h, room, "spawn gone") == "ok" }, 5*time.Second, 5*time.Millisecond,
		"its ID is free again once its record is released")
}

// The node that holds an Actor is killed: calls to the Actor end with a typed error by their
// deadline, never hang, until the reclaimer removes the dead node's records; then the Actor
// is not found, and its ID can be spawned again on a live node.
func TestActorOfAKilledNodeIsReclaimed(t *testing.T) {
	c := newCluster(t, 1, func(_ int, cfg *rt.Config) {
		ledger := cfg.Register
		cfg.Register = func(r sdk.Registrar) error { return errors.Join(ledger(r), rttest.RegisterBeacon(r, nil)) }
	})
	p := nodeProcess(t, c, "proc-a")
	h := c.hosts[0]
	waitPeers(t, h, "proc-a")
	spawn := func(node sdk.NodeID) string {
		out, err := h.Call(ctx, sdk.EntryTarget(rttest.BeaconType, node), "Spawn", wrapperspb.String("m1"))
		require.NoError(t, err)
		return out.(*wrapperspb.StringValue).GetValue()
	}
	where := func() (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		out, err := h.Call(cctx, sdk.ActorTarget(rttest.MarkType, "m1").WithDesc(&rttest.MarkDesc), "Where", wrapperspb.String(""))
		if err != nil {
			return "", err
		}
		return out.(*wrapperspb.StringValue).GetValue(), nil
	}
	require.Equal(t, "ok", spawn("proc-a"))
	node, err := where()
	require.NoError(t, err)
	require.Equal(t, "proc-a", node)

	p.Kill()
	deadline := time.Now().Add(30 * time.Second)
	typed := 0
	for {
		require.True(t, time.Now().Before(deadline), "the dead node's Actor was never reclaimed")
		start := time.Now()
		_, err := where()
		require.Error(t, err, "a killed node answered")
		assert.Less(t, time.Since(start), 5*time.Second, "a call outlived its deadline")
		if errors.Is(err, sdk.ErrNotFound) {
			break
		}
		require.True(t, rttest.NotRun(err) || errors.Is(err, sdk.ErrOwnerUnavailable) || errors.Is(err, context.DeadlineExceeded), "%v", err)
		typed++
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d calls ended with a typed error before the reclaim", typed)
	require.Equal(t, "ok", spawn(h.LocalNode()), "its ID is free again")
	node, err = where()
	require.NoError(t, err)
	assert.Equal(t, string(h.LocalNode()), node)
}
