// Package board is the case of an Actor type with a stable name of its own.
package board

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Piece is one piece of a board game.
//
//zlink:actor name=games.v2.Piece
type Piece interface {
	// Move moves the piece.
	Move(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
