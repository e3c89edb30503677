//go:build !nofeed

package bc

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Feed exists unless built with -tags nofeed.
//
//zlink:spot user
type Feed interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
