package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Room has every wrong method shape.
//
//zlink:spot instance
type Room interface {
	// OneParam lacks the request.
	OneParam(ctx context.Context) (*pb.Pong, error)
	// ThreeParams has one too many.
	ThreeParams(ctx context.Context, req *pb.Ping, more *pb.Ping) (*pb.Pong, error)
	// NoContext takes a string first.
	NoContext(name string, req *pb.Ping) (*pb.Pong, error)
	// NoError returns no error.
	NoError(ctx context.Context, req *pb.Ping) *pb.Pong
	// NoResults returns nothing.
	NoResults(ctx context.Context, req *pb.Ping)
	// TooMany returns three results.
	TooMany(ctx context.Context, req *pb.Ping) (*pb.Pong, *pb.Pong, error)
	// Variadic takes many requests.
	Variadic(ctx context.Context, reqs ...*pb.Ping) (*pb.Pong, error)
	// SendWithReply is one-way but returns a reply.
	//
	//zlink:send
	SendWithReply(ctx context.Context, msg *pb.Note) (*pb.Pong, error)
	// ErrorOnly is one-way without saying so.
	ErrorOnly(ctx context.Context, msg *pb.Note) error
	// unexported cannot be called from other packages.
	unexported(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Close collides with RoomRef.Close.
	Close(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// ID collides with RoomRef.ID.
	ID(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
