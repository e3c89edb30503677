package harness

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

func TestMedianAndDirection(t *testing.T) {
	runs := Runs{workload.OneWay64: {
		ZLink:      {{Ops: 300, Seconds: 1}, {Ops: 100, Seconds: 1}, {Ops: 200, Seconds: 1}},
		ProtoActor: {{Ops: 400, Seconds: 1}, {Ops: 400, Seconds: 2}, {Ops: 100, Seconds: 1}},
	}}
	rows := Rows(runs, []workload.Name{workload.OneWay64}, workload.Defaults)
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	if r.ZLink != 200 || r.ProtoActor != 200 || r.Ahead() != "even" {
		t.Fatalf("row %+v", r)
	}
	lat := Row{Unit: Nanos, ZLink: 1, ProtoActor: 2}
	if lat.Ahead() != "ZLink" || lat.Ratio() != 0.5 {
		t.Fatalf("lower latency is better: %+v", lat)
	}
}

func TestFormats(t *testing.T) {
	for in, want := range map[float64]string{999.6e6: "1000 ms", 1.5e9: "1.50 s", 412: "412 ns", 12345: "12.3 µs"} {
		if got := fmtDur(in); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", in, got, want)
		}
	}
	if got := fmtRate(2_345_678); got != "2.35 M/s" {
		t.Errorf("fmtRate = %q", got)
	}
	if got := count(100000); got != "100,000" {
		t.Errorf("count = %q", got)
	}
	for in, want := range map[float64]string{0: "0 B", 1023: "1023 B", 1536: "1.50 KiB", 150 << 20: "150 MiB", 3 << 30: "3.00 GiB"} {
		require.Equal(t, want, fmtBytes(in), in)
	}
	if !strings.Contains(Table([]Row{{Workload: "w", Metric: "m", HigherBetter: true, ZLink: 2, ProtoActor: 1}}), " 2.00 |") {
		t.Error("ratio cell missing")
	}
}

func TestMemoryRowsAreBytesAndBetterLower(t *testing.T) {
	mem := func(live, inuse, rss float64) workload.Result {
		return workload.Result{Ops: 10, Seconds: 1, Memory: &workload.Memory{
			Objects: 10, LivePerObject: live, InusePerObject: inuse, HeapInuse: inuse * 10, Resident: rss, PeakResident: 2 * rss,
		}}
	}
	runs := Runs{
		workload.IdleFootprint: {ZLink: {mem(900, 1000, 0)}, ProtoActor: {mem(1800, 2000, 0)}},
		workload.Memory100k:    {ZLink: {mem(0, 3<<20, 100<<20)}, ProtoActor: {mem(0, 1<<20, 50<<20)}},
	}
	rows := Rows(runs, []workload.Name{workload.IdleFootprint, workload.Memory100k}, workload.Defaults)
	require.Len(t, rows, 5)
	var metrics []string
	for _, r := range rows {
		metrics = append(metrics, r.Metric)
		require.Equal(t, Bytes, r.Unit, r.Metric)
		require.False(t, r.HigherBetter, r.Metric)
	}
	require.Equal(t, []string{"live heap/object", "heap in use/object", "heap in use", "resident", "peak resident"}, metrics)
	require.Equal(t, "ZLink", rows[0].Ahead())
	require.InDelta(t, 0.5, rows[0].Ratio(), 1e-9)
	require.Equal(t, "Proto.Actor", rows[3].Ahead())
	require.Equal(t, "i. idle footprint of 100,000 active objects", rows[0].Workload)
	require.Equal(t, "j. memory with 100,000 active objects", rows[2].Workload)
	table := Table(rows)
	require.Contains(t, table, " 900 B |")
	require.Contains(t, table, " 100 MiB |")
	require.Contains(t, table, " 1.95 KiB |")
	md := Report{Rounds: 1, Order: []workload.Name{workload.IdleFootprint, workload.Memory100k}, Params: workload.Defaults, Runs: runs}.Markdown()
	require.Contains(t, md, "| idle-footprint | 900 B/object | 1.76 KiB/object |")
	require.Contains(t, md, "| memory-100k | 30.0 MiB heap in use | 10.0 MiB heap in use |")
}

func TestNewRowsLabelsAndMetrics(t *testing.T) {
	lat := &workload.Latency{P50: 1, P99: 2, P999: 3, Mean: 2, Max: 4}
	one := workload.Result{Ops: 100, Seconds: 1, Latency: lat}
	order := []workload.Name{workload.Steady10k1024, workload.RemoteColdActivation, workload.ActorCall64, workload.ChannelCall64}
	runs := Runs{}
	for _, wl := range order {
		runs[wl] = map[Framework][]workload.Result{ZLink: {one}, ProtoActor: {one}}
	}
	rows := Rows(runs, order, workload.Defaults)
	byLabel := map[string][]string{}
	for _, r := range rows {
		byLabel[r.Workload] = append(byLabel[r.Workload], r.Metric)
	}
	latency := []string{"calls/s", "latency p50", "latency p99", "latency p99.9", "latency mean", "latency max"}
	require.Equal(t, map[string][]string{
		"d. calls to 10,000 active objects, 1,024 callers":                     latency,
		"f. remote cold activation of 20,000 IDs, 2 processes, 64 callers (*)": {"activations/s"},
		"g. request/reply to an Actor, 64 callers":                             latency,
		"h. ClientServer channel, local server, 64 callers":                    latency,
	}, byLabel)
	require.Equal(t, "d. calls to 10,000 active objects, 64 callers", Label(workload.Steady10k, workload.Defaults(workload.Steady10k)))
}

func TestTCPFloorTableSetsBothFloorsSideBySide(t *testing.T) {
	procs := func(cpu, peerCPU float64) *workload.Processes {
		return &workload.Processes{CPUSeconds: cpu, PeerCPUSeconds: peerCPU}
	}
	floor := func(rate float64, ops int64, p *workload.Processes) *workload.Floor {
		return &workload.Floor{Rate: rate, Ops: ops, Processes: p}
	}
	runs := Runs{
		workload.RemoteCall64: {ZLink: {
			// TCP ÷ gRPC per run 2, 1.2 and 1.17: the median is 1.2, where the medians of the
			// rates would give 700 ÷ 500. ZLink ÷ TCP 0.25, 0.5 and 0.6: 0.5, not 300 ÷ 700.
			// The gRPC floor's totals per call are 5, 4 and 6 µs: the first run's parts are
			// shown, where the median of the own process's part (1, 3, 2) is the third run's;
			// the TCP floor's 3, 3.5 and 2 µs: the first run's again, not the third's (2, 0.5, 1).
			{Ops: 200, Seconds: 1, Floor: floor(400, 1000, procs(1e-3, 4e-3)), TCPFloor: floor(800, 1000, procs(2e-3, 1e-3))},
			{Ops: 300, Seconds: 1, Floor: floor(500, 1000, procs(3e-3, 1e-3)), TCPFloor: floor(600, 1000, procs(0.5e-3, 3e-3))},
			{Ops: 420, Seconds: 1, Floor: floor(600, 1000, procs(2e-3, 4e-3)), TCPFloor: floor(700, 1000, procs(1e-3, 1e-3))},
			{Ops: 900, Seconds: 1, Floor: floor(500, 1000, nil)}, // no TCP floor: not counted
		}},
		// A local floor has no TCP floor.
		workload.LocalCall64: {ZLink: {{Ops: 10, Seconds: 1, Floor: floor(40, 40, nil)}}},
	}
	order := []workload.Name{workload.LocalCall64, workload.RemoteCall64}
	got := TCPFloorTable(runs, order, workload.Defaults)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 3, got)
	require.Equal(t, "| "+Label(workload.RemoteCall64, workload.Defaults(workload.RemoteCall64))+
		" (3 of 4 runs) | 300 /s | 500 /s | 700 /s | 1.20 | 0.50 | 5.00 µs (1.00 µs + 4.00 µs) | 3.00 µs (2.00 µs + 1.00 µs) |", lines[2])

	// Floors whose processes were not measured show no processor time.
	runs[workload.RemoteCall64] = map[Framework][]workload.Result{ZLink: {
		{Ops: 100, Seconds: 1, Floor: floor(200, 1, nil), TCPFloor: floor(400, 1, nil)},
	}}
	got = TCPFloorTable(runs, order, workload.Defaults)
	require.Contains(t, got, " | 100 /s | 200 /s | 400 /s | 2.00 | 0.25 | — | — |")
	require.Empty(t, TCPFloorTable(Runs{workload.LocalCall64: runs[workload.LocalCall64]}, order, workload.Defaults))
}

func TestFloorTableTakesMediansOfTheRunsThatMeasuredAFloor(t *testing.T) {
	lat := func(p999, max float64) *workload.Latency { return &workload.Latency{P999: p999, Max: max} }
	floor := func(rate, p999, max float64) *workload.Floor {
		return &workload.Floor{Rate: rate, Latency: lat(p999, max)}
	}
	runs := Runs{
		workload.LocalCall64: {ZLink: {
			// Per-run ratios 0.5, 0.25 and 0.2: their median is 0.25, where the medians of the
			// rates would give 200 ÷ 600.
			{Ops: 300, Seconds: 1, Latency: lat(3e6, 9e6), Floor: floor(600, 1e6, 4e6)},
			{Ops: 100, Seconds: 1, Latency: lat(1e6, 5e6), Floor: floor(400, 2e5, 3e6)},
			{Ops: 200, Seconds: 1, Latency: lat(2e6, 7e6), Floor: floor(1000, 4e5, 8e6)},
			{Ops: 900, Seconds: 1, Latency: lat(50e6, 90e6)}, // no floor: not counted
		}},
		workload.OneWay64: {ZLink: {{Ops: 10, Seconds: 1}}},
	}
	got := FloorTable(runs, []workload.Name{workload.OneWay64, workload.LocalCall64}, workload.Defaults)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 3, got)
	require.Contains(t, lines[2], Label(workload.LocalCall64, workload.Defaults(workload.LocalCall64)))
	require.Contains(t, lines[2], " (3 of 4 runs) | 200 /s | 600 /s | 0.25 | 2.00 ms | 400 µs | 7.00 ms | 4.00 ms |")
	require.Empty(t, FloorTable(Runs{workload.OneWay64: runs[workload.OneWay64]}, []workload.Name{workload.OneWay64}, workload.Defaults))

	// A one-way run's floor has a rate and no latencies, as the run has none.
	runs[workload.OneWay64] = map[Framework][]workload.Result{ZLink: {
		{Ops: 10, Seconds: 1, Floor: &workload.Floor{Rate: 40}},
		{Ops: 30, Seconds: 1, Floor: &workload.Floor{Rate: 60}},
		{Ops: 20, Seconds: 1, Floor: &workload.Floor{Rate: 100}},
	}}
	got = FloorTable(runs, []workload.Name{workload.OneWay64}, workload.Defaults)
	lines = strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 3, got)
	require.Contains(t, lines[2], Label(workload.OneWay64, workload.Defaults(workload.OneWay64))+" | 20.0 /s | 60.0 /s | 0.25 | — | — | — | — |")
}

func TestCPUTableComparesTheProcessorTimePerOperationOfOneProcessWorkloads(t *testing.T) {
	runs := Runs{
		workload.OneWay64: {
			// ZLink: 1.0, 1.5 and 2.0 µs per message, median 1.5; Proto.Actor 1.0 µs.
			ZLink:      {{Ops: 1000, CPUSeconds: 1e-3}, {Ops: 1000, CPUSeconds: 2e-3}, {Ops: 2000, CPUSeconds: 3e-3}},
			ProtoActor: {{Ops: 1000, CPUSeconds: 1e-3}},
		},
		// Two processes: the server's time is not in the figure, so the row is left out.
		workload.RemoteCall64: {ZLink: {{Ops: 10, CPUSeconds: 1}}, ProtoActor: {{Ops: 10, CPUSeconds: 1}}},
		// etcd does part of the work in its own process.
		workload.ColdActivation: {ZLink: {{Ops: 10, CPUSeconds: 1}}, ProtoActor: {{Ops: 10, CPUSeconds: 1}}},
		// Not measured on one side.
		workload.LocalCall64: {ZLink: {{Ops: 10, CPUSeconds: 1}}, ProtoActor: {{Ops: 10}}},
		// A memory workload measures no time per operation.
		workload.Memory100k: {ZLink: {{Ops: 10, CPUSeconds: 1}}, ProtoActor: {{Ops: 10, CPUSeconds: 1}}},
		// Some runs measured nothing: the median is of those that did (2 and 4 µs, not 0 and 2).
		workload.ActorCall64: {
			ZLink:      {{Ops: 1000}, {Ops: 1000, CPUSeconds: 2e-3}, {Ops: 1000, CPUSeconds: 4e-3}},
			ProtoActor: {{Ops: 1000, CPUSeconds: 6e-3}},
		},
	}
	order := []workload.Name{workload.LocalCall64, workload.OneWay64, workload.ColdActivation, workload.RemoteCall64,
		workload.ActorCall64, workload.Memory100k}
	got := CPUTable(runs, order, workload.Defaults)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 4, got)
	require.Equal(t, "| "+Label(workload.OneWay64, workload.Defaults(workload.OneWay64))+" | 1.50 µs | 1.00 µs | 1.50 |", lines[2])
	require.Equal(t, "| "+Label(workload.ActorCall64, workload.Defaults(workload.ActorCall64))+" | 3.00 µs (2 of 3 runs) | 6.00 µs | 0.50 |", lines[3])
	require.Empty(t, CPUTable(Runs{workload.LocalCall64: runs[workload.LocalCall64]}, order, workload.Defaults))
}

func TestProcessesTableShowsTheMedianRunOfEveryProcessOfTheRemoteAndEtcdWorkloads(t *testing.T) {
	procs := func(cpu, peerCPU float64, calls, peerCalls int64) *workload.Processes {
		return &workload.Processes{CPUSeconds: cpu, PeerCPUSeconds: peerCPU, Syscalls: calls, PeerSyscalls: peerCalls}
	}
	runs := Runs{
		workload.RemoteCall64: {
			// Totals per call of 10, 12 and 11 µs: the median run is the third, whose parts
			// are shown, not the medians of each part (6 µs for the own process).
			ZLink: {
				{Ops: 1000, Processes: procs(6e-3, 4e-3, 100, 100),
					Floor: &workload.Floor{Ops: 2000, Processes: procs(6e-3, 4e-3, 100, 90)}},
				{Ops: 1000, Processes: procs(4e-3, 8e-3, 200, 200)},
				{Ops: 1000, Processes: procs(7e-3, 4e-3, 110, 90)},
			},
			// Two runs: the lower of the two in the middle, 20 µs.
			ProtoActor: {{Ops: 1000, Processes: procs(12e-3, 10e-3, 400, 400)}, {Ops: 1000, Processes: procs(10e-3, 10e-3, 300, 300)}},
		},
		// Measured by one framework only: left out.
		workload.RemoteCall1: {ZLink: {{Ops: 10, Processes: procs(1, 1, 1, 1)}}, ProtoActor: {{Ops: 10}}},
		// Etcd does ZLink's writes; Proto.Actor's run has no other process.
		workload.ColdActivation: {
			ZLink:      {{Ops: 100, Processes: procs(5e-3, 10e-3, 50, 250)}},
			ProtoActor: {{Ops: 100, Processes: procs(3e-3, 0, 1, 0)}},
		},
		// One process: the processor-time table has it.
		workload.LocalCall64: {ZLink: {{Ops: 10, Processes: procs(1, 1, 1, 1)}}, ProtoActor: {{Ops: 10, Processes: procs(1, 1, 1, 1)}}},
	}
	order := []workload.Name{workload.LocalCall64, workload.ColdActivation, workload.RemoteCall1, workload.RemoteCall64}
	got := ProcessesTable(runs, order, workload.Defaults)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 4, got)
	require.Equal(t, "| "+Label(workload.ColdActivation, workload.Defaults(workload.ColdActivation))+
		" | 150 µs (50.0 µs + 100 µs) | 30.0 µs (30.0 µs + 0 ns) | 5.00 | 3.00 (0.500 + 2.50) | 0.010 (0.010 + 0.000) | — | — |", lines[2])
	require.Equal(t, "| "+Label(workload.RemoteCall64, workload.Defaults(workload.RemoteCall64))+
		" | 11.0 µs (7.00 µs + 4.00 µs) | 20.0 µs (10.0 µs + 10.0 µs) | 0.55 | 0.200 (0.110 + 0.090) | 0.600 (0.300 + 0.300) | 5.00 µs (3.00 µs + 2.00 µs) | 0.095 (0.050 + 0.045) |", lines[3])
	require.Empty(t, ProcessesTable(Runs{workload.LocalCall64: runs[workload.LocalCall64]}, order, workload.Defaults))
}
