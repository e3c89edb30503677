// Package arena is the case of an Actor type beside Spot types in one package, one of them in
// the same file.
package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Arena is one match. Its players are Fighter Actors spawned into it.
//
//zlink:spot instance idle=2m
type Arena interface {
	// Enter spawns a fighter.
	Enter(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Fighter is one player in a match.
//
//zlink:actor
type Fighter interface {
	// Hit hits the fighter.
	//
	//zlink:send
	Hit(ctx context.Context, msg *pb.Note) error
	// Health answers the fighter's health.
	Health(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
