package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
	"github.com/zlink-go/zlink/sdk"
)

// arena serves an Arena: it spawns a Fighter, schedules the match on the channel and
// publishes the score. The package uses its generated API before any output exists.
type arena struct{ sc sdk.SpotContext }

func (a *arena) Enter(ctx context.Context, req *pb.Ping) (*pb.Pong, error) {
	f, err := SpawnFighter(ctx, a.sc, req.GetText())
	if err != nil {
		return nil, err
	}
	if _, err := SchedulerClient(a.sc.Client()).Schedule(ctx, &pb.JoinRequest{Name: f.ID()}); err != nil {
		return nil, err
	}
	return &pb.Pong{}, ScoresPublisher(a.sc.Client()).Scored(ctx, &pb.Note{Text: f.ID()})
}

// Register registers the package's types and channels.
func Register(r sdk.Registrar, s Scheduler, scores Scores, newFighter func(sdk.ActorContext) (Fighter, error)) error {
	if err := RegisterArena(r, func(sc sdk.SpotContext) (Arena, error) { return &arena{sc: sc}, nil }); err != nil {
		return err
	}
	if err := RegisterFighter(r, newFighter); err != nil {
		return err
	}
	if err := RegisterSchedulerServer(r, s); err != nil {
		return err
	}
	return SubscribeScores(r, scores)
}
