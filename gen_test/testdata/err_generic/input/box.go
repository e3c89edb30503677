package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Box is generic.
//
//zlink:spot instance
type Box[T any] interface {
	Put(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Generic is embedded with a type argument.
type Generic[T any] interface {
	Get(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Shelf embeds an instance of a generic interface and a constraint.
//
//zlink:spot instance
type Shelf interface {
	Generic[int]
}

// Number is a constraint interface.
//
//zlink:spot user
type Number interface {
	~int | ~int64
}
