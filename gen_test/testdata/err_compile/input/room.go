package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Room refers to a type that does not exist.
//
//zlink:spot instance
type Room interface {
	Join(ctx context.Context, req *pb.Missing) (*pb.Pong, error)
}

func broken() int { return "not an int" }
