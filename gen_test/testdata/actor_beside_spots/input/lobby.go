package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Lobby is where fighters wait between matches.
//
//zlink:spot entry
type Lobby interface {
	// Queue queues a fighter.
	Queue(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
