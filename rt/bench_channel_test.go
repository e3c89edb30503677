package rt_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// BenchmarkChannelCall compares a ClientServer channel call with a Spot call, in one run: to a
// server (a Ledger) on this node, and to a server (a Ledger) on a node in another process, over
// gRPC on loopback, with 1 and 64 callers.
//
//	go test -run '^$' -bench BenchmarkChannelCall -benchmem -benchtime 5s ./rt/
func BenchmarkChannelCall(b *testing.B) {
	_, eps := proctest.EtcdProcess(b, benchEtcdArgs...)
	proc := proctest.Start(b, proctest.Build(b, "github.com/zlink-go/zlink/rt/internal/nodeproc"), nil,
		"-etcd", strings.Join(eps, ","), "-node", "remote", "-quiet", "-lease-ttl", "10s", "-who-weight", "1")
	if _, err := proc.Expect("ready ", time.Minute); err != nil {
		b.Fatal(err)
	}
	near := rttest.WhoDescNamed("rttest.WhoNear") // served only here
	cfg := rt.DefaultConfig()
	cfg.NodeID = "caller"
	cfg.EtcdEndpoints = eps
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.InstanceSpotIdleTimeout = -1
	cfg.Register = func(r sdk.Registrar) error {
		if err := rttest.RegisterWhoServerOf(r, near, "caller"); err != nil {
			return err
		}
		return rttest.RegisterLedger(r, func(string, string) {}, nil)
	}
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err1 := h.Call(ctx, openLedger("far"), rttest.LedgerRecord, wrapperspb.String("warm"), sdk.OnNode("remote"))
		_, err2 := h.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoWho, wrapperspb.String("warm"))
		if err1 == nil && err2 == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := h.Call(ctx, openLedger("near"), rttest.LedgerRecord, wrapperspb.String("warm"), sdk.OnNode("caller")); err != nil {
		b.Fatal(err)
	}
	msg := wrapperspb.String("a message of some thirty-two bytes")
	calls := map[string]func() error{
		"spot/local": func() error { _, err := h.Call(ctx, ledger("near"), rttest.LedgerRecord, msg); return err },
		"channel/local": func() error {
			_, err := h.CallChannel(ctx, near, rttest.WhoWho, msg)
			return err
		},
		"spot/remote": func() error { _, err := h.Call(ctx, ledger("far"), rttest.LedgerRecord, msg); return err },
		"channel/remote": func() error {
			_, err := h.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoWho, msg)
			return err
		},
	}
	for _, name := range []string{"spot/local", "channel/local", "spot/remote", "channel/remote"} {
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", name, callers), func(b *testing.B) {
				lat := make([]time.Duration, b.N+1)
				b.ReportAllocs()
				call := calls[name]
				rttest.RunCallers(b, callers, func(i int64) error {
					start := time.Now()
					err := call()
					lat[i] = time.Since(start)
					return err
				})
				reportLatency(b, lat[1:])
			})
		}
	}
}

// BenchmarkFanout publishes from this node, with 64 publishing goroutines, to 1, 2 and 3
// subscriber nodes in processes of their own; it reports publications per second and
// deliveries per second (publications times subscriber nodes), from which the cost of one more
// subscriber follows.
//
//	go test -run '^$' -bench BenchmarkFanout -benchtime 5s ./rt/
func BenchmarkFanout(b *testing.B) {
	_, eps := proctest.EtcdProcess(b, benchEtcdArgs...)
	cfg := rt.DefaultConfig()
	cfg.NodeID = "publisher"
	cfg.EtcdEndpoints = eps
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	bin := proctest.Build(b, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	ctx := context.Background()
	msg := rttest.FeedPostOf("publisher", 1)
	for subs := 1; subs <= 3; subs++ {
		proc := proctest.Start(b, bin, nil, "-etcd", strings.Join(eps, ","), "-node", fmt.Sprintf("sub-%d", subs),
			"-quiet", "-lease-ttl", "10s", "-feed")
		if _, err := proc.Expect("ready ", time.Minute); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for reach(h) < subs {
			if time.Now().After(deadline) {
				b.Fatalf("the posts never reach %d subscribers", subs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			rttest.RunCallers(b, 64, func(int64) error {
				return h.Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, msg)
			})
			s := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/s, "posts/s")
			b.ReportMetric(float64(b.N*subs)/s, "deliveries/s")
		})
	}
}

// reach is how many subscriber nodes h's posts on the Feed reach now.
func reach(h *rt.Host) int {
	for _, ch := range h.MeshStatus().Channels {
		if ch.ChannelName == rttest.FeedChannel {
			return ch.ReadyTargetCount
		}
	}
	return 0
}
