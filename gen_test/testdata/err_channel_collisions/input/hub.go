package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Results is a Fanout channel: it generates ResultsPublisher and ResultsPublisherRef.
//
//zlink:fanout
type Results interface {
	// Reported announces a result.
	Reported(ctx context.Context, msg *pb.Note) error
}

// ResultsPublisher is a Spot type: it generates ResultsPublisherRef too, and its name is the
// fanout's ResultsPublisher.
//
//zlink:spot user
type ResultsPublisher interface {
	// Publish publishes.
	Publish(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Matchmaker is a ClientServer channel whose generated names the package declares.
//
//zlink:server
type Matchmaker interface {
	// Find finds a match.
	Find(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// MatchmakerClient is the user's own func.
func MatchmakerClient() {}

// Matchmaker_ChannelDesc is the user's own var.
var Matchmaker_ChannelDesc = 1
