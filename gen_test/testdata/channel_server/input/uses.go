package match

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
	"github.com/zlink-go/zlink/sdk"
)

// matchmaker serves the channel.
type matchmaker struct{}

func (matchmaker) Find(context.Context, *pb.JoinRequest) (*pb.JoinReply, error) {
	return &pb.JoinReply{}, nil
}

func (matchmaker) Enqueue(context.Context, *pb.Note) error { return nil }

func (matchmaker) Ping(context.Context, *pb.Ping) (*pb.Pong, error) { return &pb.Pong{}, nil }

// Serve registers a server of weight 2 and finds a match through the channel, sticky by the
// player's name. The package uses its generated API before any output exists.
func Serve(ctx context.Context, r sdk.Registrar, c sdk.Client) (*pb.JoinReply, error) {
	if err := RegisterMatchmakerServer(r, matchmaker{}, sdk.Weight(2)); err != nil {
		return nil, err
	}
	mm := MatchmakerClient(c)
	if err := mm.Enqueue(ctx, &pb.Note{Text: "ann"}); err != nil {
		return nil, err
	}
	return mm.Find(ctx, &pb.JoinRequest{Name: "ann"}, sdk.Key("ann"))
}

var _ = []any{MatchmakerChannelName, Matchmaker_Find_FullMethodName, &Matchmaker_ChannelDesc}
