package rt_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// BenchmarkRelocation relocates 10,000 idle Instance Spots with 1 KiB of state each from one
// node process to another (etcd in a process of its own), while 8 callers on a third node call
// moving Spots and Spots that stay, with 4, 16 (the default) and 64 units at once. It reports
// the relocation's units per second, the store revisions per unit (each unit writes two
// transactions, its target's consent and its commit; group commit puts many in one revision,
// and every other write in that time counts too), and the p50 and p99 latency of calls to
// moving and to staying Spots meanwhile. One relocation per run:
//
//	go test -run '^$' -bench BenchmarkRelocation -benchtime 1x ./rt/
func BenchmarkRelocation(b *testing.B) {
	for _, p := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("parallelism=%d", p), func(b *testing.B) { benchRelocation(b, p) })
	}
}

func benchRelocation(b *testing.B, parallelism int) {
	const spots, stayers, state = 10_000, 100, 1024
	_, eps := proctest.EtcdProcess(b, append([]string{"-max-txn-ops=1024"}, benchEtcdArgs...)...)
	bin := proctest.Build(b, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	node := func(id string) *proctest.Process {
		p := proctest.Start(b, bin, nil, "-etcd", strings.Join(eps, ","), "-node", id, "-quiet", "-lease-ttl", "10s",
			"-ledger-state", fmt.Sprint(state), "-relocation-parallelism", fmt.Sprint(parallelism))
		if _, err := p.Expect("ready ", time.Minute); err != nil {
			b.Fatal(err)
		}
		return p
	}
	src, _ := node("src"), node("dst")
	cfg := rt.DefaultConfig()
	cfg.NodeID = "caller"
	cfg.Roles = rt.RoleObjectClient
	cfg.EtcdEndpoints = eps
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	ctx := context.Background()
	open := func(id string, on sdk.NodeID) {
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := h.Call(ctx, openLedger(id), rttest.LedgerRecord, wrapperspb.String(id), sdk.OnNode(on))
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				b.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	open("stay-0", "dst")
	open("move-0", "src")
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range spots + stayers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if i < spots {
				open(fmt.Sprint("move-", i), "src")
			} else {
				open(fmt.Sprint("stay-", i-spots), "dst")
			}
		})
	}
	wg.Wait()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	revision := func() int64 {
		resp, err := cli.Get(ctx, "/zlink-bench-revision")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}

	for b.Loop() {
		stop := make(chan struct{})
		var mu sync.Mutex
		lat := map[bool][]time.Duration{}
		var callers sync.WaitGroup
		for w := range 8 {
			moving := w%2 == 0
			callers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprint("stay-", rand.IntN(stayers))
					if moving {
						id = fmt.Sprint("move-", rand.IntN(spots))
					}
					start := time.Now()
					_, err := h.Call(ctx, ledger(id), rttest.LedgerRecord, wrapperspb.String("m"))
					d := time.Since(start)
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					lat[moving] = append(lat[moving], d)
					mu.Unlock()
				}
			})
		}
		rev := revision()
		start := time.Now()
		if _, err := io.WriteString(src.Stdin(), "relocate planned\n"); err != nil {
			b.Fatal(err)
		}
		out, err := src.Expect("relocated ", 10*time.Minute)
		elapsed := time.Since(start)
		close(stop)
		callers.Wait()
		if err != nil || out != "Relocated/None" {
			b.Fatalf("relocation: %q %v", out, err)
		}
		writes := revision() - rev
		b.ReportMetric(float64(spots)/elapsed.Seconds(), "units/s")
		b.ReportMetric(elapsed.Seconds(), "s/relocation")
		b.ReportMetric(float64(writes)/spots, "etcd-revisions/unit")
		for moving, name := range map[bool]string{true: "moving", false: "staying"} {
			l := lat[moving]
			if len(l) == 0 {
				continue
			}
			slices.Sort(l)
			b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), "p99-"+name+"-µs")
			b.ReportMetric(float64(l[len(l)/2].Microseconds()), "p50-"+name+"-µs")
		}
	}
}
