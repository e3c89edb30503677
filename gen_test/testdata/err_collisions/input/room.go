package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Room is fine in itself, but the package declares names the generator needs.
//
//zlink:spot instance
type Room interface {
	Join(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// RoomRef is the user's own type.
type RoomRef struct{}

// OpenRoom is the user's own func.
func OpenRoom() {}

// RoomIntentOf is fine: no generated name.
func RoomIntentOf() {}
