package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Room has an unknown option and a bad idle.
//
//zlink:spot instance color=red idle=soon
type Room interface {
	// Join has an unknown directive.
	//
	//zlink:xyz
	Join(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Leave has a send with an option.
	//
	//zlink:send now
	Leave(ctx context.Context, msg *pb.Note) error
	// Spot puts a spot directive on a method.
	//
	//zlink:spot user
	Spot(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Player has idle= on a User Spot.
//
//zlink:spot user idle=5m
type Player interface{}

// Lobby has a negative idle, a duplicate option and an unknown kind.
//
//zlink:spot lobby idle=-1s name=a name=b
type Lobby interface{}

// Nameless has no kind.
//
//zlink:spot name=x.Y
type Nameless interface{}

// Twice has two spot directives.
//
//zlink:spot user
//zlink:spot entry
type Twice interface{}

// Slashed has a stable name with a slash.
//
//zlink:spot entry name=a/b
type Slashed interface{}

// Sent puts a send directive on a type.
//
//zlink:send
type Sent interface{}

//zlink:send
func misplaced() {}

var _ = misplaced
