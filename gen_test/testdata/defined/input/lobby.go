// Package lobby is the defined case: Spot interfaces written in parentheses, or defined from
// another interface of their own package or of another, which they take their methods from.
package lobby

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/embedded/base"
	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Member is what every lobby member can do.
type Member interface {
	// Join joins.
	Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
	// Leave leaves.
	//
	//zlink:send
	Leave(ctx context.Context, msg *pb.LeaveRequest) error
}

// Lobby is defined from Member, whose methods it has.
//
//zlink:spot instance
type Lobby Member

// Hall is written in parentheses.
//
//zlink:spot user
type Hall (interface {
	// Start starts the hall.
	Start(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
})

// Echo is defined from an interface of another package.
//
//zlink:spot instance
type Echo (base.Pinger)
