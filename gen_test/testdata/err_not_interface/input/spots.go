package bad

import "context"

// Room is a struct, not an interface.
//
//zlink:spot instance
type Room struct{ Name string }

// Handler is a func type.
//
//zlink:spot user
type Handler func(ctx context.Context) error

// Alias is an alias of an interface.
//
//zlink:spot entry
type Alias = Valid

// Valid is a plain interface without directive.
type Valid interface{ Do() }

// lower is not exported.
//
//zlink:spot instance
type lower interface{}

//zlink:spot instance
func NotAType() {}

//zlink:spot instance
var notAType = 1

var _ = notAType

// Count is a defined integer type.
//
//zlink:spot instance
type Count int

// Box is a generic interface.
type Box[T any] interface{ Put(T) }

// Boxed is defined from an instance of a generic interface.
//
//zlink:spot instance
type Boxed Box[int]

// Pointer is a pointer type, in parentheses.
//
//zlink:spot instance
type Pointer (*Valid)
