// Package bc is the build constraints case: the output of a file constrained by its name or by
// a //go:build line builds exactly when its input does.
package bc

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Room exists on Linux only.
//
//zlink:spot instance
type Room interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
