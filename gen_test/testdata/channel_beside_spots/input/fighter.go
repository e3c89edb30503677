package arena

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Fighter is one player in a match.
//
//zlink:actor
type Fighter interface {
	// Hit hits the fighter.
	//
	//zlink:send
	Hit(ctx context.Context, msg *pb.Note) error
}
