package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// First takes the name shared.Name.
//
//zlink:spot instance name=shared.Name
type First interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Second takes it too.
//
//zlink:spot user name=shared.Name
type Second interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
