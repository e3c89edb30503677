// Package feed is the send case: an Instance Spot with one-way methods only.
package feed

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Feed collects notes.
//
//zlink:spot instance
type Feed interface {
	// Post appends a note.
	//
	//zlink:send
	Post(ctx context.Context, msg *pb.Note) error

	// Ping is one-way too.
	//zlink:send
	Ping(ctx context.Context, ping *pb.Ping) error
}
