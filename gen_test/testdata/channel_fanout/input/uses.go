package match

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
	"github.com/zlink-go/zlink/sdk"
)

// board subscribes to the channel.
type board struct{}

func (board) Reported(context.Context, *pb.Note) error          { return nil }
func (board) Cancelled(context.Context, *pb.LeaveRequest) error { return nil }
func (board) Tick(context.Context, *pb.Ping) error              { return nil }

// Announce subscribes a manual subscriber and publishes a result. The package uses its
// generated API before any output exists.
func Announce(ctx context.Context, r sdk.Registrar, c sdk.Client, from sdk.NodeID) error {
	if err := SubscribeResults(r, board{}, sdk.ManualSubscriber(from)); err != nil {
		return err
	}
	return ResultsPublisher(c).Reported(ctx, &pb.Note{Text: "ann won"})
}

var _ = []any{ResultsChannelName, Results_Tick_FullMethodName, &Results_ChannelDesc}
