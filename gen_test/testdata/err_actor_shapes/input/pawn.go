package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Pawn has every wrong method shape, as a Spot type would.
//
//zlink:actor
type Pawn interface {
	// OneParam lacks the request.
	OneParam(ctx context.Context) (*pb.Pong, error)
	// NoContext takes a string first.
	NoContext(name string, req *pb.Ping) (*pb.Pong, error)
	// NotProto takes a string request.
	NotProto(ctx context.Context, req *string) (*pb.Pong, error)
	// NoError returns no error.
	NoError(ctx context.Context, req *pb.Ping) *pb.Pong
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
	// Close collides with PawnRef.Close.
	Close(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// ID collides with PawnRef.ID.
	ID(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// SpawnPawn is the user's own func, where the generated one goes.
func SpawnPawn() {}
