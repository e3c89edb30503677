package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Plain is a struct that is not a protobuf message.
type Plain struct{ Name string }

// Room takes and returns things that are not protobuf messages.
//
//zlink:spot instance
type Room interface {
	// String takes a string.
	String(ctx context.Context, req string) (*pb.Pong, error)
	// NotPointer takes a message by value.
	NotPointer(ctx context.Context, req pb.Ping) (*pb.Pong, error)
	// NotMessage takes a pointer to a plain struct.
	NotMessage(ctx context.Context, req *Plain) (*pb.Pong, error)
	// BadReply replies with a map.
	BadReply(ctx context.Context, req *pb.Ping) (map[string]int, error)
	// BadSend sends an int.
	//
	//zlink:send
	BadSend(ctx context.Context, msg int) error
}
