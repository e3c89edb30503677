package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Idler asks for an idle timeout.
//
//zlink:actor idle=5m
type Idler interface{}

// Colored has an unknown option, a kind word and a name given twice.
//
//zlink:actor color=red instance name=a.B name=a.C
type Colored interface{}

// Unnamed has an empty name.
//
//zlink:actor name=
type Unnamed interface{}

// Declared declares an Actor as a Spot kind.
//
//zlink:spot actor
type Declared interface{}

// Both is a Spot and an Actor.
//
//zlink:spot instance
//zlink:actor
type Both interface{}

// TwoActors has two actor directives.
//
//zlink:actor
//zlink:actor name=x.Y
type TwoActors interface{}

// Token is not an interface.
//
//zlink:actor
type Token struct{}

// hidden is not exported.
//
//zlink:actor
type hidden interface{}

// Shared takes the stable name of a Spot type.
//
//zlink:actor name=bad.Room
type Shared interface{}

// Room is a Spot type.
//
//zlink:spot user
type Room interface {
	// Join puts an actor directive on a method.
	//
	//zlink:actor
	Join(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

//zlink:actor
func misplaced() {}

var _ = misplaced
