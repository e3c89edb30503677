// Package game is the actor case: an Actor type alone, whose messages come from another
// package.
package game

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Pawn is one piece on a board. It lives in whichever Spot it was spawned into or moved to.
//
//zlink:actor
type Pawn interface {
	// Greet answers a ping with a pong.
	Greet(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Notify delivers a note to the pawn.
	//
	//zlink:send
	Notify(ctx context.Context, msg *pb.Note) error
}
