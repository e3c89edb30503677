package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/zlink-go/zlink/examples/chat/chat"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// scripted plays a chat session on a two-node mesh in this process.
func scripted(ctx context.Context, o options, out io.Writer) error {
	idle := o.idle
	if idle == 0 {
		idle = time.Second
	}
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("== ZLink chat: two nodes in one process ==")

	n1, err := rt.Start(ctx, config(o, "node-1", 0, idle))
	if err != nil {
		return err
	}
	defer n1.Close()
	if o.etcd == "" {
		say("node-1 is up; it serves an embedded etcd at %s", strings.Join(n1.EtcdEndpoints(), ","))
		o.etcd = strings.Join(n1.EtcdEndpoints(), ",")
	} else {
		say("node-1 is up on etcd %s", o.etcd)
	}
	n2, err := rt.Start(ctx, config(o, "node-2", 1, idle))
	if err != nil {
		return err
	}
	defer n2.Close()
	say("node-2 is up and joined the mesh")
	for _, n := range []*rt.Host{n1, n2} {
		if u := n.AdminURL(); u != "" {
			say("%s's admin page: %s/", n.LocalNode(), u)
		}
	}
	if err := waitPeers(ctx, n1, n2); err != nil {
		return err
	}

	say("\n-- people log in: a User Spot each, created explicitly --")
	people := []struct {
		name string
		node *rt.Host
	}{{"ann", n1}, {"bob", n2}, {"cara", n2}}
	for _, p := range people {
		if _, err := chat.CreateUser(ctx, p.node, p.name, sdk.OnNode(p.node.LocalNode())); err != nil {
			return err
		}
		say("%s logged in on %s", p.name, p.node.LocalNode())
	}
	if _, err := chat.CreateUser(ctx, n1, "ann"); errors.Is(err, sdk.ErrAlreadyExists) {
		say("ann logs in again: %v", err)
	}

	say("\n-- they join rooms: the first join creates the room, on a node of the mesh --")
	join := func(h *rt.Host, who, room string, place sdk.NodeID) error {
		r, err := chat.OpenRoom(h, room).Join(ctx, &chat.JoinRequest{User: who}, sdk.OnNode(place))
		if err != nil {
			return err
		}
		say("%s joins #%s (on %s): %s", who, room, r.GetNode(), strings.Join(r.GetMembers(), ", "))
		return nil
	}
	for _, j := range []struct {
		h         *rt.Host
		who, room string
		place     sdk.NodeID
	}{
		{n1, "ann", "gophers", "node-1"},
		{n2, "bob", "gophers", ""},
		{n2, "cara", "crabs", "node-2"},
		{n1, "ann", "crabs", ""},
	} {
		if err := join(j.h, j.who, j.room, j.place); err != nil {
			return err
		}
	}

	say("\n-- they talk: a room delivers each line to the others' sessions --")
	talk := []struct {
		h              *rt.Host
		who, room, txt string
	}{
		{n1, "ann", "gophers", "hello from node-1!"},
		{n2, "bob", "gophers", "hi ann, I'm on node-2"},
		{n2, "cara", "crabs", "anyone here?"},
		{n1, "ann", "crabs", "me, from the other node"},
	}
	for _, l := range talk {
		r, err := chat.RoomOf(l.h, l.room).Say(ctx, &chat.SayRequest{User: l.who, Text: l.txt})
		if err != nil {
			return err
		}
		say("[#%s] %s: %s  (delivered to %d)", l.room, l.who, l.txt, r.GetDelivered())
	}
	for _, p := range people {
		in, err := chat.UserOf(p.node, p.name).Inbox(ctx, &chat.InboxRequest{})
		if err != nil {
			return err
		}
		for _, line := range in.GetLines() {
			say("  %s's screen: [#%s] %s: %s", p.name, line.GetRoom(), line.GetFrom(), line.GetText())
		}
	}
	_, err = chat.RoomOf(n1, "gophers").Say(ctx, &chat.SayRequest{User: "cara", Text: "can I?"})
	var appErr *sdk.AppError
	if errors.As(err, &appErr) {
		say("cara says something in #gophers without joining: %s (code %s)", appErr.Message, appErr.Code)
	}

	if err := printRooms(ctx, out, n1, n1, n2); err != nil {
		return err
	}

	say("\n-- they leave; an idle room is evicted and its closing callback sums it up --")
	for _, l := range []struct {
		h         *rt.Host
		who, room string
	}{{n1, "ann", "gophers"}, {n2, "bob", "gophers"}} {
		if _, err := chat.RoomOf(l.h, l.room).Leave(ctx, &chat.LeaveRequest{User: l.who}); err != nil {
			return err
		}
		say("%s leaves #%s", l.who, l.room)
	}
	summary, err := waitClosed(ctx, n1, "gophers", 10*idle)
	if err != nil {
		return err
	}
	say("node-1's lobby: %s", summary)

	say("\n-- a plain call never creates: #gophers is gone until someone joins it again --")
	_, err = chat.RoomOf(n2, "gophers").Say(ctx, &chat.SayRequest{User: "bob", Text: "still there?"})
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		say("bob says something in #gophers: %v", err)
	case err == nil:
		return errors.New("a plain call reached a room that should be gone")
	default:
		return err
	}
	if _, err := chat.RoomOf(n2, "no-such-room").Join(ctx, &chat.JoinRequest{User: "bob"}); errors.Is(err, sdk.ErrNotFound) {
		say("bob joins #no-such-room without create-intent: %v", err)
	}

	say("\n-- mesh status --")
	printStatus(out, n1, n2)

	say("\n-- node-2 shuts down: it drains, its Spots close with reason Shutdown and free their locations --")
	res, err := n2.Shutdown(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	say("node-2: %s (reason %s); its runtime status says %s", res.Outcome, res.Reason, n2.Status().State)
	if err := join(n1, "ann", "crabs", ""); err != nil { // #crabs lived on node-2
		return err
	}
	printStatus(out, n1)
	say("\n== done: node-1 closes, every room and session with it ==")
	return nil
}

// waitPeers waits until each node sees the other as a Ready peer.
func waitPeers(ctx context.Context, nodes ...*rt.Host) error {
	deadline := time.Now().Add(15 * time.Second)
	for _, n := range nodes {
		for {
			st := n.MeshStatus()
			if st.ReadyPeerCount == len(nodes)-1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s sees %d of %d peers", n.LocalNode(), st.ReadyPeerCount, len(nodes)-1)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitClosed waits until room's summary appears in the lobby of h's node.
func waitClosed(ctx context.Context, h *rt.Host, room string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		rooms, err := chat.LocalLobby(h).Rooms(ctx, &chat.RoomsRequest{})
		if err != nil {
			return "", err
		}
		for _, s := range rooms.GetClosed() {
			if strings.HasPrefix(s, "#"+room+" ") {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("#%s was not evicted within %v", room, within)
}

// printRooms prints the rooms each node's Lobby knows, asking through c.
func printRooms(ctx context.Context, out io.Writer, c sdk.Client, nodes ...*rt.Host) error {
	fmt.Fprintln(out, "\n-- rooms, as each node's lobby knows them --")
	for _, n := range nodes {
		rooms, err := chat.LobbyOn(c, n.LocalNode()).Rooms(ctx, &chat.RoomsRequest{})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: #%s\n", n.LocalNode(), strings.Join(rooms.GetOpen(), ", #"))
	}
	return nil
}

// printStatus prints each node's RouteMesh status as a table.
func printStatus(out io.Writer, nodes ...*rt.Host) {
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tMESH\tSTATE\tREADY\tPEERS\tSPOTS\tPLACEMENT\tSEQ")
	for _, n := range nodes {
		st := n.MeshStatus()
		peers := make([]string, 0, len(st.Peers))
		for _, p := range st.Peers {
			peers = append(peers, fmt.Sprintf("%s:%s", p.NodeRid, p.State))
		}
		placement := "available"
		if !st.Placement.IsAvailable {
			placement = "unavailable"
			if r := st.Placement.UnavailableReason; r != nil {
				placement += " (" + r.String() + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%d\t%s\t%d\n", n.LocalNode(), st.MeshName, st.State, st.IsReady,
			strings.Join(peers, " "), st.Placement.ActiveSpotCount, placement, st.Sequence)
	}
	_ = tw.Flush()
}
