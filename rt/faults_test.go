package rt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/chaos"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// tricky is an Instance Spot whose methods misbehave on request: they fail with errors that
// look like the runtime's own, close their own Spot, or block.
type tricky struct {
	sc   sdk.SpotContext
	runs *sync.Map // message -> *atomic.Int64
	gate chan struct{}
}

const trickyType = "test.Tricky"

func (s *tricky) ran(msg string) {
	n, _ := s.runs.LoadOrStore(msg, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

var trickyDesc = &sdk.SpotDesc{Name: trickyType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
	{
		// CapFull fails as if a nested creation had met a node's activation cap.
		Name:       "CapFull",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			impl.(*tricky).ran(req.(*wrapperspb.StringValue).GetValue())
			return nil, fmt.Errorf("nested create: %w", &sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: 1})
		},
	},
	{
		// Quit closes the Spot itself, from its own one-way turn.
		Name:       "Quit",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, _ proto.Message) (proto.Message, error) {
			s := impl.(*tricky)
			return nil, s.sc.Client().CloseSpot(ctx, sdk.InstanceTarget(trickyType, s.sc.ID()))
		},
	},
	{
		// Hold blocks its turn until the test opens the gate, whatever its context says.
		Name:       "Hold",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			<-impl.(*tricky).gate
			return nil, nil
		},
	},
}}

// trickyNodes is a cluster whose hosts also host the tricky type.
type trickyNodes struct {
	*cluster
	runs sync.Map
	gate chan struct{}
}

func (s *tricky) OnClose(_ context.Context, r sdk.CloseReason) {}

func newTrickyNodes(t *testing.T, n int, mutate func(i int, cfg *rt.Config)) *trickyNodes {
	tn := &trickyNodes{gate: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-tn.gate:
		default:
			close(tn.gate)
		}
	})
	tn.cluster = newCluster(t, n, func(i int, cfg *rt.Config) {
		ledger := cfg.Register
		cfg.Register = func(r sdk.Registrar) error {
			if err := ledger(r); err != nil {
				return err
			}
			return r.RegisterSpot(trickyDesc, func(sc sdk.SpotContext) (any, error) {
				return &tricky{sc: sc, runs: &tn.runs, gate: tn.gate}, nil
			})
		}
		if mutate != nil {
			mutate(i, cfg)
		}
	})
	return tn
}

func (tn *trickyNodes) runsOf(msg string) int64 {
	if n, ok := tn.runs.Load(msg); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// C3: a handler's error never makes the runtime send its message again: a handler that fails
// with what looks like an activation-cap refusal ran once, on whichever node placement chose,
// and its caller gets an application error.
func TestC3_HandlerErrorIsNeverRetried(t *testing.T) {
	tn := newTrickyNodes(t, 3, nil)
	for i := range 30 {
		msg := fmt.Sprint("cap-", i)
		for _, h := range tn.hosts {
			_, err := h.Call(ctx, sdk.InstanceIntent(trickyType, fmt.Sprint("c3-", i)).WithDesc(trickyDesc), "CapFull", wrapperspb.String(msg+"-"+string(h.LocalNode())))
			assert.Equal(t, int64(1), tn.runsOf(msg+"-"+string(h.LocalNode())), "ran once")
			var ae *sdk.AppError
			assert.ErrorAs(t, err, &ae, "a handler's error is an application error")
			assert.NotErrorIs(t, err, sdk.ErrCapacityExceeded)
		}
	}
}

// F8: a Spot that closes itself from its own one-way handler closes after that turn, and the
// host's Close is not held up by it.
func TestF8_SelfCloseDoesNotHang(t *testing.T) {
	tn := newTrickyNodes(t, 1, nil)
	h := tn.hosts[0]
	target := sdk.InstanceIntent(trickyType, "self").WithDesc(trickyDesc)
	_, err := h.Call(ctx, target, "CapFull", wrapperspb.String("create"))
	require.Error(t, err)
	require.NoError(t, h.Send(ctx, target.Plain(), "Quit", wrapperspb.String("")))
	require.Eventually(t, func() bool {
		_, err := h.Call(ctx, target.Plain(), "CapFull", wrapperspb.String("after"))
		return err != nil && !isApp(err)
	}, 10*time.Second, 5*time.Millisecond, "the Spot closed itself")
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Close hung")
	}
}

func isApp(err error) bool {
	_, ok := err.(*sdk.AppError)
	return ok
}

// F8: Close is bounded by StopTimeout: a handler that never returns is force-stopped, and
// Close says so instead of hanging.
func TestF8_CloseForceStopsAtStopTimeout(t *testing.T) {
	tn := newTrickyNodes(t, 1, func(_ int, cfg *rt.Config) { cfg.StopTimeout = time.Second })
	h := tn.hosts[0]
	target := sdk.InstanceIntent(trickyType, "held").WithDesc(trickyDesc)
	require.NoError(t, h.Send(ctx, target, "Hold", wrapperspb.String("")))
	start := time.Now()
	err := h.Close()
	took := time.Since(start)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "force-stopped")
	assert.Less(t, took, 10*time.Second, "Close returned at its deadline, not when the handler did")
}

// C1, DESIGN §4: losing the owner lease is not permanent. The node ends the Spots it owned,
// keeps calling other nodes' objects meanwhile, registers again on a new lease and owns
// objects again; its old Spots are reclaimed and created afresh.
func TestC1_LeaseLossIsNotPermanent(t *testing.T) {
	c := newCluster(t, 2, nil)
	a, b := c.hosts[0], c.hosts[1]
	_, err := record(b, openLedger("orphan"), "x", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	_, err = record(a, openLedger("on-b"), "x", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)

	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	leaseOf := func() clientv3.LeaseID { return nodeLease(t, cli, "node-a") }
	old := leaseOf()
	require.NotZero(t, old)
	_, err = cli.Revoke(ctx, old) // etcd ended the lease under the node, as after a long pause
	require.NoError(t, err)

	require.Eventually(t, func() bool { return c.runs.Count("closed:OwnerLost") == 1 }, 15*time.Second, 10*time.Millisecond,
		"the node ends the activations of the lease it lost")
	_, err = record(a, ledger("on-b"), "meanwhile")
	require.NoError(t, err, "the node still calls other nodes' objects")

	require.Eventually(t, func() bool { l := leaseOf(); return l != 0 && l != old }, 15*time.Second, 10*time.Millisecond,
		"the node registered again on a new lease")
	require.Eventually(t, func() bool { return a.MeshStatus().Placement.IsAvailable }, 15*time.Second, 10*time.Millisecond)
	_, err = record(b, openLedger("new-on-a"), "x", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err, "the node owns objects again")

	// The old lease's Spot is reclaimed and created afresh.
	require.Eventually(t, func() bool {
		_, err = record(b, openLedger("orphan"), "again")
		return err == nil
	}, 15*time.Second, 20*time.Millisecond, "last error: %v", err)
	assert.Equal(t, 2, c.factoryRuns("orphan"))
}

// leaseEndedUnnoticed is a one-node cluster whose node's owner lease etcd ended, with its
// keep-alive held so that it does not notice until release: the test decides what holds the
// node ID meanwhile.
type leaseEndedUnnoticed struct {
	c       *cluster
	a       *rt.Host
	sink    *logSink
	cli     *clientv3.Client
	old     clientv3.LeaseID
	release func()
}

func endLeaseUnnoticed(t *testing.T) *leaseEndedUnnoticed {
	l := &leaseEndedUnnoticed{sink: &logSink{}}
	l.c = newCluster(t, 1, func(_ int, cfg *rt.Config) { cfg.Logger = slog.New(sinkHandler{sink: l.sink}) })
	l.a = l.c.hosts[0]
	cli, err := clientv3.New(clientv3.Config{Endpoints: l.c.endpoints, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	l.cli = cli
	l.release = l.a.HoldKeepAlive()
	t.Cleanup(l.release)
	l.old = nodeLease(t, cli, "node-a")
	_, err = cli.Revoke(ctx, l.old)
	require.NoError(t, err)
	return l
}

// C1, DESIGN §4: a node whose owner lease ended while another live process registered its
// node ID waits only until that process has kept its lease alive: then it fails, says who
// holds its ID, and tries no more; the other process keeps the ID and serves.
func TestC1_ANodeWhoseIDAnotherProcessTookWhileItsLeaseWasGoneFails(t *testing.T) {
	l := endLeaseUnnoticed(t)
	a, sink, cli := l.a, l.sink, l.cli
	other := l.c.start(t, 0, nil) // another process started as node-a
	taken := nodeLease(t, cli, "node-a")
	require.NotZero(t, taken)
	l.release()

	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateError }, 30*time.Second, 10*time.Millisecond,
		"the node fails rather than waiting for the other process to end")
	failed := sink.find("the node failed and cannot serve; shut it down")
	require.Len(t, failed, 1)
	assert.Contains(t, failed[0].attrs["err"], "another live process")
	assert.Contains(t, failed[0].attrs["err"], fmt.Sprintf("owner lease %x", int64(taken)), "it names the holder's lease")
	tries := len(sink.find("registering the node again failed; it is tried again"))
	time.Sleep(3 * time.Second) // past the retries' longest backoff, the lease's TTL
	assert.Len(t, sink.find("registering the node again failed; it is tried again"), tries, "the failed node tried to register again")
	assert.Equal(t, taken, nodeLease(t, cli, "node-a"), "the other process keeps the ID")
	assert.Equal(t, sdk.RuntimeStateServing, other.Status().State)
	_, err := record(other, openLedger("on-the-other"), "x")
	require.NoError(t, err, "the other process owns objects")
	require.NoError(t, a.Close(), "the failed node shuts down")
}

// C1, DESIGN §4: a node whose owner lease ended while a process that is not alive held its
// node ID (a lease nobody keeps alive, as a process that died at once leaves) registers again
// once that lease has expired, rather than failing.
func TestC1_ANodeWhoseIDADeadProcessHeldRegistersAgainOnceItsLeaseExpires(t *testing.T) {
	l := endLeaseUnnoticed(t)
	a, sink, cli, old := l.a, l.sink, l.cli, l.old
	dead, err := cli.Grant(ctx, 2) // never kept alive
	require.NoError(t, err)
	desc, err := proto.Marshal(&storepb.NodeDescriptor{NodeId: "node-a", Roles: 1, Weight: 1, Endpoint: "127.0.0.1:1"})
	require.NoError(t, err)
	_, err = cli.Put(ctx, "/zlink/default/nodes/node-a", string(desc), clientv3.WithLease(dead.ID))
	require.NoError(t, err)
	l.release()

	require.Eventually(t, func() bool { l := nodeLease(t, cli, "node-a"); return l != 0 && l != old && l != dead.ID }, 30*time.Second, 10*time.Millisecond,
		"the node registered again once the dead process's lease expired")
	require.Eventually(t, func() bool { return a.MeshStatus().Placement.IsAvailable }, 15*time.Second, 10*time.Millisecond)
	_, err = record(a, openLedger("after"), "x", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err, "the node owns objects again")
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State)
	assert.Empty(t, sink.find("the node failed and cannot serve; shut it down"))
}

// C1: a one-way message that its node admits after its owner lease's guard ran out, before the
// keep-alive noticed (as just after a pause of the process), never runs: its turn reads the
// clock.
func TestC1_AOneWayMessageAdmittedPastTheGuardsDeadlineNeverRuns(t *testing.T) {
	c := newCluster(t, 1, func(_ int, cfg *rt.Config) {
		cfg.LeaseTTL = 2 * time.Second
		cfg.Logger = slog.New(slog.DiscardHandler)
	})
	h := c.hosts[0]
	_, err := record(h, openLedger("late"), "x")
	require.NoError(t, err)

	release := h.HoldKeepAlive()
	defer release()
	require.Eventually(t, func() bool { valid, _ := h.LeaseGuard(); return !valid }, 15*time.Second, time.Millisecond,
		"the guard runs out on the clock")
	_, lost := h.LeaseGuard()
	require.False(t, lost, "the held keep-alive has not noticed")
	require.NoError(t, h.Send(ctx, ledger("late"), rttest.LedgerNote, wrapperspb.String("late")),
		"admission reads only what the keep-alive noticed")

	release()
	require.Eventually(t, func() bool { return c.runs.Count("closed:OwnerLost") == 1 }, 15*time.Second, 10*time.Millisecond,
		"the node ends the Spot of the lease it lost")
	assert.Zero(t, c.runs.Count("late"), "the message admitted past the deadline ran")
}

// C1: the owner of Spots with backlogs and periodic timers is paused (SIGSTOP) past its lease
// TTL; another node re-creates the Spots; then the owner resumes. A journal outside the
// runtime shows that the old owner started no turn after the new owner's first one.
func TestC1_PausedOwnerRunsNothingAfterTheNewOwnersFirstTurn(t *testing.T) {
	c := newCluster(t, 1, func(_ int, cfg *rt.Config) {
		cfg.Roles = rt.RoleObjectClient // the test's caller hosts nothing
		cfg.Logger = slog.New(slog.DiscardHandler)
	})
	caller := c.hosts[0]
	dir := t.TempDir()
	journalOf := func(id string) string { return dir + "/" + id + ".journal" }
	owner := journalNode(t, c, "old-owner", journalOf("old-owner"))
	journalNode(t, c, "new-owner", journalOf("new-owner"))
	waitPeers(t, caller, "old-owner", "new-owner")

	const spots, backlog = 100, 30
	worker := func(i int) sdk.Target {
		return sdk.InstanceIntent(rttest.WorkerType, fmt.Sprint("w-", i)).WithDesc(&rttest.WorkerDesc)
	}
	for i := range spots {
		_, err := caller.Call(ctx, worker(i), rttest.WorkerPing, wrapperspb.String("create"), sdk.OnNode("old-owner"))
		require.NoError(t, err)
	}
	for i := range spots {
		for m := range backlog {
			require.NoError(t, caller.Send(ctx, worker(i).Plain(), rttest.WorkerWork, wrapperspb.String(fmt.Sprint("m", m))))
		}
	}
	owner.Pause()
	// Every Spot is created again on the other node once the paused owner's lease has ended
	// and its records were reclaimed.
	for i := range spots {
		var err error
		require.Eventually(t, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = caller.Call(cctx, worker(i), rttest.WorkerPing, wrapperspb.String("on-new"))
			return err == nil
		}, 60*time.Second, 20*time.Millisecond, "Spot %d: %v", i, err)
	}
	owner.Resume()
	// The old owner notices its lease is gone and registers again; until its new lease is
	// granted it refuses to create anything, and its connection may still be up meanwhile.
	waitPeers(t, caller, "old-owner")
	var err error
	require.Eventually(t, func() bool {
		_, err = caller.Call(ctx, sdk.InstanceIntent(rttest.WorkerType, "fresh").WithDesc(&rttest.WorkerDesc), rttest.WorkerPing,
			wrapperspb.String("x"), sdk.OnNode("old-owner"))
		return !errors.Is(err, sdk.ErrNotServing)
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, err, "the resumed node owns objects again")

	oldTurns, err := rttest.ReadJournal(journalOf("old-owner"))
	require.NoError(t, err)
	newTurns, err := rttest.ReadJournal(journalOf("new-owner"))
	require.NoError(t, err)
	// Turns are judged by their starts: each must be its own lease check's.
	assert.Empty(t, rttest.CheckTurnStarts(oldTurns))
	assert.Empty(t, rttest.CheckTurnStarts(newTurns))
	firstNew := map[string]time.Time{}
	for _, tr := range newTurns {
		if f, ok := firstNew[tr.Spot]; !ok || tr.Start.Before(f) {
			firstNew[tr.Spot] = tr.Start
		}
	}
	require.Len(t, firstNew, spots, "every Spot ran on the new owner")
	ran, late := 0, 0
	for _, tr := range oldTurns {
		f, ok := firstNew[tr.Spot]
		if !ok {
			continue // the fresh Spot
		}
		ran++
		if !tr.Start.Before(f) {
			late++
			t.Errorf("%s: the old owner started %q at %v, after the new owner's first turn at %v", tr.Spot, tr.What, tr.Start, f)
		}
	}
	assert.Positive(t, ran, "the old owner ran the Spots before the pause")
	assert.Zero(t, late)
	t.Logf("old owner: %d turns before the pause; new owner: %d turns", ran, len(newTurns))
}

// journalNode starts a node process that hosts Workers and journals their turns to path.
func journalNode(t *testing.T, c *cluster, id, path string) *proctest.Process {
	t.Helper()
	bin := proctest.Build(t, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	p := proctest.Start(t, bin, nil, "-etcd", strings.Join(c.endpoints, ","), "-node", id, "-lease-ttl", "2s",
		"-journal", path, "-work-delay", "20ms", "-tick", "20ms", "-quiet")
	_, err := p.Expect("ready ", 120*time.Second)
	require.NoError(t, err)
	go func() {
		for range p.Lines() {
		}
	}()
	return p
}

// B8: a Creating record that a live node left behind (its creation's last step was lost) does
// not hold the Spot for ever: a node whose intent call waits on it asks the owner to check, the
// owner releases it, and the call creates the Spot.
func TestB8_WaiterNudgesTheOwnerOfALeftOverRecord(t *testing.T) {
	c := newCluster(t, 2, func(_ int, cfg *rt.Config) { cfg.OperationTimeout = 2 * time.Second })
	a, b := c.hosts[0], c.hosts[1]
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	lease := nodeLease(t, cli, "node-a")
	require.NotZero(t, lease)
	st, err := store.New(cli, "default")
	require.NoError(t, err)
	defer st.Close()
	key := store.SpotKey{Type: rttest.LedgerType, ID: "left-over"}
	r, err := st.Reserve(ctx, key, sdk.KindInstance, store.Owner{Node: a.LocalNode(), Lease: int64(lease)})
	require.NoError(t, err)
	require.True(t, r.Won, "node-a's record, with no creation behind it")

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = b.Call(cctx, openLedger("left-over"), rttest.LedgerRecord, wrapperspb.String("after-nudge"), sdk.OnNode(b.LocalNode()))
	require.NoError(t, err, "the owner released its left-over record when asked, and the call created the Spot")
	assert.Equal(t, 1, c.runs.Count("after-nudge"))
	// The owner counts the release after etcd applied it, so the call may return first.
	assert.Eventually(t, func() bool { return a.CatalogStats().LeaksReleased == 1 }, 5*time.Second, 10*time.Millisecond,
		"node-a released the record as a leak")
}

// F7, C1: a relocation during which the node's owner lease ends does not answer Relocated: the
// Spots still here when the lease ended closed with it (CloseOwnerLost) instead of moving, their
// state lost. It ends Blocked with StoreUnavailable, and the node, registered again, serves.
func TestF7_ARelocationWhoseOwnerLeaseEndedIsNotRelocated(t *testing.T) {
	marshalling := make(chan struct{}, 1)
	c := statefulCluster(t, []*statefulCtl{{marshalDelay: 300 * time.Millisecond, marshalling: marshalling}, {}}, nil,
		func(_ int, cfg *rt.Config) { cfg.RelocationParallelism = 1 })
	a, caller := c.hosts[0], c.hosts[2]
	const spots = 6
	for i := range spots {
		addOne(t, caller, sdk.InstanceIntent(statefulType, fmt.Sprint("lease-", i)).WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode()))
	}
	done := maintain(a, time.Minute)
	select {
	case <-marshalling:
	case <-time.After(10 * time.Second):
		t.Fatal("the first unit never began")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	lease := nodeLease(t, cli, "node-a")
	require.NotZero(t, lease)
	_, err = cli.Revoke(ctx, lease) // etcd ended the lease under the node
	require.NoError(t, err)

	requireBlockedByTheLeaseEnd(t, a, done)
	kept := 0
	for i := range spots {
		if _, err := caller.Call(ctx, statefulOf(fmt.Sprint("lease-", i)), "Add", wrapperspb.String("x")); err == nil {
			kept++
		}
	}
	assert.Less(t, kept, spots, "some Spots closed with the lease rather than moving")
}

// nodeLease is the owner lease of node's registration in the default mesh, or 0 when it has
// none.
func nodeLease(t *testing.T, cli *clientv3.Client, node string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctx, "/zlink/default/nodes/"+node)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return 0
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// requireBlockedByTheLeaseEnd checks that a's relocation, whose result done carries, ended
// Blocked with StoreUnavailable, and that a serves again.
func requireBlockedByTheLeaseEnd(t *testing.T, a *rt.Host, done <-chan sdk.RelocationResult) {
	t.Helper()
	var res sdk.RelocationResult
	select {
	case res = <-done:
	case <-time.After(50 * time.Second):
		t.Fatal("the relocation did not end")
	}
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome, "%+v", res)
	assert.Equal(t, sdk.RelocationReasonStoreUnavailable, res.Reason)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "the node serves again")
}

// F7, C1: a relocation whose node's owner lease ends before it lists the units to move — the
// node paused past its lease just as the relocation began, while etcd does not answer it, and
// the end of the lease closed every Spot (CloseOwnerLost) before the relocation looked — does
// not answer Relocated either: those Spots did not move. It ends Blocked with StoreUnavailable,
// and the node serves again.
func TestF7_ARelocationWhoseOwnerLeaseEndedBeforeItListedTheUnitsIsNotRelocated(t *testing.T) {
	var proxy *chaos.Proxy
	c := statefulCluster(t, []*statefulCtl{{}, {}}, nil, firstBehindProxy(t, &proxy))
	a, caller := c.hosts[0], c.hosts[2]
	const spots = 4
	for i := range spots {
		addOne(t, caller, sdk.InstanceIntent(statefulType, fmt.Sprint("early-", i)).WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode()))
	}
	release := a.HoldKeepAlive() // the node pauses: its lease's guard runs out unnoticed
	defer release()
	require.Eventually(t, func() bool { valid, _ := a.LeaseGuard(); return !valid }, 15*time.Second, time.Millisecond,
		"the guard runs out on the clock")
	proxy.Set(chaos.Blackhole, 0) // etcd does not answer the node: the relocation's first publication waits

	done := maintain(a, time.Minute)
	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateRelocating }, 5*time.Second, time.Millisecond)
	release() // the node resumes and notices that its lease ended: its Spots close
	require.Eventually(t, func() bool { return a.MeshStatus().Placement.ActiveSpotCount == 0 }, 5*time.Second, time.Millisecond,
		"the Spots closed with the lease")
	proxy.Heal()

	requireBlockedByTheLeaseEnd(t, a, done)
	assert.Zero(t, c.hosts[1].MeshStatus().Placement.ActiveSpotCount, "no Spot moved")
	// Registered again on a new lease, the node owns Spots again.
	var err error
	require.Eventually(t, func() bool {
		_, err = caller.Call(ctx, sdk.InstanceIntent(statefulType, "after").WithDesc(statefulDesc(false)), "Add", wrapperspb.String("x"),
			sdk.OnNode(a.LocalNode()))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "last error: %v", err)
	assert.EqualValues(t, 1, a.MeshStatus().Placement.ActiveSpotCount)
}

// F6, F3: a relocation with nothing to move, whose target its view shows but etcd does not
// confirm because etcd does not answer the node, answers Blocked with StoreUnavailable at its
// deadline, not TargetUnavailable; the node serves again.
func TestF6_AnEmptyNodesTargetThatEtcdCannotConfirmIsStoreUnavailable(t *testing.T) {
	var proxy *chaos.Proxy
	behind := firstBehindProxy(t, &proxy)
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.LeaseTTL = 10 * time.Second
		behind(i, cfg)
	})
	a := c.hosts[0]
	proxy.Set(chaos.Blackhole, 0)
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 2 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome, "%+v", res)
	assert.Equal(t, sdk.RelocationReasonStoreUnavailable, res.Reason, "%+v", res)
	proxy.Heal()
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "the node serves again")
}

// firstBehindProxy configures a cluster's first node to reach etcd through a proxy of its
// own, which it sets in proxy; the test's end closes the proxy.
func firstBehindProxy(t *testing.T, proxy **chaos.Proxy) func(i int, cfg *rt.Config) {
	return func(i int, cfg *rt.Config) {
		if i != 0 {
			return
		}
		p, err := chaos.NewProxy("etcd-a", cfg.EtcdEndpoints[0])
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		*proxy = p
		cfg.EtcdEndpoints = []string{p.Addr()}
	}
}
