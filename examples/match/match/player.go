package match

import (
	"context"
	"hash/fnv"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/sdk"
)

// player is a player's session: rating and history. It moves with its state when its node
// relocates.
type player struct {
	sc sdk.SpotContext
	st *Profile
}

// NewPlayer makes a player's session: a fresh one starts from a rating its ID gives.
func NewPlayer(sc sdk.SpotContext) (Player, error) {
	p := &player{sc: sc, st: &Profile{Rating: InitialRating(sc.ID())}}
	if b := sc.RestoredState(); b != nil {
		p.st = &Profile{}
		if err := proto.Unmarshal(b, p.st); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// InitialRating is a player's rating at the first login: between 1000 and 1599.
func InitialRating(id string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return 1000 + int64(h.Sum32()%600)
}

func (p *player) Record(_ context.Context, o *Outcome) (*Count, error) {
	p.st.History = append(p.st.History, o)
	if o.GetWon() {
		p.st.Rating += 24
	} else {
		p.st.Rating -= 8
	}
	return &Count{N: p.st.Rating}, nil
}

func (p *player) Profile(context.Context, *Empty) (*Profile, error) {
	return proto.Clone(p.st).(*Profile), nil
}

// MarshalState carries the rating and the history with the session.
func (p *player) MarshalState(context.Context) ([]byte, error) { return proto.Marshal(p.st) }
