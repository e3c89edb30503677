package match

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/zlink-go/zlink/sdk"
)

// pawn is a player's piece. It keeps every round it got, so that a round delivered twice, or
// never, shows.
type pawn struct {
	ac sdk.ActorContext
	st pawnState
}

type pawnState struct {
	Seen       map[string]bool `json:"seen"`
	Duplicates int64           `json:"duplicates"`
	Moves      int64           `json:"moves"`
}

// NewPawn makes a Pawn, fresh or arriving by a move with its state.
func NewPawn(ac sdk.ActorContext) (Pawn, error) {
	p := &pawn{ac: ac, st: pawnState{Seen: map[string]bool{}}}
	if b := ac.RestoredState(); b != nil {
		if err := json.Unmarshal(b, &p.st); err != nil {
			return nil, err
		}
		p.st.Moves++
	}
	return p, nil
}

func (p *pawn) Play(_ context.Context, r *Round) error {
	key := r.GetMatch() + "/" + strconv.Itoa(int(r.GetRound()))
	if p.st.Seen[key] {
		p.st.Duplicates++
		return nil
	}
	p.st.Seen[key] = true
	return nil
}

func (p *pawn) Info(context.Context, *Empty) (*PawnInfo, error) {
	return &PawnInfo{Player: p.ac.ID(), Host: p.ac.Host().String(), Rounds: int64(len(p.st.Seen)),
		Duplicates: p.st.Duplicates, Moves: p.st.Moves}, nil
}

// MarshalState carries the Pawn's rounds with it when it moves.
func (p *pawn) MarshalState(context.Context) ([]byte, error) { return json.Marshal(p.st) }
