// Package arena is the embedded case: a Spot interface that embeds an interface of its own
// package and one of another package; the methods are flattened in declaration order.
package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/embedded/base"
	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Member is what every arena member can do.
type Member interface {
	// Join joins.
	Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
	// Leave leaves.
	//
	//zlink:send
	Leave(ctx context.Context, msg *pb.LeaveRequest) error
}

// Arena is a match arena.
//
//zlink:spot instance
type Arena interface {
	// Start starts the match.
	Start(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	Member
	base.Pinger
	// Shout is declared after the embedded interfaces.
	//
	//zlink:send
	Shout(ctx context.Context, msg *pb.Note) error
}
