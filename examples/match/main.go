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
//
// With -node it runs one node of a mesh of several processes; the first one serves an
// embedded etcd to the others and prints its address:
//
//	go run ./examples/match -node node-2 -version 2 -matchmaker 2
//	go run ./examples/match -node node-3 -matchmaker 1 -etcd <address> -players 100
//	go run ./examples/match -node node-1 -etcd <address> -players 100
//
// and reads commands from standard input: "relocate 2" relocates the node to the nodes of
// version 2, "pause" stops its matchmaker forming matches, "status", and "summary node-1:100
// node-3:100" counts the named players' matches and checks that none lost or repeated a
// message.
//
// With -admin 127.0.0.1:8080 each node serves its admin pages — a live dashboard, /status,
// pprof — node-2 and node-3 of the one-process run on the next ports; with -metrics also the
// runtime's OpenTelemetry metrics for Prometheus at /metrics.
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
	"github.com/zlink-go/zlink/sdk"
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
	players    int
	play       time.Duration
	rounds     int
	logLevel   slog.Level
	node       string
	etcd       string
	listen     string
	version    int64
	matchmaker int
	admin      string
	metrics    bool
	op         *operator
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, os.Stdin, stdout, stderr)
}

func runWith(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("match", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.DurationVar(&o.play, "play", 8*time.Second, "how long matches are formed; node-1 relocates halfway")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds per match")
	fs.TextVar(&o.logLevel, "log", slog.LevelError, "the least severe runtime log level written to standard error: DEBUG, INFO, WARN or ERROR")
	fs.StringVar(&o.node, "node", "", "run one node of a mesh of several processes, with this ID (default: the three-node run in this process)")
	fs.StringVar(&o.etcd, "etcd", "", "with -node: etcd endpoints host:port,... (default: serve an embedded etcd)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "with -node: the address other nodes reach this node at")
	fs.Int64Var(&o.version, "version", 1, "with -node: the application version the node runs")
	fs.IntVar(&o.matchmaker, "matchmaker", 0, "with -node: serve the matchmaker with this weight (0: do not)")
	fs.StringVar(&o.admin, "admin", "", "serve each node's admin pages (dashboard, /status, pprof) at host:port; in the one-process run node-2 and node-3 take the next ports (default: none)")
	fs.BoolVar(&o.metrics, "metrics", false, "with -admin: serve the runtime's OpenTelemetry metrics for Prometheus at /metrics")
	players := -1
	fs.IntVar(&players, "players", -1, "how many players log in (default 200; with -node 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.players = players
	if o.players < 0 {
		o.players = 200
		if o.node != "" {
			o.players = 0
		}
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.node == "" && o.players < match.MatchSize:
		return fmt.Errorf("-players %d: a match takes %d players", o.players, match.MatchSize)
	case o.node != "" && o.matchmaker < 0:
		return fmt.Errorf("-matchmaker %d: a weight is 0 or more", o.matchmaker)
	case o.players > 100_000:
		return fmt.Errorf("-players %d: at most 100000", o.players)
	case o.play < time.Second:
		return fmt.Errorf("-play %v: at least 1s", o.play)
	case o.rounds < 1 || o.rounds > 1000:
		return fmt.Errorf("-rounds %d: between 1 and 1000", o.rounds)
	}
	op, err := newOperator(o.admin, o.metrics)
	if err != nil {
		return err
	}
	o.op = op
	if op.meter != nil {
		defer func() { _ = op.meter.Shutdown(context.WithoutCancel(ctx)) }()
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	if o.node != "" {
		if err := sdk.NodeID(o.node).Validate(); err != nil {
			return fmt.Errorf("-node: %w", err)
		}
		return serveNode(ctx, o, stdin, stdout, logger)
	}
	return play(ctx, o, stdout, logger)
}

// errSummary says the summary shows lost or repeated messages.
var errSummary = errors.New("the run lost or repeated messages")
