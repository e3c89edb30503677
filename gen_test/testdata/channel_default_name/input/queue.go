// Package jobs is the channel_default_name case: channels without channel= are named
// <package name>.<Interface>.
package jobs

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Queue takes jobs.
//
//zlink:server
type Queue interface {
	// Push queues a job.
	Push(ctx context.Context, req *pb.Ping) (*pb.Pong, error)
}

// Done announces finished jobs.
//
//zlink:fanout
type Done interface {
	// Finished announces a finished job.
	Finished(ctx context.Context, msg *pb.Note) error
}
