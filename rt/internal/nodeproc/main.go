// Command nodeproc is a ZLink node for multi-process tests: it joins a mesh on the given etcd
// and hosts the rttest Ledger, User Ledger, Beacon and Mark, and with -journal the rttest Worker
// too. It prints "ready <endpoint>" once serving and "ran <spot> <msg>" for every message a
// Ledger or a Mark runs, and stops when its standard input closes or it gets SIGTERM or SIGINT.
// A line "relocate planned" or "relocate rolling <version>" on its standard input relocates the
// node; it prints "relocated <outcome>/<reason>" and then "safe" once SafeToShutdown. With
// -who-weight it serves the rttest Who channel, and with -feed it subscribes to the rttest Feed
// channel: "publish <n> <m>" waits until its posts reach m subscriber nodes, then publishes n
// numbered posts, one after another, and prints "published <n>" (or "error ..."); "feed-report"
// prints "feed <report>" of what its subscriber got.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zlink-go/zlink/internal/procstop"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

func main() {
	etcd := flag.String("etcd", "", "etcd endpoints, comma-separated")
	node := flag.String("node", "", "node ID")
	mesh := flag.String("mesh", "default", "mesh name")
	ttl := flag.Duration("lease-ttl", 2*time.Second, "owner lease TTL")
	quiet := flag.Bool("quiet", false, "do not print the messages Ledgers run (benchmarks)")
	journal := flag.String("journal", "", "host rttest Workers and journal their turns to this file")
	registers := flag.String("registers", "", "with -journal, host the rttest registers too, keeping their values under this etcd prefix")
	listen := flag.String("listen", "", "the address peers reach this node at (default: a free loopback port)")
	dialVia := flag.String("dial-via", "", "reach peers through proxies: endpoint=proxy,...")
	workDelay := flag.Duration("work-delay", 20*time.Millisecond, "how long a Worker's Work turn takes")
	tick := flag.Duration("tick", 20*time.Millisecond, "the period of every Worker's timer")
	shutdownDeadline := flag.Duration("shutdown-deadline", sdk.DefaultShutdownDeadline, "the graceful shutdown's deadline on SIGTERM")
	recordDelay := flag.Duration("record-delay", 0, "how long a Ledger's Record and Note turns take")
	coreBudget := flag.Uint64("core-budget", 0, "the Core HWM budget in bytes (0: the default)")
	maxMessage := flag.Int("max-message", 0, "the largest message payload in bytes (0: the default)")
	laneBytes := flag.Int64("lane-bytes", 0, "the byte limit of every Spot's application lane (0: the default)")
	version := flag.Int64("version", 0, "the application version the node runs")
	ledgerState := flag.Int("ledger-state", 0, "bytes of state each Ledger carries across a relocation beyond its count")
	parallelism := flag.Int("relocation-parallelism", 0, "relocation units at once (0: the default)")
	whoWeight := flag.Int("who-weight", -1, "serve the rttest Who channel with this weight (-1: do not)")
	feed := flag.Bool("feed", false, "subscribe to the rttest Feed channel")
	flag.Parse()

	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	println := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}

	cfg := rt.DefaultConfig()
	cfg.NodeID = sdk.NodeID(*node)
	cfg.MeshName = *mesh
	cfg.EtcdEndpoints = strings.Split(*etcd, ",")
	cfg.LeaseTTL = *ttl
	cfg.ListenAddr = *listen
	cfg.ApplicationVersion = *version
	cfg.RelocationParallelism = *parallelism
	if *dialVia != "" {
		via, err := parseDialVia(*dialVia)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nodeproc:", err)
			os.Exit(2)
		}
		cfg.Dialer = func(ctx context.Context, endpoint string) (net.Conn, error) {
			if p, ok := via[endpoint]; ok {
				endpoint = p
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", endpoint)
		}
	}
	if *coreBudget > 0 {
		cfg.Inbound.CoreHwmBudgetBytes = coreBudget
	}
	if *maxMessage > 0 {
		cfg.MaxMessageSize = *maxMessage
	}
	if *laneBytes > 0 {
		cfg.Exec.Application.Bytes = *laneBytes
		cfg.Exec.Application.Count = 1 << 20
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	feedLog := rttest.NewFeedLog(0)
	var j *rttest.FileJournal
	if *journal != "" {
		var err error
		if j, err = rttest.OpenFileJournal(*journal, *node); err != nil {
			fmt.Fprintln(os.Stderr, "nodeproc:", err)
			os.Exit(1)
		}
	}
	cfg.Register = func(r sdk.Registrar) error {
		ran := func(spot, msg string) { println("ran %s %s", spot, msg) }
		if *quiet {
			ran = func(string, string) {}
		}
		if d := *recordDelay; d > 0 {
			report := ran
			ran = func(spot, msg string) {
				time.Sleep(d)
				report(spot, msg)
			}
		}
		if j != nil {
			if err := rttest.RegisterWorker(r, j, *workDelay, *tick); err != nil {
				return err
			}
		}
		if j != nil && *registers != "" {
			if err := rttest.RegisterRegisters(r, j, registerClient(cfg.EtcdEndpoints), *registers); err != nil {
				return err
			}
			if err := rttest.RegisterRelay(r); err != nil {
				return err
			}
		}
		if err := rttest.RegisterBeacon(r, ran); err != nil {
			return err
		}
		if *whoWeight >= 0 {
			if err := rttest.RegisterWhoServer(r, cfg.NodeID, nil, sdk.Weight(*whoWeight)); err != nil {
				return err
			}
		}
		if *feed {
			if err := rttest.SubscribeFeed(r, feedLog); err != nil {
				return err
			}
		}
		if err := rttest.RegisterUserLedger(r, ran); err != nil {
			return err
		}
		return rttest.RegisterLedgerWithState(r, ran, *ledgerState)
	}
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeproc:", err)
		os.Exit(1)
	}
	println("ready %s", h.LocalNode())

	procstop.WaitLines(func(line string) { command(h, line, feedLog, println) })
	c := h.CapacityStatus().CoreHwm
	println("capacity peak=%d budget=%d", c.PeakAccountedBytes, c.EffectiveBudgetBytes)
	res, err := h.Shutdown(context.Background(), *shutdownDeadline)
	if err == nil {
		err = h.Close() // the shutdown's teardown errors, if any
	}
	println("stopped %s/%s", res.Outcome, res.Reason)
	if j != nil {
		_ = j.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeproc:", err)
		os.Exit(1)
	}
}

// awaitFeedReach waits, for 30 s at most, until this node's posts on the Feed reach n subscriber
// nodes.
func awaitFeedReach(h *rt.Host, n int) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, ch := range h.MeshStatus().Channels {
			if ch.ChannelName == rttest.FeedChannel && ch.ReadyTargetCount >= n {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// parseDialVia reads -dial-via: endpoint=proxy,...
func parseDialVia(s string) (map[string]string, error) {
	via := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		ep, proxy, ok := strings.Cut(part, "=")
		if !ok || ep == "" || proxy == "" {
			return nil, fmt.Errorf("-dial-via: %q is not endpoint=proxy", part)
		}
		via[ep] = proxy
	}
	return via, nil
}

// registerClient is the etcd client the registers keep their values with: the node's own
// endpoints, so that the node's faults are theirs too. It lives as long as the process.
func registerClient(endpoints []string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeproc:", err)
		os.Exit(1)
	}
	return cli
}

// command runs one line of standard input: "relocate planned", "relocate rolling <version>",
// "publish <n>" or "feed-report".
func command(h *rt.Host, line string, feed *rttest.FeedLog, println func(string, ...any)) {
	f := strings.Fields(line)
	opts := sdk.RelocationOptions{Deadline: time.Minute}
	switch {
	case len(f) == 1 && f[0] == "feed-report":
		println("feed %s", feed.Report())
		return
	case len(f) == 3 && f[0] == "publish":
		n, err1 := strconv.Atoi(f[1])
		reach, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || n < 0 {
			println("error bad counts %q", line)
			return
		}
		go func() {
			if !awaitFeedReach(h, reach) {
				println("error the posts do not reach %d subscriber nodes", reach)
				return
			}
			for i := 1; i <= n; i++ {
				if err := h.Publish(context.Background(), &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf(h.LocalNode(), i)); err != nil {
					println("error publish %d: %v", i, err)
					return
				}
			}
			println("published %d", n)
		}()
		return
	case len(f) == 2 && f[0] == "relocate" && f[1] == "planned":
	case len(f) == 3 && f[0] == "relocate" && f[1] == "rolling":
		v, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			println("error bad version %q", f[2])
			return
		}
		opts.Mode, opts.TargetApplicationVersion = sdk.RelocationModeRollingUpdate, &v
	default:
		println("error unknown command %q", line)
		return
	}
	go func() {
		res, err := h.Relocate(context.Background(), opts)
		if err != nil {
			println("error %v", err)
			return
		}
		println("relocated %s/%s", res.Outcome, res.Reason)
		for !h.Status().SafeToShutdown {
			time.Sleep(10 * time.Millisecond)
		}
		println("safe")
	}()
}
