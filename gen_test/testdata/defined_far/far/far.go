// Package far declares the interface at the end of the chain, behind an unexported name.
package far

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Hop is defined from hidden.
type Hop (hidden)

type hidden interface {
	// Ping answers a ping.
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Forget drops a note.
	//
	//zlink:send
	Forget(ctx context.Context, msg *pb.Note) error
}
