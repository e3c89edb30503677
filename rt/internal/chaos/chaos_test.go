package chaos_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt/internal/chaos"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

var (
	full   = flag.Bool("chaos", false, "run every scenario at full length (make chaos); without it, short forms of two")
	report = flag.String("chaos.report", "", "write the results of a full run to this file (docs/RELIABILITY.md)")
	only   = flag.String("chaos.only", "", "run only the scenario of this name")
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		proctest.Cleanup()
		os.Exit(code) // the leak check's verdict: goleak leaves the exit to its cleanup
	}))
}

// ttl is every node's lease TTL in the suite.
const ttl = 2 * time.Second

// scenarios are the faults of the suite. short ones also run in make test, shortened.
func scenarios(short bool) []chaos.Scenario {
	long := func(full, brief time.Duration) time.Duration {
		if short {
			return brief
		}
		return full
	}
	all := []chaos.Scenario{
		{Name: "owner-sigkill", Fault: func(tb testing.TB, c *chaos.Cluster) {
			n := c.Nodes[0]
			n.Kill()
			time.Sleep(3 * ttl) // its objects are reclaimed and created again elsewhere
			n.Start()
		}},
		{Name: "owner-sigstop", Fault: func(tb testing.TB, c *chaos.Cluster) {
			n := c.Nodes[0]
			n.Pause()
			time.Sleep(long(4*ttl, 3*ttl)) // past its lease: its objects move on without it
			n.Resume()
		}},
		{Name: "etcd-member-restart", Fault: func(tb testing.TB, c *chaos.Cluster) {
			m := c.Etcd.Members[2]
			m.Kill()
			time.Sleep(3 * time.Second)
			m.Restart()
		}},
		{Name: "etcd-leader-kill", Fault: func(tb testing.TB, c *chaos.Cluster) {
			leader, err := c.Etcd.Leader(context.Background())
			require.NoError(tb, err)
			leader.Kill()
			time.Sleep(long(3*time.Second, 2*time.Second))
			leader.Restart()
		}},
		{Name: "etcd-move-leader", Fault: func(tb testing.TB, c *chaos.Cluster) {
			// Leadership moves every second and the history is compacted every half second,
			// while Spots are closed and created again all the time.
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			wg.Go(func() { churn(ctx, c, "etcd-move-leader") })
			wg.Go(func() {
				for ctx.Err() == nil {
					_ = c.Etcd.Compact(ctx)
					sleep(ctx, 500*time.Millisecond)
				}
			})
			for ctx.Err() == nil {
				if err := c.Etcd.MoveLeader(ctx); err != nil && ctx.Err() == nil {
					tb.Logf("move leader: %v", err)
				}
				sleep(ctx, time.Second)
			}
			wg.Wait()
		}},
		{Name: "etcd-cluster-down", After: 5 * time.Second, Fault: func(tb testing.TB, c *chaos.Cluster) {
			for _, m := range c.Etcd.Members {
				m.Kill()
			}
			time.Sleep(30 * time.Second)
			var wg sync.WaitGroup
			for _, m := range c.Etcd.Members {
				wg.Go(m.Restart) // a majority must start for any to serve
			}
			wg.Wait()
		}},
		{Name: "node-cut-from-etcd", Fault: func(tb testing.TB, c *chaos.Cluster) {
			n := c.Nodes[0]
			n.CutFromEtcd(chaos.Blackhole)
			time.Sleep(3 * ttl)
			n.CutFromEtcd(chaos.Pass)
		}},
		{Name: "node-node-partition", Fault: func(tb testing.TB, c *chaos.Cluster) {
			a, b := c.Nodes[0], c.Nodes[1]
			a.Peers[b.ID].Set(chaos.Cut, 0)
			b.Peers[a.ID].Set(chaos.Cut, 0)
			time.Sleep(5 * time.Second)
			c.HealAll()
		}},
		{Name: "node-link-latency", Fault: func(tb testing.TB, c *chaos.Cluster) {
			a, b := c.Nodes[0], c.Nodes[1]
			a.Peers[b.ID].Set(chaos.Delay, 200*time.Millisecond)
			b.Peers[a.ID].Set(chaos.Delay, 200*time.Millisecond)
			time.Sleep(5 * time.Second)
			c.HealAll()
		}},
		{Name: "peer-stops-reading", Fault: func(tb testing.TB, c *chaos.Cluster) {
			deaf := c.Nodes[2]
			before := rss(tb, c.Nodes[0], c.Nodes[1])
			for _, n := range c.Nodes[:2] {
				n.Peers[deaf.ID].Set(chaos.Deaf, 0)
			}
			time.Sleep(8 * time.Second)
			during := rss(tb, c.Nodes[0], c.Nodes[1])
			c.HealAll()
			tb.Logf("resident memory of the other nodes: %v MiB before, %v MiB after 8 s of a peer not reading", before, during)
			note("peer-stops-reading", fmt.Sprintf("resident memory of the two other nodes %v MiB before, %v MiB after 8 s of a peer that did not read", before, during))
		}},
		{Name: "rolling-restart", After: 5 * time.Second, Fault: func(tb testing.TB, c *chaos.Cluster) {
			for _, n := range c.Nodes {
				n.Stop() // graceful: its Spots close and release their locations
				n.Start()
				c.AwaitNodes(60 * time.Second)
			}
		}},
	}
	if !short {
		return all
	}
	var out []chaos.Scenario
	for _, sc := range all {
		if sc.Name == "owner-sigstop" || sc.Name == "etcd-leader-kill" {
			out = append(out, sc)
		}
	}
	return out
}

// notes collects scenarios' figures of their own, for the report.
var (
	notesMu sync.Mutex
	notes   = map[string][]string{}
)

func note(scenario, text string) {
	notesMu.Lock()
	defer notesMu.Unlock()
	notes[scenario] = append(notes[scenario], text)
}

// churn closes random registers of the scenario until ctx ends; the workload creates them
// again with its next call.
func churn(ctx context.Context, c *chaos.Cluster, scenario string) {
	for ctx.Err() == nil {
		id := fmt.Sprintf("%s-r%d", scenario, rand.IntN(12))
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = c.Driver.CloseSpot(cctx, sdk.InstanceTarget(rttest.RegisterType, id))
		cancel()
		sleep(ctx, 50*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// rss is the resident memory of nodes, in MiB each.
func rss(tb testing.TB, nodes ...*chaos.Node) []int {
	var out []int
	for _, n := range nodes {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", n.Pid()))
		if err != nil {
			tb.Logf("rss of %s: %v", n.ID, err)
			out = append(out, -1)
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
				out = append(out, kb/1024)
			}
		}
		_ = f.Close()
	}
	return out
}

// TestChaos runs the fault scenarios, each on a fresh system, and checks what the runtime
// promises: no message run twice, none lost, no turn on a stale owner, every call ending by its
// deadline, every object callable again, no leaked record, and linearizable histories. With
// -chaos it runs every scenario at full length and, with -chaos.report, writes the results.
func TestChaos(t *testing.T) {
	start := time.Now()
	var results []chaos.Result
	for _, sc := range scenarios(!*full) {
		if *only != "" && sc.Name != *only {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			c := chaos.Start(t, chaos.Options{LeaseTTL: ttl})
			r := chaos.Run(t, c, sc, filepath.Join(outDir(t), "linearizability"))
			notesMu.Lock()
			r.Notes = append(r.Notes, notes[sc.Name]...)
			notesMu.Unlock()
			results = append(results, r)
			t.Logf("%s: %d ops (%d ok, %d refused, %d unknown), slowest %v, recovery %v, %d objects / %d ops checked for linearizability",
				sc.Name, r.Ops, r.OK, r.Refused, r.Unknown, r.Slowest, r.Recovery, r.Objects, r.LinOps)
			for _, f := range r.Failures {
				t.Error(f)
			}
			assert.False(t, r.Failed(), "%+v", r)
		})
	}
	if *full && *report != "" && !t.Failed() {
		f, err := os.Create(*report)
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, chaos.Report(f, results, time.Since(start), proctest.RaceEnabled))
	}
}

// The checks find a broken runtime: with the lease check of every turn compiled out, an owner
// paused past its lease runs work after its Spots moved on, and the journals and histories
// show it.
func TestChaosCatchesAnUnfencedRuntime(t *testing.T) {
	if !*full {
		t.Skip("runs with make chaos")
	}
	var pause chaos.Scenario
	for _, sc := range scenarios(false) {
		if sc.Name == "owner-sigstop" {
			pause = sc
		}
	}
	pause.Name = "owner-sigstop-unfenced"
	c := chaos.Start(t, chaos.Options{LeaseTTL: ttl, Tags: []string{"zlink_unfenced"}})
	dir := filepath.Join(outDir(t), "linearizability")
	r := chaos.Run(t, c, pause, dir)
	t.Logf("unfenced runtime: %d split-brain turns, %d objects not linearizable; %v", r.SplitBrain, r.NotLinearizable, r.Failures)
	assert.Positive(t, r.SplitBrain, "the journals show turns the stale owner started after the new one")
	assert.Positive(t, r.NotLinearizable, "the stale owner's answers make histories that are not linearizable")
	pages, err := filepath.Glob(filepath.Join(dir, "*.html"))
	require.NoError(t, err)
	assert.Len(t, pages, r.NotLinearizable, "a visualization for each")
}

// outDir is where a run keeps what it writes for people to look at: the test's artifact
// directory, kept under -outputdir when go test runs with -artifacts (make chaos does).
func outDir(t *testing.T) string { return t.ArtifactDir() }
