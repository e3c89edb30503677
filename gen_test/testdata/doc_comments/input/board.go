// Package board is the doc comments case: doc comments with paragraphs, lists, code blocks and
// directives are copied without the directives.
package board

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Board is a message board.
//
// It keeps the last notes:
//   - at most 100,
//   - newest first.
//
// Use it like this:
//
//	b := OpenBoard(client, "general")
//	b.Post(ctx, &pb.Note{Text: "hi"})
//
//zlink:spot instance idle=90s
//go:noinline-is-not-a-zlink-directive
type Board interface {
	// Post adds a note.
	//
	// Notes longer than 1 KiB are cut.
	//
	//zlink:send
	Post(ctx context.Context, msg *pb.Note) error

	Read(ctx context.Context, req *pb.Ping) (*pb.Pong, error) // a line comment is not a doc comment
}
