// Package near declares, behind a defined type, an interface whose one-way method has no mark.
package near

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Relay is defined from member.
type Relay member

type member interface {
	Notify(ctx context.Context, msg *pb.Note) error
}

// Post is defined from an instance of a generic alias.
type Post posted

type posted = generic[*pb.Note]

type generic[T any] = interface {
	Notify(ctx context.Context, msg T) error
}

// Counter is defined from an instance of a generic alias, through another, whose type argument
// is no message.
type Counter counted

type counted = relayed[int]

type relayed[U any] = generic[U]
