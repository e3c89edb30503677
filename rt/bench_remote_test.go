package rt_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
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
// reports throughput, p50 and p99 latency, the caller's allocations and, for the remote calls,
// the processor time per call of each process (client-cpu-µs/op, server-cpu-µs/op) and the
// read and write system calls per call of each (client-rw-syscalls/op, server-rw-syscalls/op):
// a batch of calls shares its socket's reads and writes.
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
	warmLedger(b, h, "far", "remote")
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
				client, server, cpu := processCPU(os.Getpid()), processCPU(proc.Pid()), where == "remote"
				clientRW, serverRW := processReadsWrites(os.Getpid()), processReadsWrites(proc.Pid())
				rttest.RunCallers(b, callers, func(i int64) error {
					start := time.Now()
					_, err := h.Call(ctx, target, rttest.LedgerRecord, msg)
					lat[i] = time.Since(start)
					return err
				})
				reportLatency(b, lat[1:])
				if !cpu {
					return
				}
				// A figure is reported only when both of its readings could be made.
				if clientEnd, serverEnd := processCPU(os.Getpid()), processCPU(proc.Pid()); min(client, server, clientEnd, serverEnd) >= 0 {
					b.ReportMetric(float64((clientEnd-client).Microseconds())/float64(b.N), "client-cpu-µs/op")
					b.ReportMetric(float64((serverEnd-server).Microseconds())/float64(b.N), "server-cpu-µs/op")
				}
				if clientEnd, serverEnd := processReadsWrites(os.Getpid()), processReadsWrites(proc.Pid()); min(clientRW, serverRW, clientEnd, serverEnd) >= 0 {
					b.ReportMetric(float64(clientEnd-clientRW)/float64(b.N), "client-rw-syscalls/op")
					b.ReportMetric(float64(serverEnd-serverRW)/float64(b.N), "server-rw-syscalls/op")
				}
			})
		}
	}
}

// warmLedger activates the Ledger id on node through h, trying for a minute while node joins
// the mesh.
func warmLedger(b *testing.B, h *rt.Host, id string, node sdk.NodeID) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := h.Call(context.Background(), openLedger(id), rttest.LedgerRecord, wrapperspb.String("warm"), sdk.OnNode(node))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(float64(len(lat))*p))] }
	b.ReportMetric(float64(pct(0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(pct(0.99).Nanoseconds()), "p99-ns")
}

// processCPU is the processor time, user and system, that process pid has used so far, from
// /proc in clock ticks of 10 ms (Linux's USER_HZ): a benchmark of some seconds reads it to
// within a percent. It is -1 where there is no /proc to read.
func processCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which is in parentheses and may hold spaces: utime
	// and stime are the 14th and 15th fields of the line, the 12th and 13th of these.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 13 {
		return -1
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return -1
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// processReadsWrites is how many read and write system calls (the socket's reads and writes
// among them) process pid has made so far, from /proc; -1 where there is no /proc to read.
func processReadsWrites(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	var n int64
	found := 0
	for line := range strings.Lines(string(raw)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || (name != "syscr" && name != "syscw") {
			continue
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return -1
		}
		n += v
		found++
	}
	if found != 2 {
		return -1
	}
	return n
}

// BenchmarkRemoteCallBothSides is the remote request/reply of BenchmarkCall with 64 callers,
// between two Hosts of this process over gRPC on loopback: its allocs/op and B/op count both
// sides of a call, the caller's and the serving node's, which BenchmarkCall cannot see of a
// node in another process.
//
//	go test -run '^$' -bench BenchmarkRemoteCallBothSides -benchmem ./rt/
func BenchmarkRemoteCallBothSides(b *testing.B) {
	eps := etcdForBench(b)
	withLedger := func(node sdk.NodeID) func(*rt.Config) {
		return func(cfg *rt.Config) {
			cfg.NodeID = node
			cfg.Register = func(r sdk.Registrar) error { return rttest.RegisterLedger(r, func(string, string) {}, nil) }
		}
	}
	benchHostOn(b, eps, 0, withLedger("serving"))
	h := benchHostOn(b, eps, 0, withLedger("calling"))
	ctx := context.Background()
	warmLedger(b, h, "far", "serving")
	msg, target := wrapperspb.String("a message of some thirty-two bytes"), ledger("far")
	b.ReportAllocs()
	rttest.RunCallers(b, 64, func(int64) error {
		_, err := h.Call(ctx, target, rttest.LedgerRecord, msg)
		return err
	})
}
