package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Room would be generated into room_zlink.go, which the user wrote.
//
//zlink:spot instance
type Room interface {
	Join(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
