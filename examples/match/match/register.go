package match

import (
	"errors"

	"github.com/zlink-go/zlink/sdk"
)

// Register registers the match application on a node: its Spot and Actor types, its
// leaderboard, and, with mm set, a matchmaker server of weight weight.
func Register(r sdk.Registrar, board *Leaderboard, mm *Matchmaking, weight int) error {
	errs := []error{
		RegisterLobby(r, NewLobby),
		RegisterPawn(r, NewPawn),
		RegisterPlayer(r, NewPlayer),
		RegisterMatch(r, NewMatch),
		SubscribeResults(r, board),
	}
	if mm != nil {
		errs = append(errs, RegisterMatchmakerServer(r, mm, sdk.Weight(weight)))
	}
	return errors.Join(errs...)
}
