// Package chat is the instance case: an Instance Spot with a request/reply method and a
// one-way method, its messages declared in the same package.
package chat

import "context"

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Room is one chat room. It exists while people talk in it.
//
//zlink:spot instance idle=5m name=chat.Room
type Room interface {
	// Join adds a member and answers how many the room has.
	Join(ctx context.Context, req *JoinRequest) (*JoinReply, error)
	// Leave removes a member.
	//
	//zlink:send
	Leave(ctx context.Context, msg *LeaveRequest) error
}
