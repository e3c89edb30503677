package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/zlink-go/zlink/examples/match/match"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/sdk"
)

// node is one node of the run and what the application keeps on it.
type node struct {
	h     *rt.Host
	board *match.Leaderboard
	mm    *match.Matchmaking
}

// play runs the default scenario: three nodes in this process on an embedded etcd, players
// playing, and node-1 relocating to node-2 (version 2) halfway, then shutting down.
func play(ctx context.Context, o options, out io.Writer, logger *slog.Logger) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("== ZLink match: three nodes in one process, %d players ==", o.players)
	specs := []struct {
		id      sdk.NodeID
		version int64
		weight  int // of its matchmaker server; 0: none
	}{{"node-1", 1, 0}, {"node-2", 2, 2}, {"node-3", 1, 1}}
	// The etcd is the run's own, not a node's: node-1 shuts down while the others play on.
	srv, err := devetcd.Start(ctx, devetcd.WithoutFsync())
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer srv.Close()
	etcd := srv.Endpoints()
	say("an embedded etcd serves at %s", strings.Join(etcd, ","))
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			_ = n.h.Close()
		}
	}()
	for i, s := range specs {
		n := &node{board: match.NewLeaderboard()}
		if s.weight > 0 {
			n.mm = match.NewMatchmaking(s.id, int32(o.rounds))
		}
		cfg := rt.DefaultConfig()
		cfg.NodeID, cfg.ApplicationVersion, cfg.Logger, cfg.EtcdEndpoints = s.id, s.version, logger, etcd
		cfg.Register = func(r sdk.Registrar) error { return match.Register(r, n.board, n.mm, s.weight) }
		o.op.configure(&cfg, i)
		h, err := rt.Start(ctx, cfg)
		if err != nil {
			return err
		}
		n.h = h
		nodes = append(nodes, n)
		desc := "no matchmaker"
		if s.weight > 0 {
			desc = fmt.Sprintf("a matchmaker of weight %d", s.weight)
		}
		say("%s is up: version %d, %s", s.id, s.version, desc)
		if u := h.AdminURL(); u != "" {
			say("%s's admin page: %s/", s.id, u)
		}
	}
	n1 := nodes[0]
	if err := awaitMatchmakers(ctx, nodes, 2); err != nil {
		return err
	}

	var formers sync.WaitGroup
	mctx, stopForming := context.WithCancel(ctx)
	defer func() {
		stopForming()
		formers.Wait()
	}()
	for _, n := range nodes {
		if n.mm != nil {
			formers.Go(func() { n.mm.Run(mctx, n.h) })
		}
	}

	say("\n-- %d players log in (a User Spot each), join their node's lobby (a Pawn each) and queue --", o.players)
	for i, id := range playerIDs(o.players) {
		n := nodes[i%len(nodes)]
		if _, err := match.CreatePlayer(ctx, n.h, id); err != nil {
			return fmt.Errorf("login of %s: %w", id, err)
		}
		if _, err := match.LocalLobby(n.h).Join(ctx, &match.JoinRequest{Player: id}); err != nil {
			return fmt.Errorf("%s joins the lobby: %w", id, err)
		}
		rating := match.InitialRating(id)
		if _, err := match.MatchmakerClient(n.h).Enqueue(ctx, &match.Ticket{Player: id, Rating: rating}, sdk.Key(match.Band(rating))); err != nil {
			return fmt.Errorf("%s queues: %w", id, err)
		}
	}

	say("\n-- matches play; halfway, node-1 hands everything to node-2 (version 2) and shuts down --")
	start := time.Now()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	halfway := time.After(o.play / 2)
	end := time.After(o.play)
	var relocated int
	var relocation sdk.RelocationResult
	relocDone := make(chan struct{})
	line := func() {
		played, _ := nodes[1].board.Heard()
		say("t=%4.1fs  matches finished %4d  node-1 %s", time.Since(start).Seconds(), played, n1.h.Status().State)
	}
loop:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-progress.C:
			line()
		case <-halfway:
			p := n1.h.MeshStatus().Placement
			relocated = p.ActiveSpotCount + p.ActiveActorCount
			go func() {
				defer close(relocDone)
				v := int64(2)
				res, err := n1.h.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: &v, Deadline: 30 * time.Second})
				if err != nil {
					res.Reason = sdk.RelocationReasonRelocationFailed
				}
				relocation = res
			}()
			say("node-1 relocates its %d objects (Spots and Actors) to version 2", relocated)
		case <-end:
			break loop
		}
	}
	<-relocDone
	say("node-1's relocation: %s/%s", relocation.Outcome, relocation.Reason)
	if res, err := n1.h.Shutdown(ctx, 10*time.Second); err == nil {
		say("node-1 shut down: %s (safe to shut down: it said so after the re-send window)", res.Outcome)
	}

	say("\n-- no new matches; the ones under way finish --")
	for _, n := range nodes {
		if n.mm != nil {
			n.mm.Pause()
		}
	}
	live := nodes[1:]
	sum, err := account(ctx, live[0].h, playerIDs(o.players), formed(nodes))
	if err != nil {
		return err
	}
	heard, repeated := live[0].board.Heard()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n== summary ==\n")
	fmt.Fprintf(tw, "matches formed\t%d\n", formed(nodes))
	fmt.Fprintf(tw, "matches played\t%d\t(from the players' histories)\n", sum.played)
	fmt.Fprintf(tw, "results heard by node-2's leaderboard\t%d\t(%d more than once)\n", heard, repeated)
	fmt.Fprintf(tw, "rounds sent to pawns\t%d\n", sum.sent)
	fmt.Fprintf(tw, "pawn moves\t%d\n", sum.moves)
	fmt.Fprintf(tw, "objects relocated\t%d\t(%s/%s)\n", relocated, relocation.Outcome, relocation.Reason)
	fmt.Fprintf(tw, "lost messages\t%d\n", sum.lost)
	fmt.Fprintf(tw, "duplicate executions\t%d\n", sum.duplicates)
	fmt.Fprintf(tw, "incomplete histories\t%d\n", sum.incomplete)
	for _, n := range nodes {
		st, ms := n.h.Status(), n.h.MeshStatus()
		fmt.Fprintf(tw, "%s\truntime %s\tmesh %s, %d ready peers\n", n.h.LocalNode(), st.State, ms.State, ms.ReadyPeerCount)
	}
	_ = tw.Flush()
	if sum.lost != 0 || sum.duplicates != 0 || sum.incomplete != 0 || sum.played != formed(nodes) || repeated != 0 {
		return errSummary
	}
	return nil
}

// playerIDs are the IDs of n players.
func playerIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%03d", i)
	}
	return ids
}

func formed(nodes []*node) int64 {
	var n int64
	for _, x := range nodes {
		if x.mm != nil {
			n += x.mm.Formed()
		}
	}
	return n
}

// awaitMatchmakers waits until every node sees n Ready matchmaker servers.
func awaitMatchmakers(ctx context.Context, nodes []*node, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, x := range nodes {
		for {
			st, err := x.h.ClientServerStatus(match.MatchmakerChannelName)
			if err == nil && st.ReadyTargetCount == n {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s never saw %d matchmakers: %+v %v", x.h.LocalNode(), n, st, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// finished reports whether a Pawn in host is done playing: in a lobby, or in a match that
// finished (its move back to a lobby may have found that lobby's node relocating; its next
// match takes it from there).
func finished(ctx context.Context, c sdk.Client, host string) bool {
	if strings.Contains(host, match.LobbyTypeName) {
		return true
	}
	_, id, ok := strings.Cut(host, "/")
	if !ok {
		return false
	}
	id, err := strconv.Unquote(id)
	if err != nil {
		return false
	}
	st, err := match.MatchOf(c, id).State(ctx, &match.Empty{})
	return err == nil && st.GetFinished()
}

// summary is what the players' histories and their Pawns say.
type summary struct {
	played, sent, moves, lost, duplicates, incomplete int64
}

// account waits, for 30 s at most, until every formed match finished and every Pawn is done
// playing, then counts: a round sent to a Pawn and not seen by it is lost; one seen twice, or
// a match recorded twice in a history, is a duplicate; a match not in all its players'
// histories is incomplete.
func account(ctx context.Context, c sdk.Client, players []string, formed int64) (summary, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := summary{}
		var got int64 // distinct rounds the Pawns saw
		done := true
		recorded := map[string]int{}
		for _, id := range players {
			prof, err := match.PlayerOf(c, id).Profile(ctx, &match.Empty{})
			if err != nil {
				return s, fmt.Errorf("%s's profile: %w", id, err)
			}
			seen := map[string]bool{}
			for _, h := range prof.GetHistory() {
				if seen[h.GetMatch()] {
					s.duplicates++
					continue
				}
				seen[h.GetMatch()] = true
				recorded[h.GetMatch()]++
				s.sent += int64(h.GetRounds())
			}
			info, err := match.PawnOf(c, id).Info(ctx, &match.Empty{})
			if err != nil {
				return s, fmt.Errorf("%s's pawn: %w", id, err)
			}
			if !finished(ctx, c, info.GetHost()) {
				done = false
			}
			s.moves += info.GetMoves()
			s.duplicates += info.GetDuplicates()
			got += info.GetRounds()
		}
		s.lost = s.sent - got
		s.played = int64(len(recorded))
		for _, n := range recorded {
			if n != match.MatchSize {
				s.incomplete++
			}
		}
		if done && s.incomplete == 0 && (formed < 0 || s.played >= formed) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("the matches did not all finish within 30 s: %d of %d recorded, %d incomplete", s.played, formed, s.incomplete)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
