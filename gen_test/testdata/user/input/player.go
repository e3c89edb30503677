// Package game is the user case: a User Spot whose messages come from another package.
package game

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Player is one signed-in player. It exists from an explicit create until it is closed.
//
//zlink:spot user
type Player interface {
	// Greet answers a ping with a pong.
	Greet(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Notify delivers a note to the player.
	//
	//zlink:send
	Notify(ctx context.Context, msg *pb.Note) error
}
