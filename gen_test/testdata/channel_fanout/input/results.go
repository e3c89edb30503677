// Package match is the channel_fanout case: a Fanout channel named by channel=, whose methods
// are one-way with //zlink:send or without.
package match

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Results announces the outcome of matches to every node that cares.
//
//zlink:fanout channel=results
type Results interface {
	// Reported announces a finished match.
	Reported(ctx context.Context, msg *pb.Note) error
	// Cancelled announces a cancelled match.
	//
	//zlink:send
	Cancelled(ctx context.Context, msg *pb.LeaveRequest) error
	Tick(ctx context.Context, msg *pb.Ping) error
}
