package chaos

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// Report writes the results as docs/RELIABILITY.md: the table a user compares with other
// systems, with the machine and the date of the run.
func Report(w io.Writer, results []Result, took time.Duration, race bool) error {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, `# Reliability under faults

Written by `+"`make chaos`"+` on %s; do not edit by hand. Machine: %s/%s, %d CPUs (%s), %s; node
processes built %s. The whole run took %v.

Each scenario starts a fresh system: a 3-member etcd cluster and 3 ZLink nodes, each in a process
of its own on loopback, with a TCP proxy on every node-to-etcd and node-to-node link, and 8
callers in the test process driving 12 Instance registers and 6 User accounts (Put, Get, Add,
CompareAndSet; every write goes through to etcd, fenced on the activation's Fence). A third of
the calls go through a Relay Entry Spot on a node, so that calls also start inside the mesh;
now and then a caller sends a burst of 20 one-way Touch messages that queue behind each other.
Six callers wait 2 s for each call, two wait 20 s. Every operation is numbered; every turn a
register starts is written to a journal file of its node, outside the runtime, with the instant
the runtime's lease check let it start and the handler's own clock reading. After the fault
is healed and the load stopped, the checks read the journals, the store and the callers' record:

- **dup**: operations that ran more than once; **lost**: calls that answered success and never
  ran (a one-way message admitted to an owner that then lost its lease is dropped, so one-way
  messages are not counted); **split**: turns an activation started (its lease check passed)
  after a later activation of the same object had started one, and turns whose journal line
  shows no start of their own (none, one after the handler ran, or one not after the previous
  turn of the activation ran); **late**: calls that ended more than 1 s after their deadline;
  **leaks**: records left Creating, Releasing or on an ended owner after recovery, and objects
  that did not answer again within the recovery bound. All must be 0.
- **slowest**: the longest any call took to end with a reply or a typed error.
- **recovery**: from the heal until every object answered again (bound: %v).
- **linearizable**: each object's history, checked with porcupine (operations of unknown
  outcome may have taken effect at any point after their call, or never); objects/operations
  checked.

| scenario | ops | ok | refused | unknown | dup | lost | split | late | leaks | slowest | recovery | linearizable (objects / ops) |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
`, time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), host,
		runtime.Version(), map[bool]string{true: "with -race", false: "without -race"}[race], took.Round(time.Second), RecoveryBound)
	for _, r := range results {
		lin := "yes"
		if r.NotLinearizable > 0 {
			lin = fmt.Sprintf("**no: %d objects**", r.NotLinearizable)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %v | %v | %s (%d / %d) |\n",
			r.Scenario, r.Ops, r.OK, r.Refused, r.Unknown, r.Duplicates, r.Lost, r.SplitBrain, r.Late,
			r.Leaks+r.Unrecovered, r.Slowest.Round(time.Millisecond), r.Recovery.Round(100*time.Millisecond), lin, r.Objects, r.LinOps)
	}
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "\n- %s: %s", r.Scenario, n)
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
