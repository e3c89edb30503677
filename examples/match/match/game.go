package match

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// RoundEvery is how often a match plays a round.
const RoundEvery = 50 * time.Millisecond

// game is one match. Its state moves with it when its node relocates, and its factory arms
// its round timer again on the node it arrives at.
type game struct {
	sc    sdk.SpotContext
	st    gameState
	timer sdk.Timer
}

type gameState struct {
	Spec     *MatchSpec `json:"spec"`
	Round    int32      `json:"round"`
	Finished bool       `json:"finished"`
	// Unsent are the rounds a Pawn refused unrun (its move under way): sent again first.
	Unsent []*Round `json:"unsent,omitempty"`
	To     []string `json:"to,omitempty"`
	// Recording says the last round was played and the result is being recorded with each
	// player; Unrecorded are the indexes of the players whose record was refused unrun (a node
	// relocating, a session moving), recorded again at the next tick; Retries counts those
	// ticks; Ratings are the players' ratings, as each record answered.
	Recording  bool    `json:"recording,omitempty"`
	Unrecorded []int   `json:"unrecorded,omitempty"`
	Retries    int     `json:"retries,omitempty"`
	Ratings    []int64 `json:"ratings,omitempty"`
}

// NewMatch makes a match, fresh or arriving with its state.
func NewMatch(sc sdk.SpotContext) (Match, error) {
	g := &game{sc: sc}
	if b := sc.RestoredState(); b != nil {
		if err := json.Unmarshal(b, &g.st); err != nil {
			return nil, err
		}
		if g.st.Spec != nil && !g.st.Finished {
			g.timer = sc.Every(RoundEvery, g.round, sdk.KeepAlive())
		}
	}
	return g, nil
}

func (g *game) self() sdk.Target { return sdk.InstanceTarget(MatchTypeName, g.sc.ID()) }

// Start takes the players' Pawns in, then plays a round every RoundEvery.
func (g *game) Start(ctx context.Context, spec *MatchSpec) (*Ack, error) {
	if g.st.Spec != nil {
		return nil, sdk.Errorf("started", "match %s has started already", g.sc.ID())
	}
	if len(spec.GetPlayers()) == 0 || len(spec.GetRatings()) != len(spec.GetPlayers()) || spec.GetRounds() <= 0 {
		return nil, sdk.Errorf("bad_spec", "match %s: a match needs players, their ratings and rounds", g.sc.ID())
	}
	for i, p := range spec.GetPlayers() {
		if err := MovePawn(ctx, g.sc.Client(), p, g.self()); err != nil {
			// The Pawns that moved in go back; the matchmaker queues the players again.
			g.release(ctx, spec.GetPlayers()[:i])
			return nil, err
		}
	}
	g.st.Spec = spec
	g.timer = g.sc.Every(RoundEvery, g.round, sdk.KeepAlive())
	return &Ack{}, nil
}

// round sends each Pawn its input; after the last round the match records its result and
// ends.
func (g *game) round(ctx context.Context) {
	if g.st.Finished || g.st.Spec == nil {
		return
	}
	if g.st.Recording {
		g.record(ctx)
		return
	}
	unsent, to := g.st.Unsent, g.st.To
	g.st.Unsent, g.st.To = nil, nil
	for i, r := range unsent {
		g.play(ctx, to[i], r)
	}
	if g.st.Round < g.st.Spec.GetRounds() {
		g.st.Round++
		for _, p := range g.st.Spec.GetPlayers() {
			g.play(ctx, p, &Round{Match: g.sc.ID(), Round: g.st.Round})
		}
	}
	if g.st.Round >= g.st.Spec.GetRounds() && len(g.st.Unsent) == 0 {
		g.st.Recording = true
		g.st.Ratings = append([]int64(nil), g.st.Spec.GetRatings()...)
		for i := range g.st.Spec.GetPlayers() {
			g.st.Unrecorded = append(g.st.Unrecorded, i)
		}
		g.record(ctx)
	}
}

// play sends a round to a Pawn; one refused unrun (the Pawn, or this match, is moving) is kept
// to be sent again at the next tick. Any other error is the runtime's word that it is gone.
func (g *game) play(ctx context.Context, pawn string, r *Round) {
	err := PawnOf(g.sc.Client(), pawn).Play(ctx, r)
	switch {
	case err == nil:
	case refusedUnrun(err):
		g.st.Unsent, g.st.To = append(g.st.Unsent, r), append(g.st.To, pawn)
	default:
		g.sc.Logger().Warn("a round did not reach a pawn", "pawn", pawn, "err", err)
	}
}

// refusedUnrun reports whether a message was turned away without running, because its target,
// its node or this match is moving: the runtime never sends such a message again by itself,
// and it is safe to send it again. (The runtime answers ErrClosed only for a message it did
// not run: refused at admission, or dropped from a closing Spot's queue.)
func refusedUnrun(err error) bool {
	return errors.Is(err, sdk.ErrClosed) || errors.Is(err, sdk.ErrStaleRoute) || errors.Is(err, sdk.ErrNotServing)
}

// retryWarnEvery is how many ticks of records refused unrun pass between warnings: a match
// that cannot finish says why.
const retryWarnEvery = 20

// record records the result with each player not recorded yet; a record refused unrun (a node
// relocating, a session moving) is tried again at the next tick. Once every player has it, the
// match finishes.
func (g *game) record(ctx context.Context) {
	spec := g.st.Spec
	winner := spec.GetPlayers()[pick(g.sc.ID(), len(spec.GetPlayers()))]
	var again []int
	var refused error
	for _, i := range g.st.Unrecorded {
		p := spec.GetPlayers()[i]
		out, err := PlayerOf(g.sc.Client(), p).Record(ctx, &Outcome{Match: g.sc.ID(), Won: p == winner, Rounds: spec.GetRounds()})
		switch {
		case err == nil:
			g.st.Ratings[i] = out.GetN()
		case refusedUnrun(err):
			again, refused = append(again, i), err
		default:
			g.sc.Logger().Warn("a player's record missed a match", "player", p, "err", err)
		}
	}
	g.st.Unrecorded = again
	if len(again) == 0 {
		g.finish(ctx, winner)
		return
	}
	if g.st.Retries++; g.st.Retries%retryWarnEvery == 0 {
		g.sc.Logger().Warn("a match's result is still refused by some players; it tries again", "players", len(again), "ticks", g.st.Retries, "err", refused)
	}
}

// finish publishes the result to every leaderboard, sends the Pawns back to this node's lobby
// and queues the players again.
func (g *game) finish(ctx context.Context, winner string) {
	g.st.Finished, g.st.Recording = true, false
	if g.timer != nil {
		g.timer.Stop()
	}
	spec, ratings := g.st.Spec, g.st.Ratings
	if err := ResultsPublisher(g.sc.Client()).Finished(ctx, &MatchResult{Match: g.sc.ID(), Winner: winner, Players: spec.GetPlayers(), Node: string(g.sc.Node())}); err != nil {
		g.sc.Logger().Warn("a leaderboard missed a result", "err", err)
	}
	g.release(ctx, spec.GetPlayers())
	for i, p := range spec.GetPlayers() {
		if _, err := MatchmakerClient(g.sc.Client()).Enqueue(ctx, &Ticket{Player: p, Rating: ratings[i]}, sdk.Key(Band(ratings[i]))); err != nil {
			g.sc.Logger().Warn("a player was not queued again", "player", p, "err", err)
		}
	}
}

// release sends the Pawns back to this node's lobby: the moves run once this turn ends.
func (g *game) release(ctx context.Context, players []string) {
	lobby := sdk.EntryTarget(LobbyTypeName, g.sc.Node())
	for _, p := range players {
		if err := MovePawn(ctx, g.sc.Client(), p, lobby); err != nil {
			g.sc.Logger().Warn("a pawn did not go back to the lobby", "pawn", p, "err", err)
		}
	}
}

func (g *game) State(context.Context, *Empty) (*MatchState, error) {
	st := &MatchState{Round: g.st.Round, Finished: g.st.Finished}
	if g.st.Spec != nil {
		st.Players = g.st.Spec.GetPlayers()
	}
	return st, nil
}

// MarshalState carries the match's spec and progress when its node relocates.
func (g *game) MarshalState(context.Context) ([]byte, error) { return json.Marshal(g.st) }

// pick chooses the winner of a match by its ID: the same on every node.
func pick(id string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// Band is the rating band of a rating: players of one band meet, on one matchmaker server.
func Band(rating int64) string { return fmt.Sprintf("band-%d", rating/100) }
