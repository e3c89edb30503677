// Command match is ZLink's matchmaking example: players queue in their node's lobby, a
// matchmaker (a ClientServer channel on two nodes, of weights 2 and 1) forms matches of four by
// rating band, the players' Pawns (Actors) move into each match (an Instance Spot) and back,
// results fan out to every node's leaderboard (a Fanout channel), and midway node-1 hands
// everything it runs to node-2, a newer version, while play goes on, then shuts down.
//
//	go run ./examples/match
//
// It ends with a summary: matches played, rounds and moves, the objects relocated, and the
// messages lost or run twice, which must be 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zlink-go/zlink/examples/match/match"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "match:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	players  int
	play     time.Duration
	rounds   int
	logLevel slog.Level
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("match", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.players, "players", 200, "how many simulated players log in")
	fs.DurationVar(&o.play, "play", 8*time.Second, "how long matches are formed; node-1 relocates halfway")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds per match")
	fs.TextVar(&o.logLevel, "log", slog.LevelError, "the least severe runtime log level written to standard error: DEBUG, INFO, WARN or ERROR")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.players < match.MatchSize:
		return fmt.Errorf("-players %d: a match takes %d players", o.players, match.MatchSize)
	case o.players > 100_000:
		return fmt.Errorf("-players %d: at most 100000", o.players)
	case o.play < time.Second:
		return fmt.Errorf("-play %v: at least 1s", o.play)
	case o.rounds < 1 || o.rounds > 1000:
		return fmt.Errorf("-rounds %d: between 1 and 1000", o.rounds)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	return play(ctx, o, stdout, logger)
}

// errSummary says the summary shows lost or repeated messages.
var errSummary = errors.New("the run lost or repeated messages")
