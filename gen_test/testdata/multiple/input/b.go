package multi

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Gamma is an Entry Spot in another file.
//
//zlink:spot entry
type Gamma interface {
	Ping(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
