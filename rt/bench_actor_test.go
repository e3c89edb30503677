package rt_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// The Actor benchmarks: a call to an Actor beside a call to a Spot on the same node, moves
// between two Spots of one node and of two nodes (with the etcd writes each costs), and the
// memory of an idle Actor.
//
//	go test -run '^$' -bench 'Actor' -benchmem ./rt/

// token is an Actor that echoes.
type token struct{}

var tokenDesc = &sdk.SpotDesc{Name: "bench.Token", Kind: sdk.KindActor, Methods: []sdk.MethodDesc{{
	Name:       "Echo",
	NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
	NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
	Invoke: func(_ any, _ context.Context, req proto.Message) (proto.Message, error) {
		return req, nil
	},
}}}

// boardDesc is the Entry Spot that Tokens are spawned into.
var boardDesc = &sdk.SpotDesc{Name: "bench.Board", Kind: sdk.KindEntry, Methods: sinkDesc.Methods}

// actorBench is a node serving Sinks, Boards and Tokens; board is its Entry Spot's context.
type actorBench struct {
	*rt.Host
	mu    sync.Mutex
	board sdk.SpotContext
}

func startActorBench(b *testing.B, endpoints []string, node string) *actorBench {
	b.Helper()
	ab := &actorBench{}
	cfg := rt.DefaultConfig()
	cfg.NodeID = sdk.NodeID(node)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.EtcdEndpoints = endpoints
	cfg.EtcdMaxTxnOps = 1024
	cfg.InstanceSpotIdleTimeout = -1
	cfg.StopTimeout = 2 * time.Minute
	cfg.MaxActiveActors = 0
	cfg.Register = func(r sdk.Registrar) error {
		if err := r.RegisterSpot(sinkDesc, func(sdk.SpotContext) (any, error) { return &sink{}, nil }); err != nil {
			return err
		}
		if err := r.RegisterSpot(boardDesc, func(sc sdk.SpotContext) (any, error) {
			ab.mu.Lock()
			ab.board = sc
			ab.mu.Unlock()
			return &sink{}, nil
		}); err != nil {
			return err
		}
		return r.RegisterActor(tokenDesc, func(sdk.ActorContext) (any, error) { return &token{}, nil })
	}
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ab.Host = h
	b.Cleanup(func() { _ = h.Close() })
	return ab
}

func (ab *actorBench) spawn(b *testing.B, id string) {
	ab.mu.Lock()
	sc := ab.board
	ab.mu.Unlock()
	if err := sc.Spawn(context.Background(), tokenDesc, id); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkActorCall calls an active Actor and, in the same run, an active Spot of the same
// node: the Actor's cost over the Spot's is its index lookup and its admission check.
func BenchmarkActorCall(b *testing.B) {
	was := sdk.CurrentDiagnosticsLevel()
	b.Cleanup(func() { _ = sdk.SetDiagnosticsLevelSync(was) })
	if err := sdk.SetDiagnosticsLevelSync(sdk.DiagnosticsLevelOff); err != nil {
		b.Fatal(err)
	}
	ab := startActorBench(b, etcdForBench(b), "bench-a")
	ctx := context.Background()
	if _, err := ab.Call(ctx, sdk.InstanceIntent(sinkDesc.Name, "hot"), "Echo", one); err != nil {
		b.Fatal(err)
	}
	ab.spawn(b, "hot")
	for _, to := range []struct {
		name   string
		target sdk.Target
	}{
		{"spot", sdk.InstanceTarget(sinkDesc.Name, "hot")},
		{"actor", sdk.ActorTarget(tokenDesc.Name, "hot")},
	} {
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", to.name, callers), func(b *testing.B) {
				b.ReportAllocs()
				rttest.RunCallers(b, callers, func(int64) error {
					_, err := ab.Call(ctx, to.target, "Echo", one)
					return err
				})
			})
		}
	}
}

// BenchmarkActorMove moves one Actor back and forth between two Instance Spots, of one node
// and of two nodes, and reports the etcd writes each move costs (the revisions it adds).
func BenchmarkActorMove(b *testing.B) {
	endpoints := etcdForBench(b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.Close() })
	revision := func() int64 {
		resp, err := cli.Get(context.Background(), "zlink-bench-revision")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	// The baseline: one raw etcd transaction like a move's commit (a compare on the record's
	// revision, a put), back to back, on the same etcd.
	b.Run("raw-etcd-txn", func(b *testing.B) {
		key := "zlink-bench-raw-move"
		for range b.N {
			resp, err := cli.Txn(context.Background()).
				If(clientv3.Compare(clientv3.Version(key), ">", -1)).
				Then(clientv3.OpPut(key, "host")).Commit()
			if err != nil || !resp.Succeeded {
				b.Fatal(err, resp)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txns/s")
	})
	x := startActorBench(b, endpoints, "move-a")
	y := startActorBench(b, endpoints, "move-b")
	ctx := context.Background()
	for _, run := range []struct {
		name   string
		second *actorBench
	}{{"local", x}, {"remote", y}} {
		id := "mover-" + run.name
		from := sdk.InstanceIntent(sinkDesc.Name, id+"-1")
		to := sdk.InstanceIntent(sinkDesc.Name, id+"-2")
		if _, err := x.Call(ctx, from, "Echo", one, sdk.OnNode(x.LocalNode())); err != nil {
			b.Fatal(err)
		}
		if _, err := run.second.Call(ctx, to, "Echo", one, sdk.OnNode(run.second.LocalNode())); err != nil {
			b.Fatal(err)
		}
		x.spawn(b, id)
		// The Actor starts in the Board; the first move takes it into the first Spot.
		if err := x.MoveActor(ctx, sdk.ActorTarget(tokenDesc.Name, id), from.Plain()); err != nil {
			b.Fatal(err)
		}
		spots := [2]sdk.Target{to.Plain(), from.Plain()}
		next := 0 // where the next move goes; the benchmark function runs several times
		b.Run(run.name, func(b *testing.B) {
			before := revision()
			b.ResetTimer()
			for range b.N {
				if err := x.MoveActor(ctx, sdk.ActorTarget(tokenDesc.Name, id), spots[next]); err != nil {
					b.Fatal(err)
				}
				next = 1 - next
			}
			b.StopTimer()
			b.ReportMetric(float64(revision()-before)/float64(b.N), "etcd-writes/move")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "moves/s")
		})
	}
}

// BenchmarkIdleActorFootprint spawns 100,000 Actors into one Spot and reports the heap and the
// goroutines each idle one holds.
func BenchmarkIdleActorFootprint(b *testing.B) {
	const actors = 100_000
	endpoints := etcdForBench(b)
	for range b.N {
		ab := startActorBench(b, endpoints, "footprint")
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		goBefore := runtime.NumGoroutine()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range actors {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				ab.spawn(b, fmt.Sprintf("idle-%06d", i))
			})
		}
		wg.Wait()
		time.Sleep(100 * time.Millisecond) // let finished goroutines exit
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/actors, "heap-B/actor")
		b.ReportMetric(float64(runtime.NumGoroutine()-goBefore)/actors, "goroutines/actor")
		if got := ab.MeshStatus().Placement.ActiveActorCount; got != actors {
			b.Fatalf("%d active, want %d", got, actors)
		}
		b.StopTimer()
		_ = ab.Close()
		b.StartTimer()
	}
}
