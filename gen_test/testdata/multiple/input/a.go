// Package multi is the multiple files case: two input files with Spot types get one output
// each; a file without Spot types gets none.
package multi

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Alpha is an Instance Spot.
//
//zlink:spot instance
type Alpha interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Beta is a User Spot in the same file.
//
//zlink:spot user name=multi.B
type Beta interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
