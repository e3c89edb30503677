package rt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

func u64(v uint64) *uint64 { return &v }

// warm creates the Ledger id from h, once h's mesh has seen a node that can host it serving.
func warm(t *testing.T, h *rt.Host, id string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := record(h, openLedger(id), "warm")
		assert.NoError(c, err)
	}, 15*time.Second, 20*time.Millisecond)
}

// TestI4_ConfigInboundIsValidatedWithEveryProblem: the inbound options are checked at Validate
// and Start, every problem named at once.
func TestI4_ConfigInboundIsValidatedWithEveryProblem(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.MaxMessageSize = 1 << 20
	cfg.Inbound = sdk.InboundDispatchOptions{
		CoreHwmBudgetBytes:                       u64(1000),
		ApplicationJobQueueProfile:               sdk.ApplicationJobQueueProfileManual,
		ApplicationJobQueuePauseThresholdPercent: 150,
	}
	err := cfg.Validate()
	require.ErrorIs(t, err, sdk.ErrConfig)
	for _, want := range []string{"Config.Inbound", "CoreHwmBudgetBytes 1000 cannot admit one message", "needs MaxQueuedApplicationJobs", "pause threshold 150%"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = rt.Start(ctx, cfg)
	require.ErrorIs(t, err, sdk.ErrConfig, "Start refuses it too")
}

// floodLedgers registers Ledgers whose Record of a message starting with "flood" takes delay.
func floodLedgers(c **cluster, delay time.Duration) func(int, *rt.Config) {
	return func(i int, cfg *rt.Config) {
		// A flood under the race detector can starve a node for longer than the cluster's
		// short lease; an ended lease is no part of what a flood test checks.
		cfg.LeaseTTL = 10 * time.Second
		cfg.Register = func(r sdk.Registrar) error {
			return rttest.RegisterLedger(r, func(spot, msg string) {
				if strings.HasPrefix(msg, "flood") {
					time.Sleep(delay)
					return
				}
				(*c).runs.Add(spot, msg)
			}, nil)
		}
	}
}

// clientOnly makes node i an Object Client: it hosts nothing, so its calls go to the others.
func clientOnly(cfg *rt.Config) { cfg.Roles = rt.RoleObjectClient }

// outcomes counts how the calls of a flood ended.
type outcomes struct {
	mu                                                 sync.Mutex
	ok, inboundBudget, sendQueue, scheduler, deadlines int
	other                                              []error
}

func (o *outcomes) add(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ce *sdk.CapacityError
	switch {
	case err == nil:
		o.ok++
	case errors.Is(err, sdk.ErrQueueFull):
		o.other = append(o.other, err) // never: the lanes are far larger than the budget
	case errors.Is(err, sdk.ErrInboundBudget):
		o.inboundBudget++
	case errors.As(err, &ce) && ce.Where == sdk.CapacitySendQueue:
		o.sendQueue++
	case errors.As(err, &ce) && ce.Where == sdk.CapacityScheduler:
		o.scheduler++
	case errors.Is(err, context.DeadlineExceeded):
		o.deadlines++
	default:
		o.other = append(o.other, err)
	}
}

func refusals(o *outcomes) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.inboundBudget
}

// floodRun is a flood of callers, each calling again as soon as it has its answer, beside a
// bystander node that calls its own Ledgers every 10 ms.
type floodRun struct {
	got       outcomes
	latencies []time.Duration // the bystander's calls
	calmErrs  []error
	stop      chan struct{}
	wg        sync.WaitGroup
}

// startFlood starts callers goroutines on flooder that call the Ledger "slow" with msg, each
// call bounded by perCall, and a bystander calling the Ledgers calm-0..calm-3; sample runs after
// each of the bystander's calls.
func startFlood(flooder, bystander *rt.Host, callers int, perCall time.Duration, msg proto.Message, sample func()) *floodRun {
	f := &floodRun{stop: make(chan struct{})}
	for range callers {
		f.wg.Go(func() {
			for {
				select {
				case <-f.stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, perCall)
				_, err := flooder.Call(cctx, ledger("slow"), rttest.LedgerRecord, msg)
				cancel()
				f.got.add(err)
			}
		})
	}
	f.wg.Go(func() {
		for j := 0; ; j++ {
			select {
			case <-f.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			began := time.Now()
			_, err := record(bystander, ledger(fmt.Sprint("calm-", j%4)), fmt.Sprint("calm-msg-", j))
			f.latencies = append(f.latencies, time.Since(began))
			if err != nil {
				f.calmErrs = append(f.calmErrs, err)
			}
			sample()
		}
	})
	return f
}

// end stops the flood and waits for its callers.
func (f *floodRun) end() {
	close(f.stop)
	f.wg.Wait()
}

// calm returns the median, 99th percentile and longest of the bystander's latencies.
func (f *floodRun) calm(t *testing.T) (p50, p99, longest time.Duration) {
	t.Helper()
	require.NotEmpty(t, f.latencies)
	slices.Sort(f.latencies)
	n := len(f.latencies)
	return f.latencies[n/2], f.latencies[n*99/100], f.latencies[n-1]
}

// heapBytes is the heap's live and not yet swept objects now.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// E6, E1: a peer that floods a node whose Spot is slow gets ErrInboundBudget, never
// ErrQueueFull; the node holds no more of its peers' requests than its budget, the heap stays
// bounded, and another peer's calls keep working meanwhile.
func TestE6_InboundBudgetIsNotQueueFull(t *testing.T) {
	const (
		budget  = 6 << 20
		payload = 512 << 10
		callers = 24
	)
	var c *cluster
	c = newCluster(t, 3, func(i int, cfg *rt.Config) {
		floodLedgers(&c, 20*time.Millisecond)(i, cfg)
		cfg.MaxMessageSize = 1 << 20
		switch i {
		case 0, 2:
			clientOnly(cfg)
		case 1:
			cfg.Inbound.CoreHwmBudgetBytes = u64(budget)
			cfg.Exec.Application = exec.Limits{Count: 1 << 20, Bytes: 1 << 30} // only the Core HWM bounds the flood
		}
	})
	flooder, receiver, bystander := c.hosts[0], c.hosts[1], c.hosts[2]
	warm(t, flooder, "slow")
	for i := range 4 {
		warm(t, bystander, fmt.Sprint("calm-", i))
	}
	before := heapBytes()

	var peakHeap atomic.Uint64
	flood := startFlood(flooder, bystander, callers, 5*time.Second, wrapperspb.String("flood-"+strings.Repeat("x", payload)),
		func() { peakHeap.Store(max(peakHeap.Load(), heapBytes())) })
	// Until the receiver has refused a request for want of budget (within a bound: under
	// load the first requests take long to arrive), and at least three seconds.
	began := time.Now()
	for time.Since(began) < 3*time.Second || (time.Since(began) < 30*time.Second && refusals(&flood.got) == 0) {
		time.Sleep(50 * time.Millisecond)
	}
	status := receiver.CapacityStatus()
	flood.end()

	require.Empty(t, flood.got.other, "every call ends with a reply or a typed capacity error by its deadline")
	assert.Positive(t, flood.got.inboundBudget, "the flooder was told the receiver's inbound budget is exhausted: %+v", &flood.got)
	assert.Positive(t, flood.got.ok)
	require.Empty(t, flood.calmErrs, "another peer's calls keep working during the flood")
	p50, p99, _ := flood.calm(t)
	t.Logf("flood: %d ok, %d ErrInboundBudget, %d send queue full, %d deadline; calm calls: %d, p50 %v, p99 %v",
		flood.got.ok, flood.got.inboundBudget, flood.got.sendQueue, flood.got.deadlines, len(flood.latencies), p50, p99)

	core := status.CoreHwm
	assert.Equal(t, uint64(budget), core.EffectiveBudgetBytes)
	assert.LessOrEqual(t, core.PeakAccountedBytes, uint64(budget), "the receiver never held more than its budget")
	assert.Positive(t, core.PeakAccountedBytes)
	assert.Positive(t, core.BlockedRatioPpm, "the flooder's stream was held for part of the time")
	assert.Equal(t, uint64(2), core.ActiveCompletionDirectionalQueueCount, "the receiver serves two peers' streams")
	// The process holds the flooder's side too: its callers' messages and its send queue.
	grew := int64(peakHeap.Load()) - int64(before)
	bound := int64(budget + callers*3*payload + 16<<20 + 64<<20)
	assert.Less(t, grew, bound, "the heap grew %d MiB", grew>>20)
	require.Eventually(t, func() bool {
		st := receiver.CapacityStatus().CoreHwm
		return st.CurrentAccountedBytes == 0 && st.CompletionCurrentAccountedBytes == 0
	}, 10*time.Second, 10*time.Millisecond, "every byte returns once the flood ends")
}

// holdTurn calls target's Record with "hold", which a holding Ledger (holdingLedgers) holds
// in its turn, and waits until it is held; the call's outcome arrives on the channel returned.
func holdTurn(t *testing.T, c sdk.Client, target sdk.Target, held <-chan struct{}) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := record(c, target, "hold")
		done <- err
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the held call ended: %v", err)
	}
	return done
}

// E1: the lanes' accounting is its own unit: a Spot's full lane refuses with ErrQueueFull while
// the process's Core HWM has room, and the byte figures of both are measured apart.
func TestE1_LaneAndCoreHwmAreSeparateUnits(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var c *cluster
	c = newCluster(t, 2, func(i int, cfg *rt.Config) {
		holdingLedgers(&c, release, held)(i, cfg)
		cfg.MaxMessageSize = 1 << 20
		if i == 0 {
			clientOnly(cfg)
		} else {
			cfg.Exec.Application = exec.Limits{Count: 1000, Bytes: 2 << 20} // 2 MiB: four messages of 512 KiB
		}
	})
	caller, owner := c.hosts[0], c.hosts[1]
	warm(t, caller, "lane")
	done := holdTurn(t, caller, openLedger("lane"), held)
	pad := strings.Repeat("y", 500<<10)
	var refusal error
	for i := range 10 {
		err := caller.Send(ctx, ledger("lane"), rttest.LedgerNote, wrapperspb.String(fmt.Sprint("note-", i, pad)))
		if err != nil {
			refusal = err
			break
		}
	}
	require.ErrorIs(t, refusal, sdk.ErrQueueFull, "the Spot's lane is full")
	require.NotErrorIs(t, refusal, sdk.ErrInboundBudget, "the process's budget (256 MiB) has room")
	st := owner.CapacityStatus().CoreHwm
	assert.Greater(t, st.TotalInstanceAccountedBytes, uint64(1<<20), "the lane holds the notes")
	assert.Greater(t, st.CurrentAccountedBytes, uint64(1<<20), "the Core HWM holds the one-way notes until they run")
	assert.Less(t, st.CurrentAccountedBytes, st.EffectiveBudgetBytes)
	close(release)
	require.NoError(t, <-done)
	require.Eventually(t, func() bool {
		st := owner.CapacityStatus().CoreHwm
		return st.CurrentAccountedBytes == 0 && st.TotalInstanceAccountedBytes == 0
	}, 10*time.Second, 10*time.Millisecond, "the bytes return when the notes have run")
}

// forwarderDesc is a Spot whose Forward handler, once let go, records its request on the Ledger
// it names, with the handler's own context.
func forwarderDesc(host *atomic.Pointer[rt.Host], letGo <-chan struct{}, started chan<- struct{}) *sdk.SpotDesc {
	return &sdk.SpotDesc{Name: "test.Forwarder", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "Forward",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(_ any, ctx context.Context, req proto.Message) (proto.Message, error) {
			started <- struct{}{}
			<-letGo
			return host.Load().Call(ctx, ledger(req.(*wrapperspb.StringValue).GetValue()), rttest.LedgerRecord, req)
		},
	}}}
}

// J3: the application job queue bounds the jobs waiting in the node's lanes (a request that
// finds its Spot idle runs at once on its caller's goroutine and needs no permit). Above its
// pause threshold the node stops reading its peers' streams, and a peer's call waits instead
// of failing; a local caller that finds it full waits until its deadline and gets
// ErrCapacityExceeded{Scheduler}; a job made by a running handler takes a reserved permit
// instead of waiting for the permits its caller holds; below the resume threshold all goes on.
func TestJ3_JobQueueBoundsJobsAndPausesPeerIntake(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 8)
	letGo, started := make(chan struct{}), make(chan struct{}, 1)
	var host atomic.Pointer[rt.Host]
	fwd := forwarderDesc(&host, letGo, started)
	var c *cluster
	c = newCluster(t, 2, func(i int, cfg *rt.Config) {
		holdingLedgers(&c, release, held)(i, cfg)
		if i == 0 {
			clientOnly(cfg)
			return
		}
		reg := cfg.Register
		cfg.Register = func(r sdk.Registrar) error {
			if err := reg(r); err != nil {
				return err
			}
			return r.RegisterSpot(fwd, func(sdk.SpotContext) (any, error) { return struct{}{}, nil })
		}
		// 4 permits: intake pauses at 4, resumes at 2.
		cfg.Inbound = sdk.InboundDispatchOptions{
			ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: u64(4),
			ApplicationJobQueuePauseThresholdPercent: 90, ApplicationJobQueueResumeThresholdPercent: 50,
		}
	})
	peer, node := c.hosts[0], c.hosts[1]
	host.Store(node)
	warm(t, peer, "free")
	for _, id := range []string{"h0"} {
		_, err := record(node, openLedger(id), "warm")
		require.NoError(t, err)
	}
	jobs := func() sdk.ApplicationJobQueueStatus { return node.CapacityStatus().ApplicationJobQueue }

	var calls sync.WaitGroup
	calls.Go(func() {
		_, err := record(node, ledger("h0"), "hold")
		assert.NoError(t, err)
	})
	<-held
	queue := func(from, to int) { // calls queued behind the held turn, a permit each
		for i := from; i < to; i++ {
			calls.Go(func() {
				_, err := record(node, ledger("h0"), fmt.Sprint("queued-", i))
				assert.NoError(t, err)
			})
		}
		require.Eventually(t, func() bool { return jobs().PermitsInUse == uint64(to) }, 10*time.Second, time.Millisecond)
	}
	queue(0, 2)
	// 2 permits, the resume threshold: the queue is busy, and the forwarder's turn, which runs
	// at once on its caller's goroutine, marks its context as it begins.
	forwarded := make(chan error, 1)
	go func() {
		_, err := node.Call(ctx, sdk.InstanceIntent("test.Forwarder", "f").WithDesc(fwd), "Forward", wrapperspb.String("h0"))
		forwarded <- err
	}()
	<-started
	queue(2, 4) // 4 permits: full, and intake paused
	st := jobs()
	assert.Equal(t, uint64(4), st.QueuedApplicationJobs)
	assert.Equal(t, sdk.ApplicationJobQueuePressureStatePaused, st.PressureState)
	assert.Equal(t, sdk.ApplicationJobQueuePressureStatePaused, node.Status().Capacity.ApplicationJobQueue.PressureState,
		"the runtime status carries the capacity figures")

	// A local caller waits until its deadline, then gets the scheduler's refusal.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := node.Call(short, ledger("h0"), rttest.LedgerRecord, wrapperspb.String("late"))
	cancel()
	var ce *sdk.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, sdk.CapacityScheduler, ce.Where)
	assert.Equal(t, int64(4), ce.Limit)
	assert.Equal(t, uint64(1), jobs().CapacityWaitCount)

	// A peer's call waits: its stream is not read while intake is paused.
	remote := make(chan error, 1)
	go func() {
		_, err := record(peer, ledger("free"), "from-peer")
		remote <- err
	}()
	select {
	case err := <-remote:
		t.Fatalf("a peer's call ran while intake was paused: %v", err)
	case <-time.After(200 * time.Millisecond):
	}

	// The forwarder's nested call, queued behind the held turn too, takes a reserved permit
	// beyond the queue's size instead of waiting for one.
	close(letGo)
	require.Eventually(t, func() bool { return jobs().ReservedSupplyPermits == 1 }, 10*time.Second, time.Millisecond,
		"a job made by a running handler (its turn marked) does not wait for its caller's permit")
	assert.Equal(t, uint64(5), jobs().PermitsInUse)

	close(release)
	calls.Wait()
	for name, ch := range map[string]chan error{"the forwarder": forwarded, "the peer": remote} {
		select {
		case err := <-ch:
			require.NoError(t, err, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never got its answer", name)
		}
	}
	require.Eventually(t, func() bool {
		st := jobs()
		return st.PermitsInUse == 0 && st.PressureState == sdk.ApplicationJobQueuePressureStateNormal && st.ReservedSupplyPermits == 0
	}, 5*time.Second, 10*time.Millisecond)
}

// J1, F11: the capacity figures are observed like the runtime status; a reset starts a new
// measurement epoch and restarts the peaks from the current values.
func TestJ1_ObserveCapacityAndResetCapacityMetrics(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	var c cluster
	c.runs = &rttest.Runs{}
	cfg.Register = func(r sdk.Registrar) error { return rttest.RegisterLedger(r, c.runs.Add, nil) }
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()

	octx, stop := context.WithCancel(ctx)
	defer stop()
	_, snapshot := collect(h.ObserveCapacity(octx))
	require.Eventually(t, func() bool { return len(snapshot()) >= 1 }, 5*time.Second, time.Millisecond)
	first := snapshot()[0].Status
	assert.Equal(t, uint64(1), first.MeasurementEpoch)
	assert.Positive(t, first.CoreHwm.EffectiveBudgetBytes)
	assert.Positive(t, first.ApplicationJobQueue.EffectiveMaxQueuedApplicationJobs)

	for i := range 3 { // one-way messages are always queued, so each takes a permit
		require.NoError(t, h.Send(ctx, openLedger(fmt.Sprint("o", i)), rttest.LedgerNote, wrapperspb.String("m")))
	}
	require.Eventually(t, func() bool {
		got := snapshot()
		return got[len(got)-1].Status.ApplicationJobQueue.PeakPermitsInUse >= 1
	}, 5*time.Second, 10*time.Millisecond, "the observer saw the jobs' peak")

	h.ResetCapacityMetrics()
	require.Eventually(t, func() bool {
		got := snapshot()
		last := got[len(got)-1].Status
		return last.MeasurementEpoch == 2 && last.ApplicationJobQueue.PeakPermitsInUse == 0
	}, 5*time.Second, 10*time.Millisecond, "the reset was observed")
	assert.Equal(t, uint64(2), h.Status().Capacity.MeasurementEpoch)
}

// H1, J1: each capacity status that ObserveCapacity delivers is the observer's own. Writing to
// what its configured figures point to changes what no other observer sees, and is no change
// of the figures: nothing more is delivered. Every observer shared the one snapshot, against
// which the host compares the figures it reads next.
func TestH1_AnObservedCapacityStatusIsTheObserversOwn(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Inbound = sdk.InboundDispatchOptions{
		CoreHwmMemoryLimitBytes:    u64(1 << 30),
		CoreHwmBudgetBytes:         u64(64 << 20),
		ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual,
		MaxQueuedApplicationJobs:   u64(512),
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	pointers := func(c sdk.HostCapacityStatus) []*uint64 {
		return []*uint64{c.CoreHwm.ConfiguredMemoryLimitBytes, c.CoreHwm.ConfiguredBudgetBytes, c.ApplicationJobQueue.ConfiguredManualMax}
	}
	configured := func(c sdk.HostCapacityStatus) (out []uint64) {
		for _, p := range pointers(c) {
			require.NotNil(t, p)
			out = append(out, *p)
		}
		return out
	}
	want := []uint64{1 << 30, 64 << 20, 512}
	require.Equal(t, want, configured(h.CapacityStatus()))

	octx, stop := context.WithCancel(ctx)
	defer stop()
	_, first := collect(h.ObserveCapacity(octx))
	_, second := collect(h.ObserveCapacity(octx))
	require.Eventually(t, func() bool { return len(first()) > 0 && len(second()) > 0 }, 5*time.Second, time.Millisecond)
	for _, p := range pointers(first()[0].Status) {
		*p = 1
	}
	assert.Equal(t, want, configured(second()[0].Status), "writing to an observed status changes no other observer's")
	assert.Equal(t, want, configured(h.CapacityStatus()), "nor the figures now")
	time.Sleep(3 * 250 * time.Millisecond) // three readings of the figures
	assert.Len(t, first(), 1, "nor is it a change of the figures, which they are read against")
	assert.Len(t, second(), 1, "nor is it a change of the figures, which they are read against")
}

// E1: one peer that sends one-way messages to a busy Spot fills no more than its stream's share
// of the budget: their bytes stay charged to its stream until they run, and another peer's
// call still fits.
func TestE1_OneWayMessagesStayWithinTheirStreamsShare(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var c *cluster
	c = newCluster(t, 3, func(i int, cfg *rt.Config) {
		holdingLedgers(&c, release, held)(i, cfg)
		cfg.MaxMessageSize = 1 << 20
		if i == 1 {
			cfg.Inbound.CoreHwmBudgetBytes = u64(8 << 20) // a stream's share: 2 MiB and a bit
			cfg.Exec.Application = exec.Limits{Count: 1 << 20, Bytes: 1 << 30}
		} else {
			clientOnly(cfg)
		}
	})
	sender, owner, other := c.hosts[0], c.hosts[1], c.hosts[2]
	warm(t, sender, "busy")
	warm(t, other, "calm")
	done := make(chan error, 1)
	go func() {
		_, err := record(sender, ledger("busy"), "hold")
		done <- err
	}()
	<-held
	pad := strings.Repeat("n", 500<<10)
	var refusal error
	for i := range 40 {
		if err := sender.Send(ctx, ledger("busy"), rttest.LedgerNote, wrapperspb.String(fmt.Sprint("note-", i, pad))); err != nil {
			refusal = err
			break
		}
	}
	require.ErrorIs(t, refusal, sdk.ErrInboundBudget, "the sender's stream reached its share")
	core := owner.CapacityStatus().CoreHwm
	assert.LessOrEqual(t, core.CurrentAccountedBytes, uint64(3<<20), "one stream holds no more than its share")
	_, err := record(other, ledger("calm"), strings.Repeat("c", 200<<10))
	require.NoError(t, err, "another peer's request still fits")
	close(release)
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { return owner.CapacityStatus().CoreHwm.CurrentAccountedBytes == 0 },
		10*time.Second, 10*time.Millisecond, "the notes' bytes return once they ran")
}

// E1: a peer that stops taking its replies stops being read once its replies and requests fill
// its stream's share; the replies it leaves queued stay within that share, and other peers'
// calls go on.
func TestE1_APeerThatTakesNoRepliesHoldsOnlyItsShare(t *testing.T) {
	runs := &rttest.Runs{}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.Register = func(r sdk.Registrar) error { return rttest.RegisterLedger(r, runs.Add, nil) }
		cfg.MaxMessageSize = 1 << 20
		if i == 0 {
			cfg.Inbound.CoreHwmBudgetBytes = u64(8 << 20)
		} else {
			clientOnly(cfg)
		}
	})
	node, other := c.hosts[0], c.hosts[1]
	warm(t, node, "echo")
	warm(t, other, "calm")

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := rttest.DialRawPeer(t, node.Endpoint()).Stream(sctx, "deaf")
	require.NoError(t, err)
	// Record echoes its request: each 256 KiB request makes a 256 KiB reply, and the peer reads
	// none of them.
	payload, err := proto.Marshal(wrapperspb.String(strings.Repeat("e", 256<<10)))
	require.NoError(t, err)
	sent := make(chan int, 1)
	go func() {
		n := 0
		for i := range 200 {
			req := &wire.Request{CallId: uint64(i + 1), Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType,
				Id: "echo", Method: rttest.LedgerRecord, Payload: payload}
			if s.SendMsg(rttest.Batch(req)) != nil {
				break
			}
			n++
		}
		sent <- n
	}()
	require.Eventually(t, func() bool { return node.CapacityStatus().CoreHwm.CompletionCurrentAccountedBytes > 1<<20 },
		10*time.Second, 10*time.Millisecond, "replies pile up for the deaf peer")
	time.Sleep(300 * time.Millisecond)
	core := node.CapacityStatus().CoreHwm
	assert.LessOrEqual(t, core.CompletionCurrentAccountedBytes+core.CurrentAccountedBytes, uint64(4<<20),
		"the deaf peer's stream holds its share (2 MiB) and at most a message more of replies, not 200 of them")
	_, err = record(other, ledger("calm"), "still served")
	require.NoError(t, err, "another peer is unaffected")
	cancel()
	require.Eventually(t, func() bool {
		core := node.CapacityStatus().CoreHwm
		return core.CompletionCurrentAccountedBytes == 0 && core.CurrentAccountedBytes == 0
	}, 10*time.Second, 10*time.Millisecond, "the stream's end frees its replies")
	<-sent
}

// E6: a Spot that stops draining keeps at most half of its peer's stream share of the Core
// HWM in one-way messages. Past that the peer's further one-way messages are refused with
// ErrInboundBudget, and its stream is never stopped for them: the peer's calls to other Spots
// of the node go on while the stuck Spot holds its messages.
func TestE6_AStuckSpotLeavesItsPeersStreamRoomForOtherCalls(t *testing.T) {
	const budget = 32 << 20 // a stream's share is 8 MiB, of which queued messages may keep 4 MiB
	release, held := make(chan struct{}), make(chan struct{}, 1)
	var c *cluster
	c = newCluster(t, 2, func(i int, cfg *rt.Config) {
		holdingLedgers(&c, release, held)(i, cfg)
		cfg.MaxMessageSize = 1 << 20
		if i == 0 {
			clientOnly(cfg)
		} else {
			cfg.Inbound.CoreHwmBudgetBytes = u64(budget)
			cfg.Exec.Application = exec.Limits{Count: 1 << 20, Bytes: 1 << 30} // the lane would take them all
		}
	})
	caller := c.hosts[0]
	warm(t, caller, "stuck")
	warm(t, caller, "free")
	done := holdTurn(t, caller, ledger("stuck"), held)
	defer func() {
		close(release)
		require.NoError(t, <-done)
	}()
	pad := strings.Repeat("y", 256<<10)
	var refusal error
	sent := 0
	for ; sent < 64 && refusal == nil; sent++ {
		refusal = caller.Send(ctx, ledger("stuck"), rttest.LedgerNote, wrapperspb.String(fmt.Sprint("note-", sent, pad)))
	}
	require.ErrorIs(t, refusal, sdk.ErrInboundBudget, "the stuck Spot's messages reached half the stream's share")
	assert.Less(t, sent, 20, "about 4 MiB of 256 KiB messages were queued")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range 5 {
		_, err := caller.Call(cctx, ledger("free"), rttest.LedgerRecord, wrapperspb.String(fmt.Sprint("free-", i, pad)))
		require.NoError(t, err, "the peer's other calls go on")
	}
}

// E6: the same for a subscriber of a Fanout channel that stops draining: the publisher's
// node gets ErrInboundBudget for its further publications, and its calls to the subscriber's
// node go on.
func TestE6_AStuckSubscriberLeavesItsPeersStreamRoomForOtherCalls(t *testing.T) {
	const budget = 32 << 20
	release := make(chan struct{})
	defer close(release)
	block := &sdk.ChannelDesc{Name: "test.Block", Kind: sdk.ChannelFanout, Methods: []sdk.MethodDesc{{
		Name: "Post", OneWay: true, NewRequest: func() proto.Message { return new(wrapperspb.BytesValue) },
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
			<-release
			return nil, nil
		},
	}}}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.MaxMessageSize = 1 << 20
		cfg.Inbound.CoreHwmBudgetBytes = u64(budget)
		withChannels(func(i int, r sdk.Registrar, _ sdk.NodeID) error {
			if i == 1 {
				return r.Subscribe(block, struct{}{})
			}
			return nil
		})(i, cfg)
	})
	a, b := c.hosts[0], c.hosts[1]
	_, err := record(a, openLedger("on-b"), "before", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ch := a.MeshStatus().Channels
		return len(ch) == 1 && ch[0].ReadyTargetCount == 1
	}, 10*time.Second, 10*time.Millisecond)
	post := wrapperspb.Bytes(make([]byte, 256<<10))
	var refusal error
	for n := 0; n < 64 && refusal == nil; n++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		refusal = a.Publish(pctx, block, "Post", post)
		cancel()
	}
	require.ErrorIs(t, refusal, sdk.ErrInboundBudget, "the stuck subscriber's publications reached half the stream's share")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = a.Call(cctx, ledger("on-b"), rttest.LedgerRecord, wrapperspb.String("after"))
	require.NoError(t, err, "the publisher's other calls go on")
}
