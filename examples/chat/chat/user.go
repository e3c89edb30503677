package chat

import (
	"context"

	"github.com/zlink-go/zlink/sdk"
)

// maxInbox bounds the lines a User keeps for a terminal that stopped collecting them.
const maxInbox = 1000

// user is one person's session. Its handlers run one at a time on the Spot's queue, so it
// needs no lock.
type user struct {
	inbox []*Line
}

// NewUser makes the session of the person whose name is the Spot's ID.
func NewUser(sdk.SpotContext) (User, error) { return &user{}, nil }

func (u *user) Deliver(_ context.Context, line *Line) error {
	u.inbox = append(u.inbox, line)
	if len(u.inbox) > maxInbox {
		u.inbox = u.inbox[len(u.inbox)-maxInbox:]
	}
	return nil
}

func (u *user) Inbox(context.Context, *InboxRequest) (*InboxReply, error) {
	lines := u.inbox
	u.inbox = nil
	return &InboxReply{Lines: lines}, nil
}
