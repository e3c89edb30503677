package rt_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/sdk"
)

// holdingLedgers makes node i's Ledgers hold the message "hold" until release is closed; every
// message is recorded in c.runs once it ran.
func holdingLedgers(c **cluster, release <-chan struct{}, held chan<- struct{}) func(int, *rt.Config) {
	return func(i int, cfg *rt.Config) {
		cfg.Register = func(r sdk.Registrar) error {
			return rttest.RegisterLedger(r, func(spot, msg string) {
				if msg == "hold" {
					held <- struct{}{}
					<-release
				}
				(*c).runs.Add(spot, msg)
			}, func(string) { (*c).builtOn[i].Add(1) })
		}
	}
}

// collect ranges over an observation on its own goroutine until it ends.
func collect[T any](seq func(func(sdk.Observed[T]) bool)) (<-chan []sdk.Observed[T], func() []sdk.Observed[T]) {
	var mu sync.Mutex
	var got []sdk.Observed[T]
	done := make(chan []sdk.Observed[T], 1)
	go func() {
		for o := range seq {
			mu.Lock()
			got = append(got, o)
			mu.Unlock()
		}
		mu.Lock()
		done <- got
		mu.Unlock()
	}()
	return done, func() []sdk.Observed[T] {
		mu.Lock()
		defer mu.Unlock()
		return append([]sdk.Observed[T](nil), got...)
	}
}

// firstOfTwo starts two observations with observe, each ended by the test's end, and returns
// the first status each took.
func firstOfTwo[T any](t *testing.T, observe func(context.Context) (iter.Seq[sdk.Observed[T]], error)) (mine, theirs T) {
	t.Helper()
	octx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	var got [2]func() []sdk.Observed[T]
	for i := range got {
		seq, err := observe(octx)
		require.NoError(t, err)
		_, got[i] = collect(seq)
	}
	require.Eventually(t, func() bool { return len(got[0]()) > 0 && len(got[1]()) > 0 }, 5*time.Second, time.Millisecond)
	return got[0]()[0].Status, got[1]()[0].Status
}

// ownStatus is what requireOwnStatus needs of a status type: how to read its Sequence and
// clear its stamps (Sequence, ObservedAt), and how to write to every part it could share.
type ownStatus[S any] struct {
	sequence  func(S) uint64
	unstamped func(S) S
	scribble  func(*S)
}

// requireOwnStatus checks that the statuses get returns and observe delivers are their
// receiver's own (H1): writing to one changes neither the next status, nor its Sequence (it
// grows only when what it reports changes), nor what another observer took. want is the
// status now; nothing changes meanwhile.
func requireOwnStatus[S any](t *testing.T, want S, o ownStatus[S], get func() (S, error),
	observe func(context.Context) (iter.Seq[sdk.Observed[S]], error)) {
	t.Helper()
	st, err := get()
	require.NoError(t, err)
	require.Equal(t, o.sequence(want), o.sequence(st), "nothing changed")
	o.scribble(&st)
	next, err := get()
	require.NoError(t, err)
	assert.Equal(t, o.sequence(want), o.sequence(next), "writing to a status is no change")
	assert.Equal(t, o.unstamped(want), o.unstamped(next), "writing to a status changes no other status")

	mine, theirs := firstOfTwo(t, observe)
	require.Equal(t, o.sequence(mine), o.sequence(theirs), "both observers took the same status first")
	o.scribble(&mine)
	assert.Equal(t, o.unstamped(want), o.unstamped(theirs), "writing to an observed status changes no other observer's")
	next, err = get()
	require.NoError(t, err)
	assert.Equal(t, o.sequence(theirs), o.sequence(next), "nor the Sequence")
	assert.Equal(t, o.unstamped(want), o.unstamped(next), "nor the next status")
}

// F11: the runtime status says Serving and ready while the node serves; a shutdown shows
// Draining with its deadline, then Stopped with the shutdown's result, and the observation ends.
func TestF11_StatusFollowsTheLifecycle(t *testing.T) {
	var built atomic.Int64
	h, err := rt.Start(ctx, config(t, &built))
	require.NoError(t, err)
	st := h.Status()
	assert.Equal(t, sdk.RuntimeStateServing, st.State)
	assert.True(t, st.IsReady)
	assert.True(t, st.AcceptingWork)
	assert.True(t, st.SafeToShutdown, "no relocation ever started")
	assert.Nil(t, st.Deadline)
	assert.Nil(t, st.TerminationResult)
	assert.NotZero(t, st.Sequence)
	assert.WithinDuration(t, time.Now(), st.ObservedAt, time.Minute)
	assert.Positive(t, st.Capacity.CoreHwm.EffectiveBudgetBytes, "the status carries the capacity figures")
	assert.Positive(t, st.Capacity.ApplicationJobQueue.EffectiveMaxQueuedApplicationJobs)

	ended, _ := collect(h.ObserveRuntime(context.Background()))
	res, err := h.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeStopped, Reason: sdk.TerminationReasonNone}, res)

	var seen []sdk.Observed[sdk.RuntimeStatus]
	select {
	case seen = <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the observation did not end after the host stopped")
	}
	require.NotEmpty(t, seen)
	last := seen[len(seen)-1].Status
	assert.Equal(t, sdk.RuntimeStateStopped, last.State)
	assert.False(t, last.IsReady)
	assert.False(t, last.AcceptingWork)
	require.NotNil(t, last.TerminationResult)
	assert.Equal(t, res, *last.TerminationResult)
	assert.Nil(t, last.Deadline, "no operation in progress any more")
	for i := 1; i < len(seen); i++ {
		assert.Greater(t, seen[i].Status.Sequence, seen[i-1].Status.Sequence, "Sequence orders the statuses")
		if seen[i].Status.State == sdk.RuntimeStateDraining {
			assert.NotNil(t, seen[i].Status.Deadline, "Draining carries the shutdown's deadline")
			assert.False(t, seen[i].Status.AcceptingWork)
		}
	}
	assert.Equal(t, last, h.Status())
	_, err = h.Call(ctx, sdk.InstanceIntent("test.Counter", "late"), "Add", wrapperspb.Int64(1))
	require.ErrorIs(t, err, sdk.ErrNotServing)
}

// F8: a shutdown lets the work already queued finish, refuses new application work with
// ErrNotServing meanwhile, shows the node Draining to its peers, closes its Spots with reason
// Shutdown and releases their records, so that a peer creates them again at once.
func TestF8_ShutdownDrainsQueuedWorkAndReleasesLocations(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var c *cluster
	c = newCluster(t, 2, holdingLedgers(&c, release, held))
	a, b := c.hosts[0], c.hosts[1]
	const spots = 5
	for i := range spots {
		_, err := record(a, openLedger(spotID(i)), "first", sdk.OnNode(b.LocalNode()))
		require.NoError(t, err)
	}
	require.Equal(t, int64(spots), c.builtOn[1].Load())
	octx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()
	meshOfA, err := a.ObserveMesh(octx, "default")
	require.NoError(t, err)
	_, seenByA := collect(meshOfA)

	// One Spot is busy with a held message and has two more queued behind it.
	require.NoError(t, a.Send(ctx, ledger(spotID(0)), rttest.LedgerNote, wrapperspb.String("hold")))
	<-held
	for _, m := range []string{"queued-1", "queued-2"} {
		require.NoError(t, a.Send(ctx, ledger(spotID(0)), rttest.LedgerNote, wrapperspb.String(m)))
	}
	type outcome struct {
		res sdk.TerminationResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.Shutdown(context.Background(), 20*time.Second)
		done <- outcome{res, err}
	}()
	require.Eventually(t, func() bool { return b.Status().State == sdk.RuntimeStateDraining }, 5*time.Second, time.Millisecond)
	_, err = record(b, openLedger("new-on-b"), "x")
	require.ErrorIs(t, err, sdk.ErrNotServing, "no new application work while draining")
	require.Eventually(t, func() bool {
		for _, o := range seenByA() {
			for _, p := range o.Status.Peers {
				if p.NodeRid == b.LocalNode() && p.State == sdk.PeerStateDraining {
					return p.UnavailableReason != nil && *p.UnavailableReason == sdk.TopologyReasonDraining
				}
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "node-a sees node-b Draining in its mesh status (G1 Draining)")
	_, err = record(a, openLedger("placed-while-b-drains"), "x")
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.builtOn[0].Load(), "placement chose node-a, not the draining node-b")

	close(release)
	var out outcome
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the shutdown did not end")
	}
	require.NoError(t, out.err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, out.res.Outcome)
	for _, m := range []string{"hold", "queued-1", "queued-2"} {
		assert.Equal(t, 1, c.runs.Count(m), "%s ran before the Spot closed", m)
	}
	assert.Equal(t, spots, c.runs.Count("closed:Shutdown"), "every Spot closed with reason Shutdown")

	// Released, not left Unavailable: node-a creates them again at once.
	start := time.Now()
	for i := range spots {
		_, err := record(a, openLedger(spotID(i)), "again")
		require.NoError(t, err)
	}
	assert.Less(t, time.Since(start), rt.DefaultConfig().LeaseTTL, "no wait for a lease to expire")
	assert.Equal(t, int64(1+spots), c.builtOn[0].Load())
}

func spotID(i int) string { return "drain-" + string(rune('a'+i)) }

// F8: past its deadline, a shutdown force-stops what is left and says so.
func TestF8_ShutdownPastItsDeadlineForceStops(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	defer close(release)
	var c *cluster
	c = newCluster(t, 1, holdingLedgers(&c, release, held))
	h := c.hosts[0]
	_, err := record(h, openLedger("stuck"), "first")
	require.NoError(t, err)
	require.NoError(t, h.Send(ctx, ledger("stuck"), rttest.LedgerNote, wrapperspb.String("hold")))
	<-held
	res, err := h.Shutdown(ctx, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, res)
	assert.Equal(t, sdk.RuntimeStateStopped, h.Status().State)
	require.Error(t, h.Close(), "Close reports the forced stop")
}

// F10: concurrent and repeated shutdowns share one operation and one result; the first
// deadline stays in force; a caller whose context ends stops only its own wait.
// F8, F11: a shutdown stops taking application work at once: when Shutdown returns, even to a
// caller that gave up waiting before it began, the node is Draining with the shutdown's
// deadline, and refuses new calls.
func TestF8_ShutdownStopsTakingWorkBeforeItReturns(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var c *cluster
	c = newCluster(t, 1, holdingLedgers(&c, release, held))
	t.Cleanup(func() { close(release) })
	h := c.hosts[0]
	_, err := record(h, openLedger("busy"), "first")
	require.NoError(t, err)
	require.NoError(t, h.Send(ctx, ledger("busy"), rttest.LedgerNote, wrapperspb.String("hold")))
	<-held

	gaveUp, cancel := context.WithCancel(ctx)
	cancel()
	_, err = h.Shutdown(gaveUp, 20*time.Second)
	require.ErrorIs(t, err, context.Canceled)
	st := h.Status()
	assert.Equal(t, sdk.RuntimeStateDraining, st.State)
	assert.False(t, st.AcceptingWork)
	assert.NotNil(t, st.Deadline, "the status carries the shutdown's deadline")
	_, err = record(h, openLedger("after"), "x")
	require.ErrorIs(t, err, sdk.ErrNotServing, "a call made once Shutdown returned is refused")
}

func TestF10_ShutdownsJoinAndACancelledWaiterEndsOnlyItsWait(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var c *cluster
	c = newCluster(t, 1, holdingLedgers(&c, release, held))
	h := c.hosts[0]
	_, err := record(h, openLedger("busy"), "first")
	require.NoError(t, err)
	require.NoError(t, h.Send(ctx, ledger("busy"), rttest.LedgerNote, wrapperspb.String("hold")))
	<-held

	results := make(chan sdk.TerminationResult, 4)
	var wg sync.WaitGroup
	shutdown := func(d time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Shutdown(context.Background(), d)
			assert.NoError(t, err)
			results <- res
		}()
	}
	shutdown(20 * time.Second)
	require.Eventually(t, func() bool { return h.Status().State == sdk.RuntimeStateDraining }, 5*time.Second, time.Millisecond)
	deadline := h.Status().Deadline
	require.NotNil(t, deadline)
	for _, d := range []time.Duration{time.Millisecond, 0, time.Hour} {
		shutdown(d)
	}

	impatient, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = h.Shutdown(impatient, time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the impatient caller's wait ends")
	assert.Equal(t, sdk.RuntimeStateDraining, h.Status().State, "the shutdown goes on")
	assert.Equal(t, deadline, h.Status().Deadline, "a joining caller does not change the deadline")

	close(release)
	wg.Wait()
	close(results)
	var all []sdk.TerminationResult
	for r := range results {
		all = append(all, r)
	}
	require.Len(t, all, 4)
	for _, r := range all {
		assert.Equal(t, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeStopped}, r, "one result for every caller: the 1 ms deadline was not the one in force")
	}
	res, err := h.Shutdown(ctx, time.Nanosecond)
	require.NoError(t, err)
	assert.Equal(t, all[0], res, "a later call gets the same result at once")
	require.NoError(t, h.Close())
	assert.Equal(t, 1, c.runs.Count("closed:Shutdown"))
}

// H1, H4 at the host: an observer that never reads holds up neither the host's shutdown nor
// another observer.
func TestObserverThatNeverReadsDoesNotBlockTheHost(t *testing.T) {
	var built atomic.Int64
	h, err := rt.Start(ctx, config(t, &built))
	require.NoError(t, err)
	octx, cancel := context.WithCancel(context.Background())
	stuckDone := make(chan struct{})
	go func() {
		defer close(stuckDone)
		for range h.ObserveRuntime(octx) {
			<-octx.Done() // never takes the next one
		}
	}()
	ended, _ := collect(h.ObserveRuntime(context.Background()))
	for i := range 20 {
		add(t, h, "c"+string(rune('a'+i)), 1)
	}
	res, err := h.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, res.Outcome)
	select {
	case got := <-ended:
		require.NotEmpty(t, got)
		assert.Equal(t, sdk.RuntimeStateStopped, got[len(got)-1].Status.State)
	case <-time.After(10 * time.Second):
		t.Fatal("the reading observer did not see the end")
	}
	cancel()
	<-stuckDone
}

// ObserveMesh honours its mesh name: a mesh the node is not part of is ErrNotFound.
func TestObserveMeshOfAnUnknownMeshIsNotFound(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, err := c.hosts[0].ObserveMesh(ctx, "elsewhere")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	assert.Contains(t, err.Error(), "elsewhere")
}

// G1 NoReadyPeer: a peer the node cannot connect to degrades the mesh and names the reason.
func TestG1_NoReadyPeerDegradesTheMesh(t *testing.T) {
	c := newCluster(t, 1, nil)
	refuse := func(context.Context, string) (net.Conn, error) { return nil, errors.New("refused by the test") }
	b := c.start(t, 1, func(_ int, cfg *rt.Config) { cfg.Dialer = refuse })
	obs, err := b.ObserveMesh(ctx, "default")
	require.NoError(t, err)
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last sdk.RouteMeshStatus
	for o := range obs {
		last = o.Status
		if len(last.Peers) == 1 && last.Peers[0].UnavailableReason != nil && last.State == sdk.TopologyStateDegraded {
			break
		}
		if octx.Err() != nil {
			break
		}
	}
	require.Len(t, last.Peers, 1, "%+v", last)
	require.NotNil(t, last.Peers[0].UnavailableReason)
	assert.Equal(t, sdk.TopologyReasonNoReadyPeer, *last.Peers[0].UnavailableReason)
	assert.Equal(t, sdk.TopologyStateDegraded, last.State)
	assert.Zero(t, last.ReadyPeerCount)
	assert.True(t, last.IsReady, "a degraded mesh still carries local traffic")
}

// G1 LocationUnavailable: while etcd cannot be reached the node's owner lease runs out; the mesh
// status says placement is unavailable for that reason, and recovers when etcd comes back. The
// runtime status (F11) says meanwhile that the host, still Serving, does not accept work, to
// Status and to its observers, and accepts it again once it holds a lease.
func TestG1_LocationUnavailableWhileEtcdIsUnreachable(t *testing.T) {
	etcd, endpoints := proctest.EtcdProcess(t, "-nofsync")
	var built atomic.Int64
	cfg := config(t, &built)
	cfg.EtcdEndpoints = endpoints
	cfg.LeaseTTL = 2 * time.Second
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	obs, err := h.ObserveMesh(context.Background(), "default")
	require.NoError(t, err)
	_, seen := collect(obs)
	_, seenRuntime := collect(h.ObserveRuntime(context.Background()))
	require.True(t, h.Status().AcceptingWork)
	etcd.Pause()
	resumed := false
	defer func() {
		if !resumed {
			etcd.Resume()
		}
	}()
	require.Eventually(t, func() bool {
		st := h.MeshStatus()
		return st.Placement.UnavailableReason != nil && *st.Placement.UnavailableReason == sdk.TopologyReasonLocationUnavailable &&
			st.State == sdk.TopologyStateDegraded
	}, 30*time.Second, 20*time.Millisecond, "placement unavailable for LocationUnavailable")
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(seenRuntime(), func(o sdk.Observed[sdk.RuntimeStatus]) bool {
			return o.Status.State == sdk.RuntimeStateServing && !o.Status.AcceptingWork
		})
	}, 10*time.Second, 20*time.Millisecond, "observers of the runtime saw that it takes no new work, though no one asked for the status")
	st := h.Status()
	assert.Equal(t, sdk.RuntimeStateServing, st.State, "the host serves on while one topology is degraded")
	assert.False(t, st.AcceptingWork, "without a valid owner lease it takes no new work")
	require.Eventually(t, func() bool {
		found := false
		for _, o := range seen() {
			if r := o.Status.Placement.UnavailableReason; r != nil && *r == sdk.TopologyReasonLocationUnavailable {
				found = true
			}
		}
		return found
	}, 10*time.Second, 20*time.Millisecond, "observers of the mesh saw it")
	etcd.Resume()
	resumed = true
	require.Eventually(t, func() bool { return h.MeshStatus().Placement.IsAvailable }, 60*time.Second, 50*time.Millisecond, "placement is available again")
	require.Eventually(t, func() bool { return h.Status().AcceptingWork }, 10*time.Second, 20*time.Millisecond, "it accepts work again")
}

// F11: a host whose owner lease ran out while no one observed its runtime status gives a new
// observer a first status that says it does not accept work, not the stale one.
func TestF11_ANewObserverOfAHostWhoseLeaseRanOutUnobservedIsToldAtOnce(t *testing.T) {
	var built atomic.Int64
	cfg := config(t, &built)
	cfg.LeaseTTL = 2 * time.Second
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	release := h.HoldKeepAlive()
	defer release()
	require.Eventually(t, func() bool { valid, _ := h.LeaseGuard(); return !valid }, 15*time.Second, time.Millisecond)
	octx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for o := range h.ObserveRuntime(octx) {
		assert.Equal(t, sdk.RuntimeStateServing, o.Status.State)
		assert.False(t, o.Status.AcceptingWork, "the first status is a fresh one")
		break
	}
}

// stopperDesc is a Spot type whose one method shuts its own node down from inside its handler.
func stopperDesc(host *atomic.Pointer[rt.Host]) *sdk.SpotDesc {
	return &sdk.SpotDesc{Name: "test.Stopper", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "Stop",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(_ any, ctx context.Context, _ proto.Message) (proto.Message, error) {
			_, err := host.Load().Shutdown(ctx, 10*time.Second)
			if err == nil {
				return wrapperspb.String("waited"), nil
			}
			return wrapperspb.String(err.Error()), nil
		},
	}}}
}

// F8, F10: a Spot's handler that shuts its own node down does not wait for the shutdown, which
// waits for that handler; the shutdown then ends cleanly instead of at its deadline.
func TestF8_ShutdownFromAHandlerDoesNotWaitForItself(t *testing.T) {
	var host atomic.Pointer[rt.Host]
	desc := stopperDesc(&host)
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) { return struct{}{}, nil })
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	host.Store(h)
	start := time.Now()
	out, err := h.Call(ctx, sdk.InstanceIntent("test.Stopper", "s").WithDesc(desc), "Stop", wrapperspb.String(""))
	require.NoError(t, err)
	assert.Contains(t, out.(*wrapperspb.StringValue).GetValue(), "from a Spot's handler")
	require.NoError(t, h.Close(), "the shutdown ended cleanly")
	assert.Less(t, time.Since(start), 5*time.Second, "not held until the 10 s deadline")
	require.NotNil(t, h.Status().TerminationResult)
	assert.Equal(t, sdk.TerminationResult{}, *h.Status().TerminationResult, "Stopped, reason None")
}

// quitter is a Spot whose closing callback, on an explicit close, shuts its own node down with
// the context it got and reports what Shutdown returned on out.
type quitter struct {
	host *atomic.Pointer[rt.Host]
	out  chan<- error
}

func (q *quitter) OnClose(ctx context.Context, r sdk.CloseReason) {
	if r == sdk.CloseExplicit {
		_, err := q.host.Load().Shutdown(ctx, 15*time.Second)
		q.out <- err
	}
}

// F8, F10, D3: a Spot's closing callback that shuts its own node down does not wait for the
// shutdown, which waits for that close: the shutdown ends cleanly once the callback returned,
// instead of force-stopping the node at its deadline.
func TestF8_ShutdownFromAClosingCallbackDoesNotWaitForItself(t *testing.T) {
	var host atomic.Pointer[rt.Host]
	out := make(chan error, 1)
	desc := spotDesc("test.Quitter", sdk.KindUser)
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) { return &quitter{host: &host, out: out}, nil })
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	host.Store(h)
	require.NoError(t, h.Create(ctx, sdk.UserTarget("test.Quitter", "q").WithDesc(desc)))
	require.NoError(t, h.CloseSpot(ctx, sdk.UserTarget("test.Quitter", "q").WithDesc(desc)))
	requireShutdownRefusedToTheCallback(t, h, out)
}

// lateQuitter is a Spot whose closing callback starts a goroutine with a context derived from
// its own (context.WithoutCancel, as background work is started), which shuts the node down
// once closed is closed and reports the answer on out.
type lateQuitter struct {
	host   *atomic.Pointer[rt.Host]
	closed <-chan struct{}
	out    chan<- shutdownOutcome
}

func (q *lateQuitter) OnClose(ctx context.Context, r sdk.CloseReason) {
	if r != sdk.CloseExplicit {
		return
	}
	bg := context.WithoutCancel(ctx)
	go func() {
		<-q.closed
		res, err := q.host.Load().Shutdown(bg, 15*time.Second)
		q.out <- shutdownOutcome{res, err}
	}()
}

// F8, F10, D3: a closing callback's context is marked only while the callback runs, as
// OnActivate's is. A goroutine that it started with a context derived from its own shuts the
// node down once the close has ended, and waits for the result. The mark did not end, and the
// shutdown was refused as if it came from the callback.
func TestF8_AGoroutineThatAClosingCallbackStartedMayShutDownOnceItReturned(t *testing.T) {
	var host atomic.Pointer[rt.Host]
	closed := make(chan struct{})
	out := make(chan shutdownOutcome, 1)
	desc := spotDesc("test.LateCloser", sdk.KindUser)
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) {
			return &lateQuitter{host: &host, closed: closed, out: out}, nil
		})
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	host.Store(h)
	require.NoError(t, h.Create(ctx, sdk.UserTarget("test.LateCloser", "q").WithDesc(desc)))
	require.NoError(t, h.CloseSpot(ctx, sdk.UserTarget("test.LateCloser", "q").WithDesc(desc)))
	close(closed)
	requireCleanShutdown(t, out, "the closing callback had returned: nothing of it is waited for")
	assert.Equal(t, sdk.RuntimeStateStopped, h.Status().State)
}

// onCloseHook is a Spot or Actor object whose closing callback, on an explicit close, runs hook
// with the context it got.
type onCloseHook struct{ hook func(ctx context.Context) }

func (o *onCloseHook) OnClose(ctx context.Context, r sdk.CloseReason) {
	if r == sdk.CloseExplicit {
		o.hook(ctx)
	}
}

// F8, F10, D3: a closing callback of node A closes, with its context, an Actor of node B (two
// nodes of one process), whose closing callback shuts node A down with the context it got.
// That context derives from A's callback, which still runs and which A's shutdown waits for:
// the Shutdown returns at once with an error. Only the nearest mark was read, B's, which is
// another node's, and A's shutdown waited until its deadline.
func TestF8_ShutdownFromACallbackNestedInAnotherNodesIsRefused(t *testing.T) {
	var nodeA, nodeB atomic.Pointer[rt.Host]
	out := make(chan error, 1)
	closerDesc := spotDesc("test.ActorCloser", sdk.KindUser)
	actorDesc := &sdk.SpotDesc{Name: "test.NestedQuitter", Kind: sdk.KindActor, Methods: []sdk.MethodDesc{{
		Name:       "Ping",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke:     func(any, context.Context, proto.Message) (proto.Message, error) { return nil, nil },
	}}}
	hostDesc := quitterHostDesc(actorDesc)
	actor := sdk.ActorTarget("test.NestedQuitter", "x").WithDesc(actorDesc)
	start := func(register func(sdk.Registrar) error) *rt.Host {
		cfg := rt.DefaultConfig()
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.Register = register
		h, err := rt.Start(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	a := start(func(r sdk.Registrar) error {
		return r.RegisterSpot(closerDesc, func(sdk.SpotContext) (any, error) {
			return &onCloseHook{hook: func(ctx context.Context) { _ = nodeB.Load().CloseSpot(ctx, actor) }}, nil
		})
	})
	nodeA.Store(a)
	b := start(func(r sdk.Registrar) error {
		err := r.RegisterActor(actorDesc, func(sdk.ActorContext) (any, error) {
			return &onCloseHook{hook: func(ctx context.Context) {
				_, err := nodeA.Load().Shutdown(ctx, 8*time.Second)
				out <- err
			}}, nil
		})
		return errors.Join(err, r.RegisterSpot(hostDesc, func(sc sdk.SpotContext) (any, error) { return sc, nil }))
	})
	nodeB.Store(b)
	_, err := b.Call(ctx, sdk.InstanceIntent("test.QuitterHost", "h").WithDesc(hostDesc), "Spawn", wrapperspb.String("x"))
	require.NoError(t, err)
	closer := sdk.UserTarget("test.ActorCloser", "a").WithDesc(closerDesc)
	require.NoError(t, a.Create(ctx, closer))
	go func() { _ = a.CloseSpot(ctx, closer) }()
	requireShutdownRefusedToTheCallback(t, a, out)
}

// requireShutdownRefusedToTheCallback checks that a closing callback's Shutdown, whose answer
// out carries, returned at once with an error, and that h's shutdown then ended cleanly.
func requireShutdownRefusedToTheCallback(t *testing.T, h *rt.Host, out <-chan error) {
	t.Helper()
	var err error
	select {
	case err = <-out:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return in the closing callback")
	}
	require.Error(t, err, "the closing callback cannot wait for the shutdown")
	assert.Contains(t, err.Error(), "cannot be waited for here")
	require.NoError(t, h.Close(), "the shutdown ended cleanly")
	require.NotNil(t, h.Status().TerminationResult)
	assert.Equal(t, sdk.TerminationResult{}, *h.Status().TerminationResult, "Stopped, reason None")
}

// quitterHostDesc is a Spot type whose one method spawns, into the Spot, an Actor of actor
// (named by the request).
func quitterHostDesc(actor *sdk.SpotDesc) *sdk.SpotDesc {
	return &sdk.SpotDesc{Name: "test.QuitterHost", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "Spawn",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			return wrapperspb.String(""), impl.(sdk.SpotContext).Spawn(ctx, actor, req.(*wrapperspb.StringValue).GetValue())
		},
	}}}
}

// F8, F10: an Actor's closing callback that shuts its own node down, on the Actor's explicit
// close, does not wait for the shutdown either: the callback runs on its Spot's queue, whose
// close the shutdown waits for, so the shutdown ends cleanly once the callback returned,
// instead of force-stopping the node at its deadline.
func TestF8_ShutdownFromAnActorsClosingCallbackDoesNotWaitForItself(t *testing.T) {
	var host atomic.Pointer[rt.Host]
	out := make(chan error, 1)
	actorDesc := &sdk.SpotDesc{Name: "test.QuitterActor", Kind: sdk.KindActor, Methods: []sdk.MethodDesc{{
		Name:       "Ping",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke:     func(any, context.Context, proto.Message) (proto.Message, error) { return nil, nil },
	}}}
	hostDesc := quitterHostDesc(actorDesc)
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		if err := r.RegisterActor(actorDesc, func(sdk.ActorContext) (any, error) { return &quitter{host: &host, out: out}, nil }); err != nil {
			return err
		}
		return r.RegisterSpot(hostDesc, func(sc sdk.SpotContext) (any, error) { return sc, nil })
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	host.Store(h)
	_, err = h.Call(ctx, sdk.InstanceIntent("test.QuitterHost", "h").WithDesc(hostDesc), "Spawn", wrapperspb.String("q"))
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- h.CloseSpot(ctx, sdk.ActorTarget("test.QuitterActor", "q").WithDesc(actorDesc)) }()
	requireShutdownRefusedToTheCallback(t, h, out)
	<-closed
}

// onActivateHook is a Spot object whose OnActivate returns what hook returns for the context
// it got.
type onActivateHook struct {
	hook func(ctx context.Context) error
}

func (o *onActivateHook) OnActivate(ctx context.Context) error { return o.hook(ctx) }

// activatingNode starts a node whose one Spot type, the Instance type name with a method Ping,
// runs onActivate in OnActivate with the host and its context, and returns the host and a
// target that creates such a Spot.
func activatingNode(t *testing.T, name string, onActivate func(h *rt.Host, ctx context.Context) error) (*rt.Host, sdk.Target) {
	t.Helper()
	var host atomic.Pointer[rt.Host]
	desc := &sdk.SpotDesc{Name: name, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "Ping",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke:     func(any, context.Context, proto.Message) (proto.Message, error) { return wrapperspb.String(""), nil },
	}}}
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.OperationTimeout = 5 * time.Second
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) {
			return &onActivateHook{hook: func(ctx context.Context) error { return onActivate(host.Load(), ctx) }}, nil
		})
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	host.Store(h)
	return h, sdk.InstanceIntent(name, "q").WithDesc(desc)
}

// F8, F10, B7: a Spot's OnActivate that shuts its own node down does not wait for the shutdown,
// which ends that creation: Shutdown returns at once with an error saying so (it returned the
// end of the creation's context instead, which says nothing of why), and the shutdown then
// ends cleanly. OnActivate then fails its creation, so that what the shutdown finds does not
// depend on whether the creation ended before the Spots were listed for closing.
func TestF8_ShutdownFromOnActivateDoesNotWaitForItself(t *testing.T) {
	out := make(chan error, 1)
	h, target := activatingNode(t, "test.ActivateQuitter", func(h *rt.Host, ctx context.Context) error {
		_, err := h.Shutdown(ctx, 15*time.Second)
		out <- err
		return errors.New("the node shuts down")
	})
	called := make(chan error, 1)
	go func() {
		_, err := h.Call(ctx, target, "Ping", wrapperspb.String(""))
		called <- err
	}()
	requireShutdownRefusedToTheCallback(t, h, out)
	assert.Error(t, <-called, "the creation failed")
}

// shutdownOutcome is what a Shutdown called on another goroutine answered.
type shutdownOutcome struct {
	res sdk.TerminationResult
	err error
}

// requireCleanShutdown waits for the answer of a Shutdown on out, which why says should have
// waited for the shutdown and found it clean: no error, Stopped with reason None.
func requireCleanShutdown(t *testing.T, out <-chan shutdownOutcome, why string) {
	t.Helper()
	got := wait.For(t, out)
	require.NoError(t, got.err, why)
	assert.Equal(t, sdk.TerminationResult{}, got.res, "Stopped, reason None")
}

// F8, F10: OnActivate's context is marked only while OnActivate runs. A goroutine that it
// started with a context derived from its own (context.WithoutCancel, as background work is
// started) shuts the node down once OnActivate has returned, or panicked, and waits for the
// result: nothing of the creation is left to wait for. The mark was the catalog's for good,
// and the shutdown was refused as if it came from OnActivate.
func TestF8_AGoroutineThatOnActivateStartedMayShutDownOnceItReturned(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panics=%v", panics), func(t *testing.T) {
			out := make(chan shutdownOutcome, 1)
			created := make(chan struct{})
			h, target := activatingNode(t, "test.LateQuitter", func(h *rt.Host, ctx context.Context) error {
				bg := context.WithoutCancel(ctx)
				go func() {
					<-created
					res, err := h.Shutdown(bg, 15*time.Second)
					out <- shutdownOutcome{res, err}
				}()
				if panics {
					panic("OnActivate failed")
				}
				return nil
			})
			_, err := h.Call(ctx, target, "Ping", wrapperspb.String(""))
			if panics {
				require.Error(t, err, "the creation failed")
			} else {
				require.NoError(t, err, "the Spot was created")
			}
			close(created)
			requireCleanShutdown(t, out, "OnActivate had ended: nothing of it is waited for")
			assert.Equal(t, sdk.RuntimeStateStopped, h.Status().State)
		})
	}
}

// F8, F10: a one-way handler of one node that shuts down another node of the same process
// waits for that shutdown, which waits for nothing of the handler's: only a turn of the node
// that shuts down is refused the wait. It was refused as if it were one.
func TestF8_ShutdownOfAnotherNodeFromAOneWayHandlerWaitsForIt(t *testing.T) {
	var other atomic.Pointer[rt.Host]
	out := make(chan shutdownOutcome, 1)
	desc := &sdk.SpotDesc{Name: "test.OtherStopper", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "StopOther",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(_ any, ctx context.Context, _ proto.Message) (proto.Message, error) {
			res, err := other.Load().Shutdown(ctx, 15*time.Second)
			out <- shutdownOutcome{res, err}
			return nil, nil
		},
	}}}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		if i == 0 {
			ledgers := cfg.Register
			cfg.Register = func(r sdk.Registrar) error {
				return errors.Join(ledgers(r), r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) { return struct{}{}, nil }))
			}
		}
	})
	a, b := c.hosts[0], c.hosts[1]
	other.Store(b)
	require.NoError(t, a.Send(ctx, sdk.InstanceIntent(desc.Name, "s").WithDesc(desc), "StopOther", wrapperspb.String(""), sdk.OnNode(a.LocalNode())))
	requireCleanShutdown(t, out, "the handler is no turn of the node it shuts down")
	assert.Equal(t, sdk.RuntimeStateStopped, b.Status().State)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "the handler's own node serves on")
}

// H1, F11: the status Host.Status returns is the caller's own. What its pointer fields point
// to (the deadline of the operation in progress, the last relocation's result, the shutdown's)
// neither changes under the caller nor, when the caller writes to it, changes what the next
// Status or an observer sees; each observer's statuses are its own too. They were the host's
// own fields, the deadline that of the operation itself.
func TestH1_ARuntimeStatusIsTheCallersOwn(t *testing.T) {
	c := newCluster(t, 1, nil)
	h := c.hosts[0]
	_, err := record(h, openLedger("stays"), "x")
	require.NoError(t, err)
	octx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()
	_, observed := collect(h.ObserveRuntime(octx))
	// With no other node, the relocation waits for a target until its deadline (F6).
	relocated := maintain(h, 2*time.Second)
	require.Eventually(t, func() bool { return h.Status().Deadline != nil }, 10*time.Second, 5*time.Millisecond)
	st := h.Status()
	deadline := *st.Deadline
	*st.Deadline = deadline.Add(time.Hour)
	require.NotNil(t, h.Status().Deadline)
	assert.Equal(t, deadline, *h.Status().Deadline, "writing to a status's deadline changes no other status")
	var seen sdk.RuntimeStatus
	require.Eventually(t, func() bool {
		for _, o := range observed() {
			if o.Status.Deadline != nil {
				seen = o.Status
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "an observer saw the relocation's deadline")
	*seen.Deadline = time.Time{}
	assert.Equal(t, deadline, *h.Status().Deadline, "nor does writing to an observed status's")

	res := wait.For(t, relocated)
	require.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome, "%+v", res)
	st = h.Status()
	require.NotNil(t, st.RelocationResult)
	*st.RelocationResult = sdk.RelocationResult{}
	require.NotNil(t, h.Status().RelocationResult)
	assert.Equal(t, res, *h.Status().RelocationResult, "writing to a status's relocation result changes no other status")

	require.NoError(t, h.Close())
	st = h.Status()
	require.NotNil(t, st.TerminationResult)
	st.TerminationResult.Outcome = sdk.TerminationOutcomeForceStopped
	require.NotNil(t, h.Status().TerminationResult)
	assert.Equal(t, sdk.TerminationResult{}, *h.Status().TerminationResult, "writing to a status's termination result changes no other status")
}

// F8: an Entry Spot whose turn outlasts the shutdown's deadline is force-stopped as any Spot
// is, and the shutdown says so.
func TestF8_AnEntryWhoseTurnOutlastsTheDeadlineIsForceStopped(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	defer close(release)
	desc := &sdk.SpotDesc{Name: "stop.Stuck", Kind: sdk.KindEntry, Methods: []sdk.MethodDesc{{
		Name:       "Do",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(_ any, _ context.Context, req proto.Message) (proto.Message, error) {
			held <- struct{}{}
			<-release
			return req, nil
		},
	}}}
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.NodeID = "stuck-entry"
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) { return struct{}{}, nil })
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	go func() { _, _ = h.Call(ctx, sdk.EntryTarget(desc.Name, cfg.NodeID), "Do", wrapperspb.String("hold")) }()
	wait.For(t, held)
	res, err := h.Shutdown(ctx, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, res)
	require.Error(t, h.Close(), "Close reports the forced stop")
}

// overrunCloser is an Entry Spot whose closing callback overruns the shutdown's deadline.
type overrunCloser struct{ release <-chan struct{} }

func (o overrunCloser) OnClose(context.Context, sdk.CloseReason) { <-o.release }

// F8: an idle Entry Spot whose close begins once the deadline has passed, spent by another's
// closing callback, is force-stopped for that: the shutdown names the late start, not work of
// its own that did not finish.
func TestF8_AnIdleEntryWhoseCloseBeginsAfterTheDeadlineSaysSo(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entry := func(name string) *sdk.SpotDesc {
		return &sdk.SpotDesc{Name: name, Kind: sdk.KindEntry, Methods: []sdk.MethodDesc{{
			Name:       "Do",
			NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
			NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
			Invoke:     func(_ any, _ context.Context, req proto.Message) (proto.Message, error) { return req, nil },
		}}}
	}
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.NodeID = "late-entry"
	cfg.Register = func(r sdk.Registrar) error {
		// Entry Spots close in the order of their names.
		if err := r.RegisterSpot(entry("stop.A"), func(sdk.SpotContext) (any, error) { return overrunCloser{release}, nil }); err != nil {
			return err
		}
		return r.RegisterSpot(entry("stop.B"), func(sdk.SpotContext) (any, error) { return struct{}{}, nil })
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	res, err := h.Shutdown(ctx, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, res)
	err = h.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "entry spot stop.B: its close began after the time had run out")
	assert.NotContains(t, err.Error(), "entry spot stop.B: "+catalog.ErrWorkOutlastedClose.Error(), "the idle Spot's own work is not the cause")
}
