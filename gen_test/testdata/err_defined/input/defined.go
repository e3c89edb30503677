// Package bad is the defined error case: an interface defined through other types is checked
// as the interface literal at the end of the chain declares it, its marks included.
package bad

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/err_defined/near"
	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Member has a method shaped as a one-way message, without its mark.
type Member interface {
	Notify(ctx context.Context, msg *pb.Note) error
}

// Guest is defined from Member.
type Guest Member

// Visitor is defined from Member through Guest.
//
//zlink:spot instance
type Visitor Guest

// Note is an alias of a literal with a request/reply method marked one-way.
type Note = interface {
	//zlink:send
	Ask(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Board is defined from the alias Note.
//
//zlink:spot instance
type Board Note

// Kiosk is defined from near.Relay, whose declarations are read from source.
//
//zlink:spot instance
type Kiosk near.Relay

// Generic is a generic alias of a literal whose one-way method has no mark.
type Generic[T any] = interface {
	Notify(ctx context.Context, msg T) error
}

// Pinged is an alias of an instance of Generic.
type Pinged = Generic[*pb.Note]

// Desk is defined from Pinged.
//
//zlink:spot instance
type Desk Pinged

// Stall is defined from near.Post, an instance of a generic alias read from source.
//
//zlink:spot instance
type Stall near.Post

// Counted is an alias of an instance of Generic whose type argument is no message.
type Counted = Generic[int]

// Shelf is defined from Counted.
//
//zlink:spot instance
type Shelf Counted

// Rack is defined from an instance of Generic whose type argument is no message.
//
//zlink:spot instance
type Rack Generic[string]

// Tally is defined from near.Counter, whose declarations are read from source.
//
//zlink:spot instance
type Tally near.Counter

// Cabinet embeds Counted.
//
//zlink:spot instance
type Cabinet interface {
	Counted
}

// Nested is a generic alias of a literal that embeds a literal naming its type parameter.
type Nested[T any] = interface {
	interface {
		//zlink:send
		Notify(ctx context.Context, msg T) error
	}
}

// Drawer is defined from an instance of Nested whose type argument is no message.
//
//zlink:spot instance
type Drawer Nested[bool]

// Shaped is a generic alias whose methods' shapes are wrong whatever their type arguments:
// those problems are the literal's.
type Shaped[T, R any] = interface {
	//zlink:send
	Ask(ctx context.Context, req *pb.Ping) (R, error)
	Many(ctx context.Context, msgs []T) (*pb.Pong, error)
	Call(ctx context.Context, fn func(T int)) (*pb.Pong, error)
}

// Counter is defined from an instance of Shaped with message type arguments.
//
//zlink:spot instance
type Counter Shaped[*pb.Note, *pb.Pong]

// Into is a generic alias whose one-way method takes a pointer to its type parameter.
type Into[X any] = interface {
	//zlink:send
	Send(ctx context.Context, msg *X) error
}

// Outer is a generic alias of an instance of Into with a pointer to its own parameter.
type Outer[T any] = Into[*T]

// Doubled is defined from an instance of Outer: its message is a pointer to a pointer, which
// Outer's declaration makes, not Doubled's type argument.
//
//zlink:spot instance
type Doubled Outer[pb.Note]

// PtrOf is a generic alias of an instance of Generic with a pointer to its own parameter.
type PtrOf[T any] = Generic[*T]

// Bytes is defined from an instance of PtrOf whose type argument is no message: the pointer
// PtrOf makes would be fine for a message.
//
//zlink:spot instance
type Bytes PtrOf[[]byte]

// Leaf is a generic alias whose one-way methods take its type parameter and a pointer to it.
type Leaf[X any] = interface {
	//zlink:send
	Bare(ctx context.Context, msg X) error
	//zlink:send
	Ptr(ctx context.Context, msg *X) error
}

// Mid and Top each pass a pointer to their parameter on.
type (
	Mid[U any] = Leaf[*U]
	Top[T any] = Mid[*T]
)

// TwoPtr is defined from an instance of Top: a pointer to a pointer, whatever its argument,
// which Mid makes.
//
//zlink:spot instance
type TwoPtr Top[pb.Note]
