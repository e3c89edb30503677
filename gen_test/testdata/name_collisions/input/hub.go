// Package hub is the name collisions case: the package declares names that the generated file
// would otherwise use for its imports, names of its locals, which shadow them only in
// functions that do not refer to them, and a type named like a message of another package.
package hub

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Hub connects players.
//
//zlink:spot user
type Hub interface {
	// Join uses the message of package pb, not the local JoinRequest.
	Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
}

// JoinRequest is a local type with the name of a message of package pb.
type JoinRequest struct{ Name string }

// sdk, proto and fmt, which the imports avoid, and names of locals, which the locals keep.
var (
	sdk   = "not the sdk package"
	proto = 1
	err   error
	out   = "out"
)

func fmt() string { return "not the fmt package" }

type req struct{}

var _, _, _, _, _ = sdk, proto, err, out, req{}
var _ = fmt
