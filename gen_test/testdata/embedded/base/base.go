// Package base declares an interface that the embedded case imports and embeds.
package base

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Pinger answers pings.
type Pinger interface {
	// Ping answers a ping.
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Forget drops a note.
	//
	//zlink:send
	Forget(ctx context.Context, msg *pb.Note) error
}
