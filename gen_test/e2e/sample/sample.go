// Package sample is the end-to-end sample of zlinkgen: one Spot type of each kind and an Actor
// type, whose generated code (sample_zlink.go, made by go generate and committed) the e2e tests
// run on the real runtime.
package sample

import "context"

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Room is a chat room: an Instance Spot, made by the first call that states create-intent.
//
//zlink:spot instance name=sample.Room
type Room interface {
	// Join adds a member to the room and answers how many it has.
	Join(ctx context.Context, req *JoinRequest) (*JoinReply, error)
	// Post delivers a note to the room, one-way.
	//
	//zlink:send
	Post(ctx context.Context, msg *Note) error
	// Fail answers the application error the request describes.
	Fail(ctx context.Context, req *FailRequest) (*FailReply, error)
}

// Player is a signed-in player: a User Spot, made by an explicit create.
//
//zlink:spot user
type Player interface {
	// Greet answers a greeting.
	Greet(ctx context.Context, req *GreetRequest) (*GreetReply, error)
}

// Lobby is the lobby of one node: an Entry Spot.
//
//zlink:spot entry
type Lobby interface {
	// Where answers the node the lobby runs on.
	Where(ctx context.Context, req *WhereRequest) (*WhereReply, error)
}

// Pawn is a piece that a Room's handler spawns: an Actor, a member of one Spot at a time.
//
//zlink:actor
type Pawn interface {
	// Greet answers a greeting.
	Greet(ctx context.Context, req *GreetRequest) (*GreetReply, error)
	// Post delivers a note to the pawn, one-way.
	//
	//zlink:send
	Post(ctx context.Context, msg *Note) error
}
