package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Colored has an unknown option.
//
//zlink:server color=red
type Colored interface{}

// Idler asks for an idle timeout, names itself with name= and has a kind.
//
//zlink:fanout idle=5m name=a.B instance
type Idler interface{}

// Slashed has a channel name with a slash.
//
//zlink:server channel=a/b
type Slashed interface{}

// Empty has an empty channel name.
//
//zlink:fanout channel=
type Empty interface{}

// Bare has channel without a value.
//
//zlink:server channel
type Bare interface{}

// Twice gives channel= twice.
//
//zlink:server channel=x channel=y
type Twice interface{}

// First is named shared.
//
//zlink:server channel=shared
type First interface{}

// Second takes the name of First, although it is a Fanout channel.
//
//zlink:fanout channel=shared
type Second interface{}

// Room is a Spot type named shared too: type names and channel names are apart, no error.
//
//zlink:spot user name=shared
type Room interface{}

// ServedSpot is a channel and a Spot.
//
//zlink:server
//zlink:spot instance
type ServedSpot interface{}

// ActorFanout is an Actor and a channel.
//
//zlink:actor
//zlink:fanout
type ActorFanout interface{}

// Both is both kinds of channel.
//
//zlink:server
//zlink:fanout
type Both interface{}

// TwoServers has two server directives.
//
//zlink:server channel=one
//zlink:server channel=two
type TwoServers interface{}

// Token is not an interface.
//
//zlink:fanout
type Token struct{}

// hidden is not exported.
//
//zlink:server
type hidden interface{}

// Box is generic.
//
//zlink:server
type Box[T any] interface{}

// Alias is an alias.
//
//zlink:fanout
type Alias = Room

// Hub puts channel directives on methods, and an unknown one.
//
//zlink:server
type Hub interface {
	// Join has a server directive.
	//
	//zlink:server
	Join(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
	// Leave has a fanout directive.
	//
	//zlink:fanout
	//zlink:send
	Leave(ctx context.Context, msg *pb.Note) error
	// Talk has an unknown directive.
	//
	//zlink:client
	Talk(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

//zlink:fanout
func misplaced() {}

var _ = misplaced
