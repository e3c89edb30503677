// Package relay is the imported messages case: messages of two packages that are both named
// pb, with the same message names, are each qualified with their own import.
package relay

import (
	"context"

	altpb "github.com/zlink-go/zlink/gen_test/testdata/alt/pb"
	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Relay passes pings between two protocols.
//
//zlink:spot instance
type Relay interface {
	// Forward takes a ping of one protocol and answers a pong of the other.
	Forward(ctx context.Context, req *pb.Ping) (*altpb.Pong, error)
	// Back goes the other way.
	Back(ctx context.Context, req *altpb.Ping) (*pb.Pong, error)
}
