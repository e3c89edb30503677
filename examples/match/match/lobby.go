package match

import (
	"context"

	"github.com/zlink-go/zlink/sdk"
)

// lobby is a node's Entry Spot: players join here, and their Pawns wait here between matches.
type lobby struct {
	sc     sdk.SpotContext
	joined int64
}

// NewLobby makes a node's lobby.
func NewLobby(sc sdk.SpotContext) (Lobby, error) { return &lobby{sc: sc}, nil }

func (l *lobby) Join(ctx context.Context, req *JoinRequest) (*JoinReply, error) {
	if req.GetPlayer() == "" {
		return nil, sdk.Errorf("no_player", "join needs a player")
	}
	if _, err := SpawnPawn(ctx, l.sc, req.GetPlayer()); err != nil {
		return nil, err
	}
	l.joined++
	return &JoinReply{Node: string(l.sc.Node())}, nil
}

func (l *lobby) Joined(context.Context, *Empty) (*Count, error) { return &Count{N: l.joined}, nil }
