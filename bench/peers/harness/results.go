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
}

// Table is the report's one table.
func (r Report) Table() string { return Table(Rows(r.Runs, r.Order, r.Params)) }

// notes explain what the table compares; RESULTS.md carries them under the table.
const notes = `Each figure is the median of %d runs per framework, alternating ZLink and Proto.Actor
within each round (A B A B ...). Every run is a child process of its own that runs one
framework only; ZLink runs get a fresh etcd process (rt/devetcd, fsync on) and Proto.Actor runs
start no etcd. The ratio is always ZLink ÷ Proto.Actor: above 1 is better for ZLink on
throughput rows (better: higher) and worse for ZLink on latency rows (better: lower).

- a. ZLink: an active Instance Spot on one node, called through the generated plain reference
  (EchoOf(...).Ping). Proto.Actor: one actor, RootContext.RequestFuture(pid, msg, timeout).Result(),
  with a bounded mailbox as Proto.Actor's own benchmarks configure it (faster here than the
  default mailbox with 64 callers). Both allocate a request and a reply per call, and every
  call of both is timed, so both pay the same two clock reads.
- b. ZLink: Send of the //zlink:send method Tick; a full queue (sdk.ErrQueueFull) pushes back and
  the caller retries ("Every run" gives the push-backs per message). Proto.Actor:
  RootContext.Send to 64 actors with the default unbounded mailbox (faster here than a bounded
  one; it never pushes back). Both count a message when its handler ran, and the run ends when
  all have.
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
  cluster.Request spread over all of them (PID cache hits).
- e. Two processes on 127.0.0.1 over gRPC. ZLink: a client-only node calls an Echo Spot hosted
  by the server process (cmd/zlserver), etcd in a third process; calls carry the caller's
  deadline. Proto.Actor: remote, RequestFuture to a named actor (bounded mailbox, as in
  Proto.Actor's remote benchmark) of the server process (cmd/paserver). Its cluster on the etcd
  provider is not measured: once a grain's PID is cached, a grain request takes the same remote
  send, plus the cluster context's own cost, which row d shows in-process.
- Latency rows are per call, from the call to its return on the caller's goroutine, over every call of the
  measured window. With 64 callers on 2 cores, the max is a single call in millions and shows
  Go scheduling as much as either framework; p99.9 and mean say more.
`

// Markdown renders RESULTS.md.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks against Proto.Actor Go\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (bench/peers, `go run ./cmd/peerbench`). Do not edit by hand.\n\n")
	fmt.Fprintf(&b, "- Date: %s\n", r.When.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- Machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "- Versions: %s\n", r.Versions)
	fmt.Fprintf(&b, "- Wall time of the whole run: %s\n\n", r.Wall.Round(time.Second))
	b.WriteString(r.Table())
	b.WriteString("\n")
	if t := CeilingTable(r.Runs, r.Order, r.Params); t != "" {
		b.WriteString("ZLink against what etcd allows for the same writes, measured in the same runs:\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, notes, r.Rounds)
	b.WriteString("\n## Every run\n\nThroughput of each run, in round order.\n\n")
	b.WriteString("| Workload | ZLink | Proto.Actor |\n| --- | --- | --- |\n")
	for _, wl := range r.Order {
		byFw, ok := r.Runs[wl]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", wl, rates(byFw[ZLink]), rates(byFw[ProtoActor]))
	}
	return b.String()
}

func rates(rs []workload.Result) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmtRate(r.Rate())
		if r.Pushbacks > 0 {
			s[i] += fmt.Sprintf(" (%.2f push-backs/msg)", float64(r.Pushbacks)/float64(r.Ops))
		}
	}
	return strings.Join(s, ", ")
}

// Write writes RESULTS.md to path.
func (r Report) Write(path string) error {
	return os.WriteFile(path, []byte(r.Markdown()), 0o644)
}
