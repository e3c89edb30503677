// Command nodeproc is a ZLink node for multi-process tests: it joins a mesh on the given etcd
// and hosts the rttest Ledger, and with -journal the rttest Worker too. It prints "ready
// <endpoint>" once serving and "ran <spot> <msg>" for every message a Ledger runs, and stops
// when its standard input closes or it gets SIGTERM or SIGINT.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/zlink-go/zlink/internal/procstop"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/rttest"
	"github.com/zlink-go/zlink/sdk"
)

func main() {
	etcd := flag.String("etcd", "", "etcd endpoints, comma-separated")
	node := flag.String("node", "", "node ID")
	mesh := flag.String("mesh", "default", "mesh name")
	ttl := flag.Duration("lease-ttl", 2*time.Second, "owner lease TTL")
	quiet := flag.Bool("quiet", false, "do not print the messages Ledgers run (benchmarks)")
	journal := flag.String("journal", "", "host rttest Workers and journal their turns to this file")
	workDelay := flag.Duration("work-delay", 20*time.Millisecond, "how long a Worker's Work turn takes")
	tick := flag.Duration("tick", 20*time.Millisecond, "the period of every Worker's timer")
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
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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
		if j != nil {
			if err := rttest.RegisterWorker(r, j, *workDelay, *tick); err != nil {
				return err
			}
		}
		return rttest.RegisterLedger(r, ran, nil)
	}
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeproc:", err)
		os.Exit(1)
	}
	println("ready %s", h.Endpoint())

	procstop.Wait()
	err = h.Close()
	if j != nil {
		_ = j.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeproc:", err)
		os.Exit(1)
	}
}
