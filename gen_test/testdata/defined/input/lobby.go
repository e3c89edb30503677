// Package lobby is the defined case: Spot interfaces written in parentheses, or defined from
// another interface of their own package or of another, which they take their methods from.
package lobby

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/defined/far"
	"github.com/zlink-go/zlink/gen_test/testdata/embedded/base"
	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Member is what every lobby member can do.
type Member interface {
	// Join joins.
	Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
	// Leave leaves.
	//
	//zlink:send
	Leave(ctx context.Context, msg *pb.LeaveRequest) error
}

// Lobby is defined from Member, whose methods it has.
//
//zlink:spot instance
type Lobby Member

// Hall is written in parentheses.
//
//zlink:spot user
type Hall (interface {
	// Start starts the hall.
	Start(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
})

// Echo is defined from an interface of another package.
//
//zlink:spot instance
type Echo (base.Pinger)

// Guest is defined from Member, in parentheses; nothing generates it.
type Guest (Member)

// Visitor is defined from Member through Guest: Member's methods, docs and marks.
//
//zlink:spot instance
type Visitor Guest

// Note is an alias of an interface literal.
type Note = interface {
	// Post posts a note.
	//
	//zlink:send
	Post(ctx context.Context, msg *pb.Note) error
	// Read reads the notes.
	Read(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Board is defined from the alias Note: the literal's methods, docs and marks.
//
//zlink:spot instance
type Board Note

// Pinned is defined from an interface of another package through a type of its own.
type Pinned base.Pinger

// Desk is defined from base.Pinger through Pinned.
//
//zlink:spot instance
type Desk Pinned

// Kiosk is defined from base.Pinger through two types of another package, read from source.
//
//zlink:spot instance
type Kiosk far.Hop

// Tagged is a generic alias of an interface literal.
type Tagged[T any] = interface {
	// Tag tags a note.
	//
	//zlink:send
	Tag(ctx context.Context, msg T) error
}

// Stamped is an alias of an instance of Tagged.
type Stamped = Tagged[*pb.Note]

// Stand is defined from Stamped: the generic literal's methods, docs and marks.
//
//zlink:spot instance
type Stand Stamped
