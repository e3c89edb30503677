// Package arena is the case of channels beside Spot and Actor types in one package: a Spot
// type, an Actor type, a ClientServer channel and a Fanout channel, the two channels in the
// same file as the Spot type. A channel name may equal a stable type name: the runtime keeps
// them apart.
package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Arena is one match.
//
//zlink:spot instance name=arena.Arena
type Arena interface {
	// Enter lets a fighter in.
	Enter(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Scheduler starts matches.
//
//zlink:server channel=arena.Arena
type Scheduler interface {
	// Schedule schedules a match.
	Schedule(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
}

// Scores announces scores.
//
//zlink:fanout channel=arena.scores
type Scores interface {
	// Scored announces a score.
	//
	//zlink:send
	Scored(ctx context.Context, msg *pb.Note) error
}
