package harness

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

// Report is what a full run produced, ready to print and to write down.
type Report struct {
	When     time.Time
	Machine  Machine
	Rounds   int
	Wall     time.Duration
	Order    []workload.Name
	Params   func(workload.Name) workload.Params
	Runs     Runs
	Versions string
	// Stalls is the probe of the machine's stalls made before the runs, if one was.
	Stalls *Stalls
	// Steal is the share of the processors' time that the hypervisor gave to others over the
	// whole run, if known.
	Steal *float64
}

// Table is the report's one table.
func (r Report) Table() string { return Table(Rows(r.Runs, r.Order, r.Params)) }

// notes explain what the table compares; RESULTS.md carries them under the table.
const notes = `Each figure is the median of %d runs per framework, alternating ZLink and Proto.Actor
within each round (A B A B ...). Every run is a child process of its own that runs one
framework only; ZLink runs get a fresh etcd process (rt/devetcd, fsync on), and so do the
Proto.Actor runs of row f, whose cluster keeps its membership there; the other Proto.Actor
runs start no etcd. The ratio is always ZLink ÷ Proto.Actor: above 1 is better for ZLink on
throughput rows (better: higher) and worse for ZLink on latency and memory rows (better:
lower).

The processor-time table gives, for the workloads whose measured window does no work in
another process, the processor time (user and system, from getrusage) that the whole process
used in the window divided by the operations completed: the callers' loops, the framework's
goroutines, the scheduler's spinning and wake-ups and the garbage collector alike (and, in
row b, ZLink's push-back retries). Throughput also depends on how busy the scheduler keeps
the processors: a run whose processors sat idle while goroutines waited to be woken shows
less throughput for the same time per operation. Below 1, ZLink spends less processor time
per operation. A profiled run (-profile) keeps no ZLink figure: the profiler's time is in it.

The table of every process's time covers the workloads whose window does work in other
processes: the server process of rows e and f and the etcd process of ZLink's runs and of
Proto.Actor's in row f. Each cell is the total over the run's processes, then the run's own
process's part (the callers, and the client node or Proto.Actor client) and the other
processes' part, taken from one run, the one whose total is the median. Processor time is
user and system time (getrusage for the run's own process, /proc/<pid>/stat for the others,
to 10 ms in windows of seconds). The system calls are those of the read and write families
(/proc/<pid>/io: syscr and syscw), which on a socket are its reads and writes; polls and
wake-ups (epoll_wait, futex) are not among them. The floor's figures are of its own window in
the same ZLink run, with the same server process and etcd. Below 1, ZLink's processes spend
less processor time per operation than Proto.Actor's.

- a. ZLink: an active Instance Spot on one node, called through the generated plain reference
  (EchoOf(...).Ping). Proto.Actor: one actor, RootContext.RequestFuture(pid, msg, timeout).Result(),
  with a bounded mailbox as Proto.Actor's own benchmarks configure it (faster here than the
  default mailbox with 64 callers). Both allocate a request and a reply per call, and every
  call of both is timed, so both pay the same two clock reads.
  The floor under the table is a probe in the same ZLink run, always right after ZLink's
  window: the same callers for the same time, each sending its request through a channel to
  one goroutine that answers on the caller's own channel, timed the same way, with no runtime
  at all. It meets the stalls of the machine's processors of the same minute, not the same
  stalls; a maximum is one sample and may come out above ZLink's.
- b. ZLink: Send of the //zlink:send method Tick; a full queue (sdk.ErrQueueFull) pushes back and
  the caller retries ("Every run" gives the push-backs per message). Proto.Actor:
  RootContext.Send to 64 actors with the default unbounded mailbox (faster here than a bounded
  one; it never pushes back). Both count a message when its handler ran, and the run ends when
  all have. The floor under the table is a probe in the same ZLink run, right after it: the
  same callers send the same messages, allocated alike, round robin through buffered Go
  channels of 1,024 to 64 goroutines that count them (a full channel blocks its sender), with
  no runtime, permit, byte accounting, lease check or telemetry.
- c. (*) Not the same work: a ZLink activation includes a linearizable etcd write (the Spot's
  location record: reserve, then Ready, group-committed, fsync on, etcd in its own process on
  the same cores), which makes the single activation survive failures and other nodes. A
  Proto.Actor activation is an in-memory spawn by the disthash placement actor of a one-member
  cluster on the in-memory test provider, and writes nothing durable.
  The etcd ceiling under the table is a probe in the same ZLink run, on the same etcd: the
  same two writes per activation (nested transactions with their own compares, on a lease)
  for a quarter as many keys, 64 activations in flight, sent with ideal batching (each batch of
  activations one transaction of reserves, then one of readies; the best of 1, 2 and 4
  pipelines of batches) and no runtime at all.
- d. ZLink: 10,000 Instance Spots activated by intent calls, then plain-reference calls spread
  over all of them. Proto.Actor: 10,000 grains activated by cluster.Request, then
  cluster.Request spread over all of them (PID cache hits). The same with 64 and with 1,024
  callers; with 1,024 on 2 cores nearly every caller waits for a core at any moment, so its
  latency rows show Go's scheduler as much as either framework.
- e. Two processes on 127.0.0.1 over gRPC. ZLink: a client-only node calls an Echo Spot hosted
  by the server process (cmd/zlserver), etcd in a third process; calls carry the caller's
  deadline. Proto.Actor: remote, RequestFuture to a named actor (bounded mailbox, as in
  Proto.Actor's remote benchmark) of the server process (cmd/paserver). Its cluster on the etcd
  provider is not measured: once a grain's PID is cached, a grain request takes the same remote
  send, plus the cluster context's own cost, which row d shows in-process.
  The floor under the table is a probe in the same ZLink run, after ZLink's window: the same
  callers for the same time, to the same server process over one bare gRPC bidi stream, with
  the design that measured fastest here (a sender that yields once when woken, then sends
  every queued request in one message; an echo that answers each message at once, on the
  goroutine that read it), and no runtime, routing, queue bound or deadline. Its rate is the
  most that the same calls reach on this machine and gRPC; the ratio is the median of the two
  rates' ratio in each run. A second probe makes the same calls with the same design and the
  same client over one bare TCP connection (internal/tcpfloor: each message a frame of its
  length and its bytes, written with one system call, read by the goroutine that uses it).
  The two probes take turns to come first, round by round: in even rounds the gRPC floor is a
  window further from ZLink's. The TCP probe has no HTTP/2 framing, no flow control and none
  of gRPC's own writer and reader goroutines: what it reaches above the gRPC floor, and the
  processor time it saves per call, is what gRPC's own work costs these calls.
- f. (*) Two processes on 127.0.0.1 over gRPC, etcd in a third; the first request to each of
  the fresh IDs, one per ID, after one unmeasured activation that opens the connection. Not the
  same work, as in row c. ZLink: the client-only node sends the intent call to the node that
  placement picks, the server process (cmd/zlserver), which creates the Instance Spot with its
  linearizable etcd location record (reserve, then Ready, fsync on), runs the call and
  answers: one remote request per activation. Proto.Actor: a
  cluster client (StartClient) and a member that hosts the echo kind (cmd/paserver -etcd), on
  the etcd cluster provider, which uses etcd for membership only, with the disthash identity
  lookup: cluster.Request asks the member's placement actor for the grain (a remote request
  that spawns it in memory) and then sends the request to its PID (a second remote request).
- g. ZLink: one Token Actor, spawned into the node's Board Entry Spot by the Board's handler
  (SpawnToken), called through the generated Actor reference (TokenOf(...).Ping); the call finds
  it in the node's Actor index and runs it on its Spot's serial queue. Proto.Actor has no Actor
  inside a grain; the closest is what row a measures, one plain actor with the bounded mailbox
  called with RootContext.RequestFuture, and this row runs exactly that again.
- h. A stateless server reached through a router, in the caller's process. ZLink: the Service
  ClientServer channel with one Ready server, this node's own; ServiceClient(...).Ping picks
  the server by weight and runs its handler on the caller's goroutine, concurrently with the
  other callers' calls. Proto.Actor: RequestFuture to a round-robin pool router
  (router.NewRoundRobinPool) of 64 echo actors with the bounded mailbox, one per caller, so
  that no request waits behind another at a routee (2 and 8 routees measured the same within
  the noise); the router's process puts each request straight into the next routee's mailbox.
  The floor under the table is a probe in the same ZLink run, right after ZLink's window: the
  same callers for the same time call the server's handler directly, with no runtime. Its
  callers never yield either, and its max is of the same size as ZLink's (the latency rows
  below say why).
- i. The heap that each idle active object holds, everything the process keeps for it, the
  application's object included (the same two fields on both sides): live heap (HeapAlloc)
  and heap spans in use (HeapInuse), each read after two collections before the first
  activation and after the last, the growth divided by the objects. ZLink: Instance Spots
  activated by intent calls on one node (etcd in its own process). Proto.Actor: grains
  activated by cluster.Request on a one-member cluster (in-memory test provider): the actor,
  its mailbox and context, its registry entry, the placement actor's entry and the PID cache's.
  64 callers activate; no caller keeps an ID or a reference. Neither framework keeps a
  goroutine for an idle object.
- j. The whole process with the objects active, activated as in row i and then requested once
  more each through the plain path (ZLink: EchoOf(...).Ping; Proto.Actor: cluster.Request, PID
  cache hits): heap in use after a collection (HeapInuse), resident after
  debug.FreeOSMemory (VmRSS), and the most the process held resident over the run (VmHWM),
  activation included. The ZLink process holds the node only: etcd, which keeps the objects'
  location records, is in a process of its own and not counted; Proto.Actor's cluster keeps
  nothing outside its process.
- Latency rows are per call, from the call to its return on the caller's goroutine, over every call of the
  measured window. The longest calls are the machine's stalls (above): times in which the
  kernel or the hypervisor ran something else on a processor that the process was using. In
  rows a and g, 64 callers wait on one object, which serves one call at a time: a stall of the
  thread that runs its turn holds all 64 calls at once, so p99.9 stays under the length of a
  stall only while the stalls met in the window, times 64, are fewer than a thousandth of its
  calls, and the max is the longest stall that met a turn (or two that met one call). The
  floor's callers meet stalls of the same kind with more calls in the window.
  In rows d and h the longest calls are not stalls but Go's scheduler. A ZLink call there
  finds its object idle, or its channel's server free, and runs on the caller's goroutine, so
  a caller never waits and never gives up its processor; Go takes the processor from it only
  when its time slice of 10 ms ends. A call caught then waits until the other runnable
  callers (63 of them, with 64 callers on 2 processors) have had their slices: some hundreds
  of milliseconds, which is the max of those rows. Proto.Actor's max in those rows is of the
  same size. When each caller yields its processor once in 16 calls, between two timed calls,
  the max of rows d and h falls to a few milliseconds for both frameworks, with p99
  unchanged; the table keeps callers that never yield.
`

// Markdown renders RESULTS.md.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks against Proto.Actor Go\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (bench/peers, `go run ./cmd/peerbench`). Do not edit by hand.\n\n")
	fmt.Fprintf(&b, "- Date: %s\n", r.When.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- Machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "- Versions: %s\n", r.Versions)
	if r.Stalls != nil {
		fmt.Fprintf(&b, "- Stalls: %s, before the runs\n", r.Stalls)
	}
	if r.Steal != nil {
		fmt.Fprintf(&b, "- Steal: the hypervisor gave %.2f%% of this machine's processor time to others over the whole run (/proc/stat)\n", 100**r.Steal)
	}
	fmt.Fprintf(&b, "- Wall time of the whole run: %s\n\n", r.Wall.Round(time.Second))
	b.WriteString(r.Table())
	b.WriteString("\n")
	if t := CeilingTable(r.Runs, r.Order, r.Params); t != "" {
		b.WriteString("ZLink against what etcd allows for the same writes, measured in the same runs:\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}
	if t := FloorTable(r.Runs, r.Order, r.Params); t != "" {
		b.WriteString("ZLink against what the same calls reach with no runtime, measured in the same runs:\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}
	if t := TCPFloorTable(r.Runs, r.Order, r.Params); t != "" {
		b.WriteString("The remote rows' floor over gRPC against the same calls over one bare TCP connection, with the same design, measured in the same runs: what gRPC's own work costs them. Processor time is per call, of every process of the run (the run's own process + the others: the server, etcd):\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}
	if t := CPUTable(r.Runs, r.Order, r.Params); t != "" {
		b.WriteString("Processor time per operation, the whole process's (callers included), for the workloads whose window does no work in another process:\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}
	if t := ProcessesTable(r.Runs, r.Order, r.Params); t != "" {
		b.WriteString("Processor time and read/write system calls per operation of every process of the run, for the workloads whose window does work in other processes, each as total (the run's own process + the others):\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, notes, r.Rounds)
	b.WriteString("\n## Every run\n\nThroughput of each run, in round order; for the memory rows, the first memory metric.\n\n")
	b.WriteString("| Workload | ZLink | Proto.Actor |\n| --- | --- | --- |\n")
	for _, wl := range r.Order {
		byFw, ok := r.Runs[wl]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", wl, figures(wl, byFw[ZLink]), figures(wl, byFw[ProtoActor]))
	}
	return b.String()
}

// figures lists the runs of workload wl in one cell.
func figures(wl workload.Name, rs []workload.Result) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = figure(wl, r)
	}
	return strings.Join(s, ", ")
}

// figure is the one figure of a run that the progress log and "Every run" give: its
// throughput, or a memory workload's first memory metric.
func figure(wl workload.Name, r workload.Result) string {
	switch {
	case wl == workload.IdleFootprint && r.Memory != nil:
		return fmtBytes(r.Memory.LivePerObject) + "/object"
	case wl == workload.Memory100k && r.Memory != nil:
		return fmtBytes(r.Memory.HeapInuse) + " heap in use"
	}
	s := fmtRate(r.Rate())
	if r.Pushbacks > 0 {
		s += fmt.Sprintf(" (%.2f push-backs/msg)", float64(r.Pushbacks)/float64(r.Ops))
	}
	return s
}

// Write writes RESULTS.md to path.
func (r Report) Write(path string) error {
	return os.WriteFile(path, []byte(r.Markdown()), 0o644)
}
