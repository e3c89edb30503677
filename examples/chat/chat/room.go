package chat

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/zlink-go/zlink/sdk"
)

// room is one chat room. Its handlers run one at a time on the Spot's queue.
type room struct {
	sc      sdk.SpotContext
	members []string        // in the order they joined
	people  map[string]bool // everyone who ever joined
	lines   int64
}

// NewRoom makes the room whose name is the Spot's ID.
func NewRoom(sc sdk.SpotContext) (Room, error) {
	return &room{sc: sc, people: make(map[string]bool)}, nil
}

// OnActivate tells the node's Lobby that the room opened.
func (r *room) OnActivate(ctx context.Context) error {
	return LocalLobby(r.sc.Client()).RoomOpened(ctx, &RoomEvent{Room: r.sc.ID()})
}

// OnClose sums the room up and leaves the summary with the node's Lobby: the runtime saves no
// state of its own (D9), so this is where a room records what it was.
func (r *room) OnClose(ctx context.Context, reason sdk.CloseReason) {
	people := make([]string, 0, len(r.people))
	for p := range r.people {
		people = append(people, p)
	}
	slices.Sort(people)
	summary := fmt.Sprintf("#%s closed (%s): %d lines from %s", r.sc.ID(), reason, r.lines, strings.Join(people, ", "))
	if len(people) == 0 {
		summary = fmt.Sprintf("#%s closed (%s): nobody came", r.sc.ID(), reason)
	}
	if err := LocalLobby(r.sc.Client()).RoomClosed(ctx, &RoomEvent{Room: r.sc.ID(), Summary: summary}); err != nil {
		r.sc.Logger().Warn("could not leave the room's summary with the lobby", "err", err)
	}
}

func (r *room) Join(_ context.Context, req *JoinRequest) (*JoinReply, error) {
	name := req.GetUser()
	if name == "" {
		return nil, sdk.Errorf("no_name", "join needs a user name")
	}
	if !slices.Contains(r.members, name) {
		r.members = append(r.members, name)
	}
	r.people[name] = true
	return &JoinReply{Members: slices.Clone(r.members), Node: string(r.sc.Node())}, nil
}

func (r *room) Say(ctx context.Context, req *SayRequest) (*SayReply, error) {
	from := req.GetUser()
	if !slices.Contains(r.members, from) {
		return nil, sdk.Errorf("not_member", "%s is not in #%s: join it first", from, r.sc.ID())
	}
	r.lines++
	line := &Line{Room: r.sc.ID(), From: from, Text: req.GetText(), Seq: r.lines}
	delivered := int32(0)
	for _, m := range r.members {
		if m == from {
			continue
		}
		// One-way: the room does not wait for the person's session to handle it.
		if err := UserOf(r.sc.Client(), m).Deliver(ctx, line); err != nil {
			r.sc.Logger().Warn("could not deliver a line", "to", m, "err", err)
			continue
		}
		delivered++
	}
	return &SayReply{Seq: r.lines, Delivered: delivered}, nil
}

func (r *room) Leave(_ context.Context, req *LeaveRequest) (*LeaveReply, error) {
	r.members = slices.DeleteFunc(r.members, func(m string) bool { return m == req.GetUser() })
	return &LeaveReply{Members: slices.Clone(r.members)}, nil
}
