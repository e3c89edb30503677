package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Results has every wrong method shape of a Fanout channel.
//
//zlink:fanout channel=results
type Results interface {
	// Get is request/reply.
	Get(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// SendWithReply is marked one-way and returns a reply.
	//
	//zlink:send
	SendWithReply(ctx context.Context, msg *pb.Note) (*pb.Pong, error)
	// OneParam lacks the message.
	OneParam(ctx context.Context) error
	// NoContext takes a string first.
	NoContext(name string, msg *pb.Note) error
	// NotProto takes a string message.
	NotProto(ctx context.Context, msg *string) error
	// NoError returns nothing.
	NoError(ctx context.Context, msg *pb.Note)
	// Variadic takes many messages.
	Variadic(ctx context.Context, msgs ...*pb.Note) error
	// unexported cannot be called from other packages.
	unexported(ctx context.Context, msg *pb.Note) error
	// Fine is one-way without //zlink:send: no error.
	Fine(ctx context.Context, msg *pb.Note) error
}

// Queue is a ClientServer channel with the wrong shapes of a Spot type.
//
//zlink:server
type Queue interface {
	// ErrorOnly is one-way without saying so.
	ErrorOnly(ctx context.Context, msg *pb.Note) error
	// SendWithReply is one-way but returns a reply.
	//
	//zlink:send
	SendWithReply(ctx context.Context, msg *pb.Note) (*pb.Pong, error)
	// NotProto returns a string reply.
	NotProto(ctx context.Context, req *pb.Ping) (*string, error)
	// ID and Close are fine: a channel's reference has no methods of its own.
	ID(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	Close(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}
