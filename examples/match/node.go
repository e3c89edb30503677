package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zlink-go/zlink/examples/match/match"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// serveNode runs one node of a mesh of several processes (-node). Its players, if any, log in
// and queue once a matchmaker is Ready; it prints a progress line a second and takes commands
// from stdin until it closes or the process is told to stop, then shuts down gracefully.
func serveNode(ctx context.Context, o options, stdin io.Reader, out io.Writer, logger *slog.Logger) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	board := match.NewLeaderboard()
	var mm *match.Matchmaking
	if o.matchmaker > 0 {
		mm = match.NewMatchmaking(sdk.NodeID(o.node), int32(o.rounds))
	}
	cfg := rt.DefaultConfig()
	cfg.NodeID, cfg.ApplicationVersion, cfg.Logger, cfg.ListenAddr = sdk.NodeID(o.node), o.version, logger, o.listen
	if o.etcd != "" {
		cfg.EtcdEndpoints = strings.Split(o.etcd, ",")
	}
	cfg.Register = func(r sdk.Registrar) error { return match.Register(r, board, mm, o.matchmaker) }
	o.op.configure(&cfg, 0)
	h, err := rt.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	if o.etcd == "" {
		say("etcd %s", strings.Join(h.EtcdEndpoints(), ","))
	}
	if u := h.AdminURL(); u != "" {
		say("admin %s/", u)
	}
	say("ready %s", h.LocalNode())

	var work sync.WaitGroup
	wctx, stopWork := context.WithCancel(ctx)
	defer func() {
		stopWork()
		work.Wait()
	}()
	if mm != nil {
		work.Go(func() { mm.Run(wctx, h) })
	}
	work.Go(func() {
		if err := logIn(wctx, h, o); err != nil {
			say("error %v", err)
			return
		}
		say("players %d", o.players)
	})
	work.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
				heard, _ := board.Heard()
				say("progress %s %s matches=%d", h.LocalNode(), h.Status().State, heard)
			}
		}
	})

	lines := make(chan string)
	go func() { // ends with stdin, which the process's end closes
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			command(wctx, h, mm, line, say, &work)
		}
	}
	stopWork()
	work.Wait()
	res, err := h.Shutdown(context.WithoutCancel(ctx), 10*time.Second)
	if err != nil {
		return err
	}
	say("stopped %s/%s", res.Outcome, res.Reason)
	return nil
}

// logIn logs this node's players in, each in its own session and this node's lobby, and
// queues them, once a matchmaker is Ready.
func logIn(ctx context.Context, h *rt.Host, o options) error {
	if o.players == 0 {
		return nil
	}
	for {
		st, err := h.ClientServerStatus(match.MatchmakerChannelName)
		if err == nil && st.ReadyTargetCount > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := range o.players {
		id := fmt.Sprintf("%s-p%03d", o.node, i)
		if _, err := match.CreatePlayer(ctx, h, id); err != nil {
			return fmt.Errorf("login of %s: %w", id, err)
		}
		if _, err := match.LocalLobby(h).Join(ctx, &match.JoinRequest{Player: id}); err != nil {
			return fmt.Errorf("%s joins the lobby: %w", id, err)
		}
		rating := match.InitialRating(id)
		if _, err := match.MatchmakerClient(h).Enqueue(ctx, &match.Ticket{Player: id, Rating: rating}, sdk.Key(match.Band(rating))); err != nil {
			return fmt.Errorf("%s queues: %w", id, err)
		}
	}
	return nil
}

// command runs one line of stdin: "relocate <version>", "pause", "status", or
// "summary <node>:<players> ...".
func command(ctx context.Context, h *rt.Host, mm *match.Matchmaking, line string, say func(string, ...any), work *sync.WaitGroup) {
	f := strings.Fields(line)
	switch {
	case len(f) == 0:
	case f[0] == "relocate" && len(f) == 2:
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			say("error relocate: %q is not a version", f[1])
			return
		}
		work.Go(func() {
			res, err := h.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: &v, Deadline: time.Minute})
			if err != nil {
				say("error relocate: %v", err)
				return
			}
			say("relocated %s/%s", res.Outcome, res.Reason)
			for !h.Status().SafeToShutdown && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			say("safe")
		})
	case f[0] == "pause" && len(f) == 1:
		if mm != nil {
			mm.Pause()
		}
		say("paused")
	case f[0] == "status" && len(f) == 1:
		st, ms := h.Status(), h.MeshStatus()
		say("status %s mesh=%s peers=%d", st.State, ms.State, ms.ReadyPeerCount)
	case f[0] == "summary" && len(f) > 1:
		var ids []string
		for _, arg := range f[1:] {
			node, n, ok := strings.Cut(arg, ":")
			count, err := strconv.Atoi(n)
			if !ok || err != nil || count < 0 || count > 100_000 {
				say("error summary: %q is not <node>:<players>", arg)
				return
			}
			for i := range count {
				ids = append(ids, fmt.Sprintf("%s-p%03d", node, i))
			}
		}
		work.Go(func() {
			s, err := account(ctx, h, ids, -1)
			if err != nil {
				say("error summary: %v", err)
				return
			}
			say("summary played=%d sent=%d lost=%d duplicates=%d incomplete=%d moves=%d", s.played, s.sent, s.lost, s.duplicates, s.incomplete, s.moves)
		})
	default:
		say("error unknown command %q: relocate <version>, pause, status, summary <node>:<players> ...", line)
	}
}
