package rt_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// BenchmarkCall compares request/reply to a Ledger active on this node with the same call to
// a Ledger on a node in another process, over gRPC on loopback, with 1 and 64 callers. It
// reports throughput, p50 and p99 latency, and the caller's allocations.
//
//	go test -run '^$' -bench BenchmarkCall -benchmem -benchtime 5s ./rt/
func BenchmarkCall(b *testing.B) {
	_, eps := proctest.EtcdProcess(b, benchEtcdArgs...)
	proc := proctest.Start(b, proctest.Build(b, "github.com/zlink-go/zlink/rt/internal/nodeproc"), nil,
		"-etcd", strings.Join(eps, ","), "-node", "remote", "-quiet", "-lease-ttl", "10s")
	if _, err := proc.Expect("ready ", time.Minute); err != nil {
		b.Fatal(err)
	}
	cfg := rt.DefaultConfig()
	cfg.NodeID = "caller"
	cfg.EtcdEndpoints = eps
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.InstanceSpotIdleTimeout = -1
	cfg.Register = func(r sdk.Registrar) error { return rttest.RegisterLedger(r, func(string, string) {}, nil) }
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := h.Call(ctx, openLedger("far"), rttest.LedgerRecord, wrapperspb.String("warm"), sdk.OnNode("remote"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := h.Call(ctx, openLedger("near"), rttest.LedgerRecord, wrapperspb.String("warm"), sdk.OnNode("caller")); err != nil {
		b.Fatal(err)
	}
	msg := wrapperspb.String("a message of some thirty-two bytes")
	for _, where := range []string{"local", "remote"} {
		target := ledger("near")
		if where == "remote" {
			target = ledger("far")
		}
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", where, callers), func(b *testing.B) {
				lat := make([]time.Duration, b.N+1)
				b.ReportAllocs()
				rttest.RunCallers(b, callers, func(i int64) error {
					start := time.Now()
					_, err := h.Call(ctx, target, rttest.LedgerRecord, msg)
					lat[i] = time.Since(start)
					return err
				})
				reportLatency(b, lat[1:])
			})
		}
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(float64(len(lat))*p))] }
	b.ReportMetric(float64(pct(0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(pct(0.99).Nanoseconds()), "p99-ns")
}
