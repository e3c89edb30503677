package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/zlink-go/zlink/examples/chat/chat"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

const help = "commands: /login <name>, /join <room>, /say <text> (or just type), /leave, /rooms, /quit"

// session is one person at one terminal, on one node.
type session struct {
	ctx  context.Context
	h    *rt.Host
	out  io.Writer
	mu   sync.Mutex // output lines come from the reader and from the inbox poller
	user string
	room string
}

func (s *session) print(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format+"\n", args...)
}

// interactive runs one node and a terminal session on it.
func interactive(ctx context.Context, o options, in io.Reader, out io.Writer) error {
	idle := o.idle
	if idle == 0 {
		idle = 5 * time.Minute
	}
	h, err := rt.Start(ctx, config(o, o.node, 0, idle))
	if err != nil {
		return err
	}
	defer h.Close()
	s := &session{ctx: ctx, h: h, out: out}
	if o.etcd == "" {
		s.print("node %s is up; it serves an embedded etcd: start more nodes with -etcd %s", h.LocalNode(), strings.Join(h.EtcdEndpoints(), ","))
	} else {
		s.print("node %s is up on etcd %s", h.LocalNode(), o.etcd)
	}
	if u := h.AdminURL(); u != "" {
		s.print("admin page %s/", u)
	}
	s.print(help)

	lines := make(chan string)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			s.quit()
			return nil
		case <-poll.C:
			s.showInbox()
		case line, ok := <-lines:
			if !ok {
				s.quit()
				return nil
			}
			if s.command(strings.TrimSpace(line)) {
				s.quit()
				return nil
			}
		}
	}
}

// command runs one input line; it reports whether the session ends.
func (s *session) command(line string) bool {
	if line == "" {
		return false
	}
	cmd, arg := parseCommand(line)
	var err error
	switch cmd {
	case "/login":
		err = s.login(arg)
	case "/join":
		err = s.join(arg)
	case "/say":
		err = s.say(arg)
	case "/leave":
		err = s.leave()
	case "/rooms":
		err = s.rooms()
	case "/quit":
		return true
	case "/help":
		s.print(help)
	default:
		s.print("unknown command %s; %s", cmd, help)
	}
	if err != nil {
		s.print("! %s", explain(err))
	}
	return false
}

// parseCommand splits an input line into a command and its argument; a line that does not
// start with "/" is said in the room.
func parseCommand(line string) (cmd, arg string) {
	cmd, arg, _ = strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	if !strings.HasPrefix(cmd, "/") {
		return "/say", line
	}
	return cmd, arg
}

// explain turns an error into a line for the person at the terminal.
func explain(err error) string {
	var appErr *sdk.AppError
	if errors.As(err, &appErr) {
		return appErr.Message
	}
	return err.Error()
}

func (s *session) login(name string) error {
	if name == "" {
		return errors.New("who are you? /login <name>")
	}
	if s.user != "" {
		return fmt.Errorf("already logged in as %s", s.user)
	}
	_, err := chat.CreateUser(s.ctx, s.h, name, sdk.OnNode(s.h.LocalNode()))
	switch {
	case errors.Is(err, sdk.ErrAlreadyExists):
		s.print("welcome back, %s", name)
	case err != nil:
		return err
	default:
		s.print("welcome, %s (your session lives on %s)", name, s.h.LocalNode())
	}
	s.user = name
	return nil
}

func (s *session) join(room string) error {
	if s.user == "" {
		return errors.New("log in first: /login <name>")
	}
	room = strings.TrimPrefix(room, "#")
	if room == "" {
		return errors.New("which room? /join <room>")
	}
	if s.room != "" && s.room != room {
		if err := s.leave(); err != nil {
			return err
		}
	}
	r, err := chat.OpenRoom(s.h, room).Join(s.ctx, &chat.JoinRequest{User: s.user})
	if err != nil {
		return err
	}
	s.room = room
	s.print("you joined #%s (on %s) with %s", room, r.GetNode(), strings.Join(r.GetMembers(), ", "))
	return nil
}

func (s *session) say(text string) error {
	switch {
	case s.user == "":
		return errors.New("log in first: /login <name>")
	case s.room == "":
		return errors.New("join a room first: /join <room>")
	case text == "":
		return nil
	}
	// Create-intent: a room that was evicted while quiet comes back on the next line.
	room := chat.OpenRoom(s.h, s.room)
	_, err := room.Say(s.ctx, &chat.SayRequest{User: s.user, Text: text})
	var appErr *sdk.AppError
	if errors.As(err, &appErr) && appErr.Code == "not_member" {
		if _, err = room.Join(s.ctx, &chat.JoinRequest{User: s.user}); err == nil {
			_, err = room.Say(s.ctx, &chat.SayRequest{User: s.user, Text: text})
		}
	}
	return err
}

func (s *session) leave() error {
	if s.room == "" {
		return errors.New("you are not in a room")
	}
	_, err := chat.RoomOf(s.h, s.room).Leave(s.ctx, &chat.LeaveRequest{User: s.user})
	if errors.Is(err, sdk.ErrNotFound) {
		err = nil // the room was evicted meanwhile: nothing to leave
	}
	if err == nil {
		s.print("you left #%s", s.room)
		s.room = ""
	}
	return err
}

func (s *session) rooms() error {
	nodes := []sdk.NodeID{s.h.LocalNode()}
	for _, p := range s.h.MeshStatus().Peers {
		if p.State == sdk.PeerStateReady {
			nodes = append(nodes, p.NodeRid)
		}
	}
	for _, n := range nodes {
		rooms, err := chat.LobbyOn(s.h, n).Rooms(s.ctx, &chat.RoomsRequest{})
		if err != nil {
			s.print("%s: %s", n, explain(err))
			continue
		}
		open := "no rooms"
		if len(rooms.GetOpen()) > 0 {
			open = "#" + strings.Join(rooms.GetOpen(), ", #")
		}
		s.print("%s: %s", n, open)
	}
	return nil
}

func (s *session) showInbox() {
	if s.user == "" {
		return
	}
	in, err := chat.UserOf(s.h, s.user).Inbox(s.ctx, &chat.InboxRequest{})
	if err != nil {
		return
	}
	for _, l := range in.GetLines() {
		s.print("[#%s] %s: %s", l.GetRoom(), l.GetFrom(), l.GetText())
	}
}

func (s *session) quit() {
	if s.room != "" {
		_ = s.leave()
	}
	if s.user != "" {
		_ = chat.UserOf(s.h, s.user).Close(context.WithoutCancel(s.ctx))
	}
	s.print("bye")
}
