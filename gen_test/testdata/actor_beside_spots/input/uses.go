package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
	"github.com/zlink-go/zlink/sdk"
)

// arena serves an Arena: it spawns a Fighter into itself and moves it to the node's Lobby. The
// package uses its generated API before any output exists.
type arena struct{ sc sdk.SpotContext }

func (a *arena) Enter(ctx context.Context, req *pb.Ping) (*pb.Pong, error) {
	f, err := SpawnFighter(ctx, a.sc, req.GetText())
	if err != nil {
		return nil, err
	}
	if err := f.Hit(ctx, &pb.Note{Text: "welcome"}); err != nil {
		return nil, err
	}
	if err := MoveFighter(ctx, a.sc.Client(), f.ID(), sdk.EntryTarget(LobbyTypeName, a.sc.Node())); err != nil {
		return nil, err
	}
	return &pb.Pong{Text: f.ID()}, nil
}

// Register registers the package's types.
func Register(r sdk.Registrar, newFighter func(sdk.ActorContext) (Fighter, error)) error {
	if err := RegisterArena(r, func(sc sdk.SpotContext) (Arena, error) { return &arena{sc: sc}, nil }); err != nil {
		return err
	}
	return RegisterFighter(r, newFighter)
}

var _ = FighterOf
