// Package match is the channel_server case: a ClientServer channel named by channel=, with a
// request/reply method and a one-way one.
package match

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Matchmaker pairs players for matches. Any node may serve it.
//
//zlink:server channel=matchmaker
type Matchmaker interface {
	// Find finds a match for a player.
	Find(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
	// Enqueue queues a player, one-way.
	//
	//zlink:send
	Enqueue(ctx context.Context, msg *pb.Note) error
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
