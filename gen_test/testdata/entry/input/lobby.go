// Package lobby is the entry case: an Entry Spot, one per node.
package lobby

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Lobby welcomes players on one server.
//
//zlink:spot entry name=lobby.Main
type Lobby interface {
	// Enter lets a player in and answers how many are in the lobby.
	Enter(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
	//zlink:send
	Announce(ctx context.Context, msg *pb.Note) error
}
