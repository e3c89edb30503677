// Package chat is the chat example's application: chat rooms that people join and talk in.
//
//   - Lobby is the Entry Spot of each node: it knows the rooms that live on its node.
//   - User is one person's session: a User Spot, created explicitly at login.
//   - Room is a chat room: an Instance Spot, created by the first join and evicted when idle;
//     its closing callback sums the room up and leaves the summary with its node's Lobby.
//
// zlinkgen writes chat_zlink.go from the interfaces below: run `go generate ./...` (or
// `make gen`) after changing them.
package chat

import "context"

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Lobby knows the rooms that live on its node. Every node has one from its start.
//
//zlink:spot entry name=chat.Lobby
type Lobby interface {
	// RoomOpened records a room that started on this node.
	//
	//zlink:send
	RoomOpened(ctx context.Context, ev *RoomEvent) error

	// RoomClosed records a room that closed on this node, with its summary.
	//
	//zlink:send
	RoomClosed(ctx context.Context, ev *RoomEvent) error

	// Rooms lists the rooms open on this node and the summaries of those that closed.
	Rooms(ctx context.Context, req *RoomsRequest) (*RoomsReply, error)
}

// User is one person's session, created explicitly when they log in. Rooms deliver what is
// said to it; the person's terminal collects it from the inbox.
//
//zlink:spot user name=chat.User
type User interface {
	// Deliver puts a line said in a room into the inbox.
	//
	//zlink:send
	Deliver(ctx context.Context, line *Line) error

	// Inbox returns the lines delivered since the last call, oldest first.
	Inbox(ctx context.Context, req *InboxRequest) (*InboxReply, error)
}

// Room is one chat room. It exists while people talk in it: the first join creates it, and it
// is evicted once nobody has said anything for a while.
//
//zlink:spot instance name=chat.Room
type Room interface {
	// Join adds a person to the room and answers who is in it.
	Join(ctx context.Context, req *JoinRequest) (*JoinReply, error)

	// Say delivers a line to everyone else in the room.
	Say(ctx context.Context, req *SayRequest) (*SayReply, error)

	// Leave takes a person out of the room.
	Leave(ctx context.Context, req *LeaveRequest) (*LeaveReply, error)
}
