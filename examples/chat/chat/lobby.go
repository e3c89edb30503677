package chat

import (
	"context"
	"slices"

	"github.com/zlink-go/zlink/sdk"
)

// maxSummaries bounds the closed rooms a Lobby remembers.
const maxSummaries = 100

// lobby is the Lobby of one node. Its handlers run one at a time on the Spot's queue, so it
// needs no lock.
type lobby struct {
	open   map[string]bool
	closed []string
}

// NewLobby makes the Lobby of a node.
func NewLobby(sdk.SpotContext) (Lobby, error) {
	return &lobby{open: make(map[string]bool)}, nil
}

func (l *lobby) RoomOpened(_ context.Context, ev *RoomEvent) error {
	l.open[ev.GetRoom()] = true
	return nil
}

func (l *lobby) RoomClosed(_ context.Context, ev *RoomEvent) error {
	delete(l.open, ev.GetRoom())
	l.closed = append(l.closed, ev.GetSummary())
	if len(l.closed) > maxSummaries {
		l.closed = l.closed[len(l.closed)-maxSummaries:]
	}
	return nil
}

func (l *lobby) Rooms(context.Context, *RoomsRequest) (*RoomsReply, error) {
	open := make([]string, 0, len(l.open))
	for r := range l.open {
		open = append(open, r)
	}
	slices.Sort(open)
	return &RoomsReply{Open: open, Closed: slices.Clone(l.closed)}, nil
}
