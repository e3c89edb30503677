package rt_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// relocNode is a node process of a relocation test: the messages its objects run go to the
// cluster's runs, its other lines to events.
type relocNode struct {
	p      *proctest.Process
	id     sdk.NodeID
	events chan string
}

func startRelocNode(t *testing.T, c *cluster, id string, version int64) *relocNode {
	t.Helper()
	return startNodeProcess(t, c, id, "-version", strconv.FormatInt(version, 10))
}

// startNodeProcess starts a node process of c with extra flags: the messages its objects run
// go to the cluster's runs, its other lines to events. It stops when the test ends.
func startNodeProcess(t *testing.T, c *cluster, id string, flags ...string) *relocNode {
	t.Helper()
	bin := proctest.Build(t, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	args := append([]string{"-etcd", strings.Join(c.endpoints, ","), "-node", id, "-lease-ttl", "2s"}, flags...)
	p := proctest.Start(t, bin, nil, args...)
	_, err := p.Expect("ready ", 60*time.Second)
	require.NoError(t, err)
	n := &relocNode{p: p, id: sdk.NodeID(id), events: make(chan string, 1024)}
	var done sync.WaitGroup
	done.Go(func() {
		for line := range p.Lines() {
			if rest, ok := strings.CutPrefix(line, "ran "); ok {
				spot, msg, _ := strings.Cut(rest, " ")
				c.runs.Add(spot, msg)
				continue
			}
			select {
			case n.events <- line:
			default:
			}
		}
	})
	t.Cleanup(func() {
		p.Stop()
		done.Wait()
	})
	return n
}

// expect waits for an event line with prefix and returns the rest of it.
func (n *relocNode) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line := <-n.events:
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
		case <-deadline:
			t.Fatalf("node %s printed no %q line within %v", n.id, prefix, within)
		}
	}
}

// relocObject is one object of the relocation tests and what its callers saw.
type relocObject struct {
	t      sdk.Target
	ok     atomic.Int64 // calls that returned their reply
	failed atomic.Int64
}

func (o *relocObject) id() string { return o.t.ID() }

// TestF2_RelocationAcrossProcessesUnderLoad: node A, a process, holds 200 Instance Spots, 100
// User Spots and 50 Actors of its Entry Spot, each counting its messages; 16 callers keep calling
// them with numbered messages while A relocates (PlannedMaintenance) and then gets SIGTERM.
// Every call ends with its reply, no message runs twice, every counter equals its successful
// calls (its state arrived), nothing is left on A, and A reported SafeToShutdown before it
// stopped.
func TestF2_RelocationAcrossProcessesUnderLoad(t *testing.T) {
	relocateAcrossProcesses(t, "relocate planned", [3]int64{1, 1, 1}, "")
}

// TestF5_RollingUpdateAcrossProcessesLandsOnTheExactVersion: the same with A at version 1, B at
// version 2 and C at version 3, and A relocating with RollingUpdate to version 2: everything
// lands on B.
func TestF5_RollingUpdateAcrossProcessesLandsOnTheExactVersion(t *testing.T) {
	relocateAcrossProcesses(t, "relocate rolling 2", [3]int64{1, 2, 3}, "proc-b")
}

func relocateAcrossProcesses(t *testing.T, command string, versions [3]int64, onlyOn sdk.NodeID) {
	if testing.Short() {
		t.Skip("three node processes")
	}
	c := newCluster(t, 1, func(_ int, cfg *rt.Config) { cfg.Roles = rt.RoleObjectClient })
	client := c.hosts[0]
	a := startRelocNode(t, c, "proc-a", versions[0])
	b := startRelocNode(t, c, "proc-b", versions[1])
	cn := startRelocNode(t, c, "proc-c", versions[2])
	waitPeers(t, client, a.id, b.id, cn.id)

	var objects []*relocObject
	onA := sdk.OnNode(a.id)
	for i := range 200 {
		o := &relocObject{t: sdk.InstanceTarget(rttest.LedgerType, fmt.Sprint("i", i)).WithDesc(&rttest.LedgerDesc)}
		_, err := record(client, sdk.InstanceIntent(rttest.LedgerType, o.id()).WithDesc(&rttest.LedgerDesc), o.id()+"-0", onA)
		require.NoError(t, err)
		o.ok.Store(1)
		objects = append(objects, o)
	}
	for i := range 100 {
		o := &relocObject{t: sdk.UserTarget(rttest.UserLedgerType, fmt.Sprint("u", i)).WithDesc(&rttest.UserLedgerDesc)}
		require.NoError(t, client.Create(ctx, o.t, onA))
		objects = append(objects, o)
	}
	beacon := sdk.EntryTarget(rttest.BeaconType, a.id).WithDesc(&rttest.BeaconDesc)
	for i := range 50 {
		o := &relocObject{t: sdk.ActorTarget(rttest.MarkType, fmt.Sprint("k", i)).WithDesc(&rttest.MarkDesc)}
		out, err := client.Call(ctx, beacon, "Spawn", wrapperspb.String(o.id()))
		require.NoError(t, err)
		require.Equal(t, "ok", out.(*wrapperspb.StringValue).GetValue())
		objects = append(objects, o)
	}

	stop := make(chan struct{})
	var callers sync.WaitGroup
	var errMu sync.Mutex
	var errs []string
	for w := range 16 {
		callers.Go(func() {
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				o := objects[(n*16+w)%len(objects)]
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := client.Call(cctx, o.t, rttest.LedgerRecord, wrapperspb.String(fmt.Sprintf("%s-w%d-%d", o.id(), w, n)))
				cancel()
				if err == nil {
					o.ok.Add(1)
					continue
				}
				o.failed.Add(1)
				errMu.Lock()
				if len(errs) < 10 {
					errs = append(errs, err.Error())
				}
				errMu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	_, err := io.WriteString(a.p.Stdin(), command+"\n")
	require.NoError(t, err)
	assert.Equal(t, "Relocated/None", a.expect(t, "relocated ", 2*time.Minute))
	a.expect(t, "safe", 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	callers.Wait()
	require.NoError(t, a.p.Signal(syscall.SIGTERM))
	assert.Equal(t, "Stopped/None", a.expect(t, "stopped ", 30*time.Second))

	assert.Empty(t, errs, "every call ended with its reply")
	assert.Empty(t, c.runs.Twice(), "no message ran twice")
	for _, o := range objects {
		require.Zero(t, o.failed.Load(), o.id())
		n, err := client.Call(ctx, o.t, rttest.LedgerCount, wrapperspb.Int64(0))
		require.NoError(t, err, o.id())
		assert.Equal(t, o.ok.Load(), n.(*wrapperspb.Int64Value).GetValue(), "%s: its count arrived and counts every successful call", o.id())
		where, err := client.Call(ctx, o.t, rttest.LedgerWhere, wrapperspb.String(""))
		require.NoError(t, err, o.id())
		node := sdk.NodeID(where.(*wrapperspb.StringValue).GetValue())
		assert.NotEqual(t, a.id, node, o.id())
		if onlyOn != "" {
			assert.Equal(t, onlyOn, node, "%s lands on the node of the requested version", o.id())
		}
	}
}

// TestF7_ATargetThatStopsAnsweringRollsBack: the only target, a process, stops answering (it is
// paused) while the source relocates: each unit fails before its commit and rolls back, the
// relocation ends Blocked at its deadline, the source serves again, and the calls that waited
// for the units ran once, on the source.
func TestF7_ATargetThatStopsAnsweringRollsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("a node process")
	}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.OperationTimeout = time.Second
		if i == 1 {
			cfg.Roles = rt.RoleObjectClient
		}
	})
	a, caller := c.hosts[0], c.hosts[1]
	b := startRelocNode(t, c, "proc-b", 0)
	waitPeers(t, a, b.id)
	const spots = 20
	var ok [spots]atomic.Int64
	for i := range spots {
		_, err := record(caller, openLedger(fmt.Sprint("r", i)), fmt.Sprintf("r%d-first", i), sdk.OnNode(a.LocalNode()))
		require.NoError(t, err)
		ok[i].Store(1)
	}
	b.p.Pause()
	stop := make(chan struct{})
	var callers sync.WaitGroup
	var failed atomic.Int64
	for w := range 4 {
		callers.Go(func() {
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (n*4 + w) % spots
				_, err := record(caller, ledger(fmt.Sprint("r", i)), fmt.Sprintf("r%d-w%d-%d", i, w, n))
				if err != nil {
					failed.Add(1)
					t.Log(err)
					continue
				}
				ok[i].Add(1)
			}
		})
	}
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 4 * time.Second})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	callers.Wait()
	b.p.Kill()
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome)
	assert.Contains(t, []sdk.RelocationReason{sdk.RelocationReasonDeadlineExceeded, sdk.RelocationReasonTargetUnavailable}, res.Reason,
		"%v: the target never answered", res.Reason)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "Serving again (F7)")
	assert.Zero(t, failed.Load(), "every call ended with its reply")
	assert.Empty(t, c.runs.Twice(), "no message ran twice")
	for i := range spots {
		assert.Equal(t, ok[i].Load(), count(t, caller, fmt.Sprint("r", i)), "r%d serves on the source with every message", i)
	}
}

// F3 StoreUnavailable: etcd stops answering (its process is paused) while a node relocates: no
// unit can commit, the relocation ends Blocked with StoreUnavailable at its deadline, and once
// etcd answers again the Spot serves where it was.
func TestF3_AStoreThatDoesNotAnswerIsStoreUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("an etcd process")
	}
	etcd, eps := proctest.EtcdProcess(t)
	c := &cluster{endpoints: eps, runs: &rttest.Runs{}, built: map[string]int{}, builtOn: make([]atomic.Int64, 2)}
	for i := range 2 {
		c.hosts = append(c.hosts, c.start(t, i, func(_ int, cfg *rt.Config) {
			cfg.OperationTimeout = time.Second
			cfg.LeaseTTL = 20 * time.Second
		}))
	}
	a, b := c.hosts[0], c.hosts[1]
	waitPeers(t, a, b.LocalNode())
	_, err := record(b, openLedger("kept"), "kept-1", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	// a must know b as the target before etcd stops: its view of the mesh comes from etcd,
	// and one without a Serving target would block the relocation for want of one.
	require.Eventually(t, func() bool {
		target, ok := a.RelocationTarget(openLedger("kept"))
		return ok && target == b.LocalNode()
	}, 30*time.Second, 20*time.Millisecond)
	etcd.Pause()
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 3 * time.Second})
	etcd.Resume()
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome)
	assert.Equal(t, sdk.RelocationReasonStoreUnavailable, res.Reason)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State)
	assert.Equal(t, int64(1), count(t, b, "kept"), "it serves where it was, its state intact")
}
