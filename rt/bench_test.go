package rt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// The runtime's benchmarks run against etcd in a process of its own (fsync on), so that the
// measured process holds only the node.
//
//	go test -run '^$' -bench . -benchmem ./rt/

// sink is an Instance Spot that counts what it is sent.
type sink struct{ n atomic.Int64 }

var sinkDesc = &sdk.SpotDesc{Name: "bench.Sink", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
	{
		Name:       "Echo",
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			return req, nil
		},
	},
	{
		Name:       "Count",
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			return wrapperspb.Int64(impl.(*sink).n.Load()), nil
		},
	},
	{
		Name:       "Post",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			impl.(*sink).n.Add(1)
			return nil, nil
		},
	},
}}

func benchHost(b *testing.B, maxTxnOps int, mutate ...func(*rt.Config)) *rt.Host {
	b.Helper()
	return benchHostOn(b, etcdForBench(b), maxTxnOps, mutate...)
}

// benchHostOn is benchHost on the etcd at endpoints.
func benchHostOn(b *testing.B, endpoints []string, maxTxnOps int, mutate ...func(*rt.Config)) *rt.Host {
	b.Helper()
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.EtcdEndpoints = endpoints
	cfg.EtcdMaxTxnOps = maxTxnOps
	cfg.InstanceSpotIdleTimeout = -1
	cfg.StopTimeout = 2 * time.Minute
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(sinkDesc, func(sdk.SpotContext) (any, error) { return &sink{}, nil })
	}
	for _, m := range mutate {
		m(&cfg)
	}
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	return h
}

// etcdForBench starts one etcd process for the benchmark run (max-txn-ops 1024 so that the
// group commit can be measured with large batches).
func etcdForBench(b *testing.B) []string {
	b.Helper()
	_, eps := etcdProcessForBench(b)
	return eps
}

// etcdProcessForBench is etcdForBench with the etcd process, whose processor time a benchmark
// can read.
func etcdProcessForBench(b *testing.B) (*proctest.Process, []string) {
	b.Helper()
	return proctest.EtcdProcess(b, append([]string{"-max-txn-ops=1024"}, benchEtcdArgs...)...)
}

var one = wrapperspb.Int64(1)

// BenchmarkLocalCall calls a Spot of the same node: diagnostics Off, Normal with the global
// providers (no-ops until the application installs some), and Normal with the OpenTelemetry
// API's no-op providers given in the config; and diagnostics Off with a caller's context that
// can be cancelled, as an application's request context can, for which the handler's turn
// gets a context of its own (one allocation) that tells its calls from the caller's. The level
// is a process global: it is restored afterwards.
func BenchmarkLocalCall(b *testing.B) {
	noopProviders := func(c *rt.Config) {
		c.TracerProvider, c.MeterProvider = tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	}
	for _, run := range []struct {
		name       string
		level      sdk.DiagnosticsLevel
		mutate     []func(*rt.Config)
		cancelable bool
	}{
		{"diagnostics=Off", sdk.DiagnosticsLevelOff, nil, false},
		{"diagnostics=Normal", sdk.DiagnosticsLevelNormal, nil, false},
		{"diagnostics=Normal,providers=noop", sdk.DiagnosticsLevelNormal, []func(*rt.Config){noopProviders}, false},
		{"diagnostics=Off,caller-ctx=cancelable", sdk.DiagnosticsLevelOff, nil, true},
	} {
		level := run.level
		b.Run(run.name, func(b *testing.B) {
			was := sdk.CurrentDiagnosticsLevel()
			b.Cleanup(func() { _ = sdk.SetDiagnosticsLevelSync(was) })
			if err := sdk.SetDiagnosticsLevelSync(level); err != nil {
				b.Fatal(err)
			}
			for _, callers := range []int{1, 64} {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					h := benchHost(b, 128, run.mutate...)
					ctx := context.Background()
					if run.cancelable {
						var cancel context.CancelFunc
						ctx, cancel = context.WithCancel(ctx)
						defer cancel()
					}
					if _, err := h.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, "hot"), "Echo", one); err != nil {
						b.Fatal(err)
					}
					target := sdk.InstanceTarget(sinkDesc.Name, "hot")
					b.ReportAllocs()
					rttest.RunCallers(b, callers, func(int64) error {
						_, err := h.Call(ctx, target, "Echo", one)
						return err
					})
				})
			}
		})
	}
}

// BenchmarkSendTo64Spots sends one-way messages from 64 callers to 64 Spots of one node and
// counts them handled: with a sender's context that carries nothing, and with one that carries
// a value, as an application's request context does, which the Spot's turn context then carries
// too.
func BenchmarkSendTo64Spots(b *testing.B) {
	for _, run := range []struct {
		name string
		ctx  context.Context
	}{
		{"sender-ctx=background", context.Background()},
		{"sender-ctx=values", context.WithValue(context.Background(), benchKey{}, "request")},
	} {
		b.Run(run.name, func(b *testing.B) { sendTo64Spots(b, run.ctx) })
	}
}

// benchKey is the key of a value that a sender's context carries.
type benchKey struct{}

func sendTo64Spots(b *testing.B, ctx context.Context) {
	h := benchHost(b, 128)
	targets := make([]sdk.Target, 64)
	for i := range targets {
		targets[i] = sdk.InstanceTarget(sinkDesc.Name, fmt.Sprint("s", i))
		if _, err := h.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, fmt.Sprint("s", i)), "Echo", one); err != nil {
			b.Fatal(err)
		}
	}
	var refused atomic.Int64
	b.ReportAllocs()
	cpu, lockWait := selfCPU(), readLockWait()
	start := time.Now()
	rttest.RunCallers(b, 64, func(i int64) error {
		for {
			err := h.Send(ctx, targets[i%64], "Post", one)
			if !errors.Is(err, sdk.ErrQueueFull) {
				return err
			}
			// A full lane pushes back: the sender yields and tries again.
			refused.Add(1)
			runtime.Gosched()
		}
	})
	b.StartTimer()
	// Throughput counts handled messages: wait until every admitted send ran.
	for posted(h) < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handled/s")
	b.ReportMetric(float64(refused.Load())/float64(b.N), "pushbacks/op")
	// The process's processor time per message, summed over the processors, is the path's
	// cost with the scheduler's and the collector's; the rate also depends on how busy the
	// scheduler kept the processors. The time goroutines spent blocked on locks shows
	// contention.
	if end := selfCPU(); cpu >= 0 && end >= 0 {
		b.ReportMetric(float64((end-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	if end := readLockWait(); lockWait >= 0 && end >= 0 {
		b.ReportMetric(float64((end-lockWait).Nanoseconds())/float64(b.N), "lock-wait-ns/op")
	}
}

// selfCPU is the processor time, user and system, that this process has used so far; -1
// where the system does not tell it.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readLockWait is the approximate time the process's goroutines have spent blocked on
// sync.Mutex, sync.RWMutex and the runtime's own locks so far; -1 where the runtime does not
// tell it.
func readLockWait() time.Duration {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return -1
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

// posted sums what the sinks were sent; Echo calls count nothing.
func posted(h *rt.Host) int64 {
	var n int64
	for i := range 64 {
		out, err := h.Call(context.Background(), sdk.InstanceTarget(sinkDesc.Name, fmt.Sprint("s", i)), "Count", one)
		if err == nil {
			n += out.(*wrapperspb.Int64Value).GetValue()
		}
	}
	return n
}

// BenchmarkColdActivation compares 64 concurrent intent callers activating fresh Instance
// Spots with the raw, unbatched rate of the two etcd transactions a creation needs, and with
// the same two writes made through the Location Store alone (its group commit, no runtime),
// each on an etcd process of its own. The store-only row splits what an activation costs: the
// rate that the group commit reaches for 64 writers that each wait for their own writes, and
// what the runtime above it adds (the call, the creation, the factory).
func BenchmarkColdActivation(b *testing.B) {
	b.Run("raw-etcd-2txn/callers=64", func(b *testing.B) {
		c, err := clientv3.New(clientv3.Config{Endpoints: etcdForBench(b), Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		rttest.RunCallers(b, 64, func(i int64) error {
			k := fmt.Sprintf("/raw/%d", i)
			r1, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, "creating-record-of-similar-size")).Commit()
			if err != nil {
				return err
			}
			_, err = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r1.Header.Revision)).
				Then(clientv3.OpPut(k, "ready-record-of-similar-size-xx")).Commit()
			return err
		})
	})
	b.Run("store-only/max-txn-ops=128/callers=64", func(b *testing.B) {
		etcd, eps := etcdProcessForBench(b)
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		s, err := store.New(c, "bench", store.WithGroupCommit(128))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		reg, err := s.Register(ctx, &storepb.NodeDescriptor{NodeId: "store-only", Roles: 1, Weight: 1}, store.LeaseOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = reg.Close(context.Background()) }()
		owner := reg.Owner()
		b.ReportAllocs()
		withProcessCPU(b, etcd.Pid(), func() {
			rttest.RunCallers(b, 64, func(i int64) error {
				r, err := s.Reserve(ctx, store.SpotKey{Type: sinkDesc.Name, ID: fmt.Sprint("cold-", i)}, sdk.KindInstance, owner)
				if err != nil {
					return err
				}
				if !r.Won {
					return fmt.Errorf("the reservation of %d was lost to %v", i, r.Current.Record)
				}
				_, err = s.CommitReady(ctx, r.Reservation)
				return err
			})
		})
	})
	for _, ops := range []int{128, 1024} {
		b.Run(fmt.Sprintf("zlink/max-txn-ops=%d/callers=64", ops), func(b *testing.B) {
			etcd, eps := etcdProcessForBench(b)
			h := benchHostOn(b, eps, ops)
			ctx := context.Background()
			b.ReportAllocs()
			withProcessCPU(b, etcd.Pid(), func() {
				rttest.RunCallers(b, 64, func(i int64) error {
					_, err := h.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, fmt.Sprint("cold-", i)), "Echo", one)
					return err
				})
			})
		})
	}
	// The same from a client-only node to a serving node of this process over gRPC on
	// loopback: each activation is a peer's intent call, which the serving node resolves off
	// its stream's reader. node-cpu-µs/op is both nodes'.
	b.Run("zlink-remote/max-txn-ops=128/callers=64", func(b *testing.B) {
		etcd, eps := etcdProcessForBench(b)
		benchHostOn(b, eps, 128, func(cfg *rt.Config) { cfg.NodeID = "serving" })
		h := benchHostOn(b, eps, 128, func(cfg *rt.Config) { cfg.NodeID, cfg.Roles = "calling", rt.RoleObjectClient })
		ctx := context.Background()
		if _, err := h.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, "warm"), "Echo", one); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		withProcessCPU(b, etcd.Pid(), func() {
			rttest.RunCallers(b, 64, func(i int64) error {
				_, err := h.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, fmt.Sprint("cold-", i)), "Echo", one)
				return err
			})
		})
	})
}

// withProcessCPU runs run and reports the processor time per operation of this process
// (node-cpu-µs/op: the node, its callers included) and of the etcd process etcdPid
// (etcd-cpu-µs/op). The two share the machine's processors: what each spends is what the
// other's throughput waits behind.
func withProcessCPU(b *testing.B, etcdPid int, run func()) {
	node, etcd := processCPU(os.Getpid()), processCPU(etcdPid)
	run()
	if nodeEnd, etcdEnd := processCPU(os.Getpid()), processCPU(etcdPid); min(node, etcd, nodeEnd, etcdEnd) >= 0 {
		b.ReportMetric(float64((nodeEnd-node).Microseconds())/float64(b.N), "node-cpu-µs/op")
		b.ReportMetric(float64((etcdEnd-etcd).Microseconds())/float64(b.N), "etcd-cpu-µs/op")
	}
}

// BenchmarkIdleFootprint activates 100,000 Instance Spots and reports the runtime's heap bytes
// and goroutines per idle activation, beyond the application's own object.
func BenchmarkIdleFootprint(b *testing.B) {
	const spots = 100_000
	for range b.N {
		h := benchHost(b, 1024)
		ctx := context.Background()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		goBefore := runtime.NumGoroutine()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range spots {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := h.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, fmt.Sprintf("idle-%06d", i)), "Echo", one); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		time.Sleep(100 * time.Millisecond) // let finished goroutines exit
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		goAfter := runtime.NumGoroutine()
		const appObject = 8 // the sink: one atomic.Int64
		perSpot := float64(after.HeapAlloc-before.HeapAlloc)/spots - appObject
		b.ReportMetric(perSpot, "heap-B/spot")
		b.ReportMetric(float64(goAfter-goBefore)/spots, "goroutines/spot")
		if got := h.CatalogStats().Active; got != spots {
			b.Fatalf("%d active, want %d", got, spots)
		}
		b.StopTimer()
		_ = h.Close()
		b.StartTimer()
	}
}

// benchEtcdArgs are extra etcdproc flags, such as a CPU profile: ZLINK_BENCH_ETCD_ARGS.
var benchEtcdArgs = strings.Fields(os.Getenv("ZLINK_BENCH_ETCD_ARGS"))
