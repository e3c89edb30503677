package exec_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fn is a Work made of functions.
type fn struct {
	run  func()
	drop func(error)
}

func (f fn) Run() {
	if f.run != nil {
		f.run()
	}
}

func (f fn) Drop(err error) {
	if f.drop != nil {
		f.drop(err)
	}
}

// blocker is a Work that runs until released.
type blocker struct {
	started chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}), release: make(chan struct{})}
}
func (b *blocker) Run()       { close(b.started); <-b.release }
func (b *blocker) Drop(error) {}

func app(payload int64) exec.Item {
	return exec.Item{Lane: sdk.LaneApplication, Payload: payload, Activity: true}
}
func life(payload int64) exec.Item {
	return exec.Item{Lane: sdk.LaneLifecycle, Payload: payload}
}

// occupied returns an executor whose runner is held by a blocker, so that everything submitted
// stays queued until the returned release is called.
func occupied(t *testing.T, cfg exec.Config) (*exec.Executor, func()) {
	t.Helper()
	require.NoError(t, cfg.Validate())
	e := exec.New(&cfg, nil)
	b := newBlocker()
	require.NoError(t, e.Submit(life(0), b))
	<-b.started
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	t.Cleanup(func() { release(); waitQuiescent(t, e) })
	return e, release
}

func waitQuiescent(t testing.TB, e *exec.Executor) {
	t.Helper()
	require.Eventually(t, e.Quiescent, 5*time.Second, time.Millisecond)
}

func TestE2_DefaultLimits(t *testing.T) {
	cfg := exec.DefaultConfig()
	assert.Equal(t, exec.Limits{Count: 1024, Bytes: 64 << 20}, cfg.Application)
	assert.Equal(t, exec.Limits{Count: 128, Bytes: 4 << 20}, cfg.Lifecycle)
	assert.NoError(t, cfg.Validate())
}

func TestK16_EveryLaneHasACountAndAByteLimit(t *testing.T) {
	for name, mutate := range map[string]func(*exec.Config){
		"app count zero":       func(c *exec.Config) { c.Application.Count = 0 },
		"app bytes zero":       func(c *exec.Config) { c.Application.Bytes = 0 },
		"lifecycle negative":   func(c *exec.Config) { c.Lifecycle.Count = -1 },
		"lifecycle bytes tiny": func(c *exec.Config) { c.Lifecycle.Bytes = exec.ItemOverhead - 1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := exec.DefaultConfig()
			mutate(&cfg)
			err := cfg.Validate()
			require.ErrorIs(t, err, sdk.ErrConfig)
			assert.Contains(t, err.Error(), "no lane is unbounded")
		})
	}
}

func TestK12_WhicheverLimitIsHitFirstApplies(t *testing.T) {
	cfg := exec.Config{Application: exec.Limits{Count: 4, Bytes: 4 * (exec.ItemOverhead + 100)}, Lifecycle: exec.DefaultConfig().Lifecycle}
	e, release := occupied(t, cfg)
	for range 4 {
		require.NoError(t, e.Submit(app(100), fn{}))
	}
	err := e.Submit(app(0), fn{})
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.AxisCount, qf.Axis, "both limits are reached; the count is reported for a count overflow")
	release()
	waitQuiescent(t, e)
	assert.Equal(t, exec.Stats{}, e.Stats(), "every reservation was returned")
}

func TestK13_LargeMessagesHitTheByteLimitFirst(t *testing.T) {
	cfg := exec.Config{Application: exec.Limits{Count: 1024, Bytes: 1 << 20}, Lifecycle: exec.DefaultConfig().Lifecycle}
	e, _ := occupied(t, cfg)
	const payload = 256 << 10 // 256 KiB
	admitted := 0
	var err error
	for err == nil {
		if err = e.Submit(app(payload), fn{}); err == nil {
			admitted++
		}
	}
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.LaneApplication, qf.Lane)
	assert.Equal(t, sdk.AxisBytes, qf.Axis)
	assert.Equal(t, 3, admitted, "4 × (256 KiB + 256) exceeds 1 MiB long before 1,024 items")
	assert.Equal(t, int64(payload+exec.ItemOverhead), qf.Requested)
}

func TestK14_EmptyPayloadsHitTheCountLimitFirst(t *testing.T) {
	e, _ := occupied(t, exec.DefaultConfig())
	admitted := 0
	var err error
	for err == nil {
		if err = e.Submit(app(0), fn{}); err == nil {
			admitted++
		}
	}
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.AxisCount, qf.Axis)
	assert.Equal(t, 1024, admitted)
	assert.Equal(t, int64(1024*exec.ItemOverhead), e.Stats().Application.Bytes, "256 KiB reserved, far below 64 MiB")
}

func TestK15_EmptyPayloadsConsumeTheByteLimit(t *testing.T) {
	cfg := exec.Config{Application: exec.Limits{Count: 1000, Bytes: 10 * exec.ItemOverhead}, Lifecycle: exec.DefaultConfig().Lifecycle}
	e, _ := occupied(t, cfg)
	for range 10 {
		require.NoError(t, e.Submit(app(0), fn{}))
	}
	err := e.Submit(app(0), fn{})
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.AxisBytes, qf.Axis, "ten empty payloads use up 2,560 bytes")
	assert.Equal(t, int64(exec.ItemOverhead), qf.Requested)
}

func TestE6_LifecycleLaneIsBoundedToo(t *testing.T) {
	cfg := exec.Config{Application: exec.DefaultConfig().Application, Lifecycle: exec.Limits{Count: 2, Bytes: 1 << 20}}
	e, _ := occupied(t, cfg)
	// The blocker holds one lifecycle slot.
	require.NoError(t, e.Submit(life(0), fn{}))
	err := e.Submit(life(0), fn{})
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.LaneLifecycle, qf.Lane)
	require.NoError(t, e.Submit(app(0), fn{}), "a full lifecycle lane does not refuse application work")
}

func TestReservationReturnsOnErrorAndPanic(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	var panics atomic.Int32
	e.SetOwner(owner{panicked: func(any, []byte) { panics.Add(1) }})
	var ran atomic.Int32
	require.NoError(t, e.Submit(app(1000), fn{run: func() { ran.Add(1); panic("boom") }}))
	require.NoError(t, e.Submit(app(1000), fn{run: func() { ran.Add(1) }}))
	waitQuiescent(t, e)
	assert.Equal(t, int32(2), ran.Load(), "the executor keeps serving after a panic")
	assert.Equal(t, int32(1), panics.Load())
	assert.Equal(t, exec.Stats{}, e.Stats())
}

func TestLifecycleRunsBeforeQueuedApplicationWork(t *testing.T) {
	e, release := occupied(t, exec.DefaultConfig())
	var mu sync.Mutex
	var order []string
	rec := func(s string) fn {
		return fn{run: func() { mu.Lock(); order = append(order, s); mu.Unlock() }}
	}
	require.NoError(t, e.Submit(app(0), rec("app1")))
	require.NoError(t, e.Submit(app(0), rec("app2")))
	require.NoError(t, e.Submit(life(0), rec("life1")))
	require.NoError(t, e.Submit(app(0), rec("app3")))
	release()
	waitQuiescent(t, e)
	assert.Equal(t, []string{"life1", "app1", "app2", "app3"}, order)
}

func TestAfterApplicationWaitsForTheApplicationLane(t *testing.T) {
	e, release := occupied(t, exec.DefaultConfig())
	var mu sync.Mutex
	var order []string
	rec := func(s string) fn {
		return fn{run: func() { mu.Lock(); order = append(order, s); mu.Unlock() }}
	}
	require.NoError(t, e.Submit(app(0), rec("app1")))
	require.NoError(t, e.Submit(app(0), rec("app2")))
	require.True(t, e.CloseApplication(false))
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneLifecycle, AfterApplication: true}, rec("close")))
	require.ErrorIs(t, e.Submit(app(0), rec("late")), exec.ErrAdmissionClosed)
	release()
	waitQuiescent(t, e)
	assert.Equal(t, []string{"app1", "app2", "close"}, order)
}

func TestWorkRunsSeriallyInFIFOOrder(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	var running, maxRunning atomic.Int32
	var mu sync.Mutex
	var got []int
	for i := range 500 {
		require.NoError(t, e.Submit(app(0), fn{run: func() {
			if n := running.Add(1); n > maxRunning.Load() {
				maxRunning.Store(n)
			}
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			running.Add(-1)
		}}))
	}
	waitQuiescent(t, e)
	assert.Equal(t, int32(1), maxRunning.Load())
	for i, v := range got {
		require.Equal(t, i, v)
	}
}

func TestInlineRunsOnTheCallersGoroutineWhenIdle(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	ran := false
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication, Inline: true}, fn{run: func() { ran = true }}))
	assert.True(t, ran, "Submit returned after the inline run")
	assert.True(t, e.Quiescent())

	// Busy: an inline item is queued behind the running one instead.
	e2, release := occupied(t, exec.DefaultConfig())
	done := make(chan struct{})
	require.NoError(t, e2.Submit(exec.Item{Lane: sdk.LaneApplication, Inline: true}, fn{run: func() { close(done) }}))
	select {
	case <-done:
		t.Fatal("ran while another item held the turn")
	default:
	}
	release()
	<-done
}

// A caller that runs item after item inline while other callers wait on the executor's work
// yields its processor after every eighth, outside the executor's lock, so that the callers
// a turn answered do not wait for the scheduler's time slice; a caller alone never yields.
func TestInlineRunsWithCompanyYieldTheProcessor(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	n := 0
	defer exec.OnYield(func() {
		n++
		released := make(chan bool, 1)
		go func() { released <- e.Quiescent() }() // blocks while the executor's lock is held
		select {
		case idle := <-released:
			assert.True(t, idle, "yielded while the executor was busy")
		case <-time.After(5 * time.Second):
			t.Error("yielded while holding the executor's lock")
		}
	})()
	// Runs without company do not count towards the period either: one short of a period
	// would make the first run with company yield.
	for range 8*exec.YieldEvery - 1 {
		require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication, Inline: true}, fn{}))
	}
	assert.Zero(t, n, "a caller alone yielded")

	company := exec.Item{Lane: sdk.LaneApplication, Inline: true, Company: true}
	for range exec.YieldEvery - 1 {
		require.NoError(t, e.Submit(company, fn{}))
	}
	assert.Zero(t, n, "yielded before the last run of the period")
	require.NoError(t, e.Submit(company, fn{}))
	assert.Equal(t, 1, n)
	for range exec.YieldEvery {
		require.NoError(t, e.Submit(company, fn{}))
	}
	assert.Equal(t, 2, n)
}

// The runner of a queue of items with company yields its processor after every eighth while
// eight or more are queued and they are a quarter or more of the process's runnable goroutines, outside
// the executor's lock, so that the callers its turns answered run before it goes on; items
// without company (one-way messages) never make it yield.
func TestQueuedItemsWithCompanyYieldTheRunner(t *testing.T) {
	company := exec.Item{Lane: sdk.LaneApplication, Company: true}
	for _, tc := range []struct {
		name       string
		item       exec.Item
		queued     int
		goroutines int // runnable in the process, as the executor sees them
		yields     int
	}{
		// After the 8th, 16th and 24th, with 24, 16 and 8 still queued; the 32nd is the last.
		{name: "a long queue", item: company, queued: 32, goroutines: 4, yields: 3},
		// After the 8th and 16th (16 of 64 is a quarter); at the 24th, 8 are not.
		{name: "a queue of a quarter", item: company, queued: 32, goroutines: 64, yields: 2},
		// After the 8th; at the 16th, 16 are just under a quarter of 65.
		{name: "a queue under a quarter", item: company, queued: 32, goroutines: 65, yields: 1},
		{name: "a short queue", item: company, queued: exec.YieldEvery + 1, goroutines: 4},
		{name: "no company", item: app(0), queued: 32, goroutines: 4},
		{name: "among many runnable goroutines", item: company, queued: 32, goroutines: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Restored after occupied's cleanup, which waits for the runner.
			t.Cleanup(exec.OnRunnableGoroutines(tc.goroutines))
			var e *exec.Executor
			yields := 0
			t.Cleanup(exec.OnYield(func() {
				yields++
				locked := make(chan struct{})
				go func() { e.Quiescent(); close(locked) }() // blocks while the lock is held
				select {
				case <-locked:
				case <-time.After(5 * time.Second):
					t.Error("yielded while holding the executor's lock")
				}
			}))
			e, release := occupied(t, exec.DefaultConfig())
			var ran atomic.Int32
			for range tc.queued {
				require.NoError(t, e.Submit(tc.item, fn{run: func() { ran.Add(1) }}))
			}
			release()
			waitQuiescent(t, e)
			require.Equal(t, int32(tc.queued), ran.Load())
			assert.Equal(t, tc.yields, yields)
		})
	}
}

// The runner's rule counts the goroutines that wait for a processor, not the parked ones: a
// process with many goroutines parked (a connection's reader, a Spot's idle timer) still has
// its runner yield over a long queue.
func TestParkedGoroutinesDoNotKeepTheRunnerFromYielding(t *testing.T) {
	park := make(chan struct{})
	var parked sync.WaitGroup
	for range 1000 {
		parked.Go(func() { <-park })
	}
	defer func() { close(park); parked.Wait() }()
	// Until they have parked, they are runnable.
	deadline := time.Now().Add(10 * time.Second)
	for exec.RunnableGoroutines() >= exec.YieldEvery && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	var yields atomic.Int32
	t.Cleanup(exec.OnYield(func() { yields.Add(1); runtime.Gosched() }))
	e, release := occupied(t, exec.DefaultConfig())
	for range 32 {
		require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication, Company: true}, fn{}))
	}
	release()
	waitQuiescent(t, e)
	assert.Positive(t, yields.Load(), "1,000 parked goroutines kept the runner from yielding")
}

func TestAnIdleExecutorHoldsNoGoroutine(t *testing.T) {
	cfg := exec.DefaultConfig()
	before := runtime.NumGoroutine()
	executors := make([]*exec.Executor, 1000)
	for i := range executors {
		executors[i] = exec.New(&cfg, nil)
		require.NoError(t, executors[i].Submit(app(10), fn{}))
	}
	for _, e := range executors {
		waitQuiescent(t, e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "1,000 idle executors hold no goroutine")
}

func TestCloseDropsQueuedWork(t *testing.T) {
	e, release := occupied(t, exec.DefaultConfig())
	var dropped atomic.Int32
	for range 5 {
		require.NoError(t, e.Submit(app(100), fn{run: func() { t.Error("ran after close") }, drop: func(err error) {
			assert.ErrorIs(t, err, sdk.ErrClosed)
			dropped.Add(1)
		}}))
	}
	e.Close(sdk.ErrClosed)
	assert.Equal(t, int32(5), dropped.Load())
	require.ErrorIs(t, e.Submit(life(0), fn{}), exec.ErrAdmissionClosed)
	release()
	waitQuiescent(t, e)
	assert.Equal(t, exec.Stats{}, e.Stats())
}

// C1: when the owner lease ends, the queued application work is dropped unrun; lifecycle work
// (the closing callback) still runs after the turn in progress.
func TestC1_DropApplicationKeepsLifecycleWork(t *testing.T) {
	e, release := occupied(t, exec.DefaultConfig())
	var dropped atomic.Int32
	for range 5 {
		require.NoError(t, e.Submit(app(100), fn{run: func() { t.Error("ran after the drop") }, drop: func(err error) {
			assert.ErrorIs(t, err, sdk.ErrStaleRoute)
			dropped.Add(1)
		}}))
	}
	closed := make(chan struct{})
	require.NoError(t, e.Submit(life(0), fn{run: func() { close(closed) }}))
	assert.Equal(t, 5, e.DropApplication(sdk.ErrStaleRoute))
	assert.Equal(t, int32(5), dropped.Load())
	require.ErrorIs(t, e.Submit(app(0), fn{}), exec.ErrAdmissionClosed, "application admission stays closed")
	release()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the lifecycle work did not run after the turn in progress")
	}
	waitQuiescent(t, e)
	assert.Equal(t, exec.Stats{}, e.Stats(), "every reservation returned")
}

func TestCloseApplicationRequiresQuiescence(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	require.True(t, e.CloseApplication(true), "an idle executor is quiescent")
	require.ErrorIs(t, e.Submit(app(0), fn{}), exec.ErrAdmissionClosed)
	require.NoError(t, e.Submit(life(0), fn{}), "lifecycle work is still admitted")
	waitQuiescent(t, e)
	e.OpenApplication()
	require.NoError(t, e.Submit(app(0), fn{}))
	waitQuiescent(t, e)

	busy, _ := occupied(t, exec.DefaultConfig())
	assert.False(t, busy.CloseApplication(true), "work in progress: not quiescent (D3, K10)")
	require.NoError(t, busy.Submit(app(0), fn{}))
}

func TestIdleSinceCountsOnlyActivity(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	since0, q := e.IdleSince()
	require.True(t, q)
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication}, fn{})) // a timer tick: no activity
	waitQuiescent(t, e)
	since1, _ := e.IdleSince()
	assert.Equal(t, since0, since1)
	require.NoError(t, e.Submit(app(0), fn{}))
	waitQuiescent(t, e)
	since2, _ := e.IdleSince()
	assert.Greater(t, since2, since1)
}

func TestNegativePayloadIsRefused(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	require.ErrorIs(t, e.Submit(app(-1), fn{}), sdk.ErrInvalidArgument)
}

// counter is a Work that counts its runs; it is shared by every submission to one executor.
type counter struct{ n *atomic.Int64 }

func (c counter) Run()       { c.n.Add(1) }
func (c counter) Drop(error) {}

// BenchmarkSubmitTo64Executors measures queued (not inline) work: 64 senders, each
// submitting to one of 64 executors that count in shared gauges, as a node's do, and the
// runners that drain them.
func BenchmarkSubmitTo64Executors(b *testing.B) {
	cfg := exec.DefaultConfig()
	execs := make([]*exec.Executor, 64)
	ran := make([]atomic.Int64, 64)
	var g exec.Gauges
	for i := range execs {
		execs[i] = exec.New(&cfg, &g)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // 64 senders on 2 Ps
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) % 64
			for execs[i].Submit(app(8), counter{&ran[i]}) != nil {
				runtime.Gosched() // a full lane pushes back
			}
		}
	})
	var total int64
	for i := range execs {
		waitQuiescent(b, execs[i])
		total += ran[i].Load()
	}
	require.Equal(b, int64(b.N), total, "every submission ran once")
}

// TestGaugesSumEveryExecutorsShare: the totals of more executors than the gauges have stripes
// count every queued item and its bytes once, and fall back to zero as the work runs or is
// dropped.
func TestGaugesSumEveryExecutorsShare(t *testing.T) {
	cfg := exec.DefaultConfig()
	var g exec.Gauges
	var blockers []*blocker
	var execs []*exec.Executor
	for range 40 {
		e := exec.New(&cfg, &g)
		b := newBlocker()
		require.NoError(t, e.Submit(app(0), b))
		<-b.started
		require.NoError(t, e.Submit(app(100), fn{}))
		require.NoError(t, e.Submit(life(10), fn{}))
		blockers, execs = append(blockers, b), append(execs, e)
	}
	assert.Equal(t, exec.Totals{
		QueuedApplication: 40,
		ApplicationBytes:  40 * (0 + exec.ItemOverhead + 100 + exec.ItemOverhead), // the running blocker's and the queued item's
		LifecycleBytes:    40 * (10 + exec.ItemOverhead),
	}, g.Totals())
	for i, b := range blockers {
		if i%2 == 0 {
			execs[i].Close(sdk.ErrClosed)
		}
		close(b.release)
	}
	require.Eventually(t, func() bool {
		for _, e := range execs {
			if !e.Quiescent() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	assert.Zero(t, g.Totals())
	assert.Zero(t, g.Listed(), "an idle executor leaves the gauges' list")
}

// TestGaugesLeaveOutTheItemRunningInline: an item that runs on its caller's goroutine was
// never queued; what is queued behind it counts, on either lane, until it completes.
func TestGaugesLeaveOutTheItemRunningInline(t *testing.T) {
	for _, lane := range []sdk.Lane{sdk.LaneApplication, sdk.LaneLifecycle} {
		t.Run(lane.String(), func(t *testing.T) {
			cfg := exec.DefaultConfig()
			var g exec.Gauges
			e := exec.New(&cfg, &g)
			b := newBlocker()
			done := make(chan error, 1)
			go func() { done <- e.Submit(exec.Item{Lane: lane, Payload: 5000, Inline: true}, b) }()
			<-b.started
			assert.Zero(t, g.Totals(), "nothing queued: the inline item is not counted")
			assert.Zero(t, g.Listed())
			require.NoError(t, e.Submit(app(100), fn{}))
			assert.Equal(t, exec.Totals{QueuedApplication: 1, ApplicationBytes: 100 + exec.ItemOverhead}, g.Totals())
			assert.Equal(t, 1, g.Listed())
			close(b.release)
			require.NoError(t, wait.For(t, done))
			waitQuiescent(t, e)
			assert.Zero(t, g.Totals())
			assert.Zero(t, g.Listed())
		})
	}
}

// owner hands what an executor tells its owner to the functions that are set.
type owner struct {
	beforeItem, runEnd func()
	panicked           func(v any, stack []byte)
	runMessage         func(exec.Message)
	dropMessage        func(exec.Message, error)
}

func (o owner) RunMessage(m exec.Message) {
	if o.runMessage != nil {
		o.runMessage(m)
	}
}

func (o owner) DropMessage(m exec.Message, err error) {
	if o.dropMessage != nil {
		o.dropMessage(m, err)
	}
}

func (o owner) BeforeItem() {
	if o.beforeItem != nil {
		o.beforeItem()
	}
}

func (o owner) RunEnd() {
	if o.runEnd != nil {
		o.runEnd()
	}
}

func (o owner) Panicked(v any, stack []byte) {
	if o.panicked != nil {
		o.panicked(v, stack)
	}
}

// msg is a message whose request carries n, so that a test can tell messages apart.
func msg(n int64) exec.Message {
	return exec.Message{Ctx: context.Background(), Method: &sdk.MethodDesc{Name: "M"}, Req: wrapperspb.Int64(n)}
}

func seqOf(m exec.Message) int64 { return m.Req.(*wrapperspb.Int64Value).GetValue() }

// TestMessagesRunInOrderWithTheWorkAroundThem: messages carried by value share the lane, its
// order and its reservations with the work around them, and their owner runs them.
func TestMessagesRunInOrderWithTheWorkAroundThem(t *testing.T) {
	cfg := exec.DefaultConfig()
	var g exec.Gauges
	e := exec.New(&cfg, &g)
	var order []string
	var got []exec.Message
	e.SetOwner(owner{runMessage: func(m exec.Message) {
		order = append(order, fmt.Sprintf("m%d", seqOf(m)))
		got = append(got, m)
	}})
	b := newBlocker()
	require.NoError(t, e.Submit(app(0), b))
	<-b.started
	first, second := msg(1), msg(2)
	first.Ctx = context.WithValue(context.Background(), keyOf{}, "first")
	second.Reserved = true
	require.NoError(t, e.SubmitMessage(app(10), first))
	require.NoError(t, e.Submit(app(20), fn{run: func() { order = append(order, "w") }}))
	require.NoError(t, e.SubmitMessage(app(30), second))
	st := e.Stats()
	assert.Equal(t, exec.LaneStats{Count: 4, Bytes: 0 + 10 + 20 + 30 + 4*exec.ItemOverhead}, st.Application)
	assert.Equal(t, exec.Totals{QueuedApplication: 3, ApplicationBytes: st.Application.Bytes}, g.Totals())
	close(b.release)
	waitQuiescent(t, e)
	assert.Equal(t, []string{"m1", "w", "m2"}, order)
	assert.Equal(t, []exec.Message{first, second}, got, "each message reaches its owner as it was sent")
	assert.Equal(t, exec.Stats{}, e.Stats())
	assert.Zero(t, g.Totals())
}

// keyOf is a context key of the tests.
type keyOf struct{}

// TestQueuedMessagesAreDroppedByTheirOwner: a message taken off its lane unrun is handed to its
// owner's DropMessage with the reason, as work's Drop is, and its reservation returns.
func TestQueuedMessagesAreDroppedByTheirOwner(t *testing.T) {
	for name, stop := range map[string]func(*exec.Executor){
		"close":            func(e *exec.Executor) { e.Close(sdk.ErrClosed) },
		"drop application": func(e *exec.Executor) { e.DropApplication(sdk.ErrClosed) },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := exec.DefaultConfig()
			e := exec.New(&cfg, nil)
			var ran, dropped []int64
			var mu sync.Mutex
			e.SetOwner(owner{
				runMessage: func(m exec.Message) { mu.Lock(); ran = append(ran, seqOf(m)); mu.Unlock() },
				dropMessage: func(m exec.Message, err error) {
					assert.ErrorIs(t, err, sdk.ErrClosed)
					assert.Equal(t, seqOf(m) == 1, m.Reserved, "its permit's kind is kept")
					mu.Lock()
					dropped = append(dropped, seqOf(m))
					mu.Unlock()
				},
			})
			b := newBlocker()
			require.NoError(t, e.Submit(app(0), b))
			<-b.started
			for i := range int64(3) {
				m := msg(i)
				m.Reserved = i == 1
				require.NoError(t, e.SubmitMessage(app(0), m))
			}
			stop(e)
			close(b.release)
			waitQuiescent(t, e)
			mu.Lock()
			defer mu.Unlock()
			assert.Empty(t, ran)
			assert.Equal(t, []int64{0, 1, 2}, dropped)
			assert.Equal(t, exec.Stats{}, e.Stats())
		})
	}
}

// TestAMessageThatPanicsIsContained: a panic of the owner's RunMessage is told to Panicked,
// the reservation returns and the executor serves on.
func TestAMessageThatPanicsIsContained(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	var panics atomic.Int32
	var ran atomic.Int64
	e.SetOwner(owner{
		runMessage: func(m exec.Message) {
			if ran.Add(1) == 1 {
				panic("boom")
			}
		},
		panicked: func(v any, _ []byte) { assert.Equal(t, "boom", v); panics.Add(1) },
	})
	require.NoError(t, e.SubmitMessage(app(100), msg(1)))
	require.NoError(t, e.SubmitMessage(app(100), msg(2)))
	waitQuiescent(t, e)
	assert.Equal(t, int64(2), ran.Load())
	assert.Equal(t, int32(1), panics.Load())
	assert.Equal(t, exec.Stats{}, e.Stats())
}

// TestWrongSubmissionsAreRefusedAndAdmitNothing: a message with no owner to run it, a message
// asked to run inline and nil work are refused with errors that say so.
func TestWrongSubmissionsAreRefusedAndAdmitNothing(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	require.ErrorIs(t, e.SubmitMessage(app(0), msg(1)), exec.ErrNoOwner)
	e.SetOwner(owner{})
	err := e.SubmitMessage(exec.Item{Lane: sdk.LaneApplication, Inline: true}, msg(1))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "never run inline")
	err = e.Submit(app(0), nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "nil work")
	noMethod := msg(1)
	noMethod.Method = nil
	err = e.SubmitMessage(app(0), noMethod)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "without a method")
	for _, payload := range []int64{-1, 1 << 56, math.MaxInt64} {
		err = e.Submit(app(payload), fn{})
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, "payload %d", payload)
		assert.Contains(t, err.Error(), fmt.Sprintf("payload size %d is outside", payload))
	}
	assert.Equal(t, exec.Stats{}, e.Stats())
	assert.True(t, e.Quiescent())
}

func TestOwnerIsToldOnTheRunnerAroundQueuedWork(t *testing.T) {
	cfg := exec.DefaultConfig()
	e, release := occupied(t, cfg)
	// The owner and the items share state without a lock: it is told on the runner, after
	// the items and before anything admitted later.
	var log []string
	ends := make(chan int, 4)
	e.SetOwner(owner{
		beforeItem: func() { log = append(log, "before") },
		runEnd: func() {
			log = append(log, "end")
			ends <- len(log)
		},
	})
	for _, name := range []string{"a", "b"} {
		require.NoError(t, e.Submit(app(0), fn{run: func() { log = append(log, name) }}))
	}
	release()
	require.Equal(t, 5, wait.For(t, ends), "the run of a, b ends once, after both")
	waitQuiescent(t, e)

	// A later run ends again; an inline run, which runs on its caller, tells the owner nothing.
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication, Inline: true}, fn{run: func() { log = append(log, "inline") }}))
	require.NoError(t, e.Submit(app(0), fn{run: func() { log = append(log, "c") }}))
	require.Equal(t, 9, wait.For(t, ends))
	waitQuiescent(t, e)
	assert.Equal(t, []string{"before", "a", "before", "b", "end", "inline", "before", "c", "end"}, log)
}

func TestWorkAdmittedDuringRunEndRunsAfterIt(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	var order []string
	var once sync.Once
	done := make(chan struct{})
	e.SetOwner(owner{runEnd: func() {
		order = append(order, "end")
		once.Do(func() {
			// Admitted while the runner is in RunEnd: the executor is not idle yet, so
			// this runs on the same runner, and RunEnd is told again after it.
			assert.NoError(t, e.Submit(app(0), fn{run: func() { order = append(order, "late") }}))
			assert.False(t, e.Quiescent())
		})
		if len(order) == 4 {
			close(done)
		}
	}})
	require.NoError(t, e.Submit(app(0), fn{run: func() { order = append(order, "first") }}))
	wait.For(t, done) // RunEnd was told after the late work
	waitQuiescent(t, e)
	assert.Equal(t, []string{"first", "end", "late", "end"}, order)
}

// A run of work takes a ring as large as the last run needed, and the runs after a burst
// halve it back to the least size, so that a busy lane does not regrow its ring from four
// entries at every run and one burst does not keep a large ring in use for good.
func TestARunStartsWithTheRingTheLastRunNeeded(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	// run queues a gate and behind it queued more items, and returns the ring's size while
	// the gate runs: the ring the run took, and grew to hold them all.
	run := func(queued int) int {
		b := newBlocker()
		require.NoError(t, e.Submit(app(0), b))
		<-b.started
		for range queued {
			require.NoError(t, e.Submit(app(0), fn{}))
		}
		size := e.ApplicationRingSize()
		close(b.release)
		waitQuiescent(t, e)
		assert.Zero(t, e.ApplicationRingSize(), "an idle lane keeps no ring")
		return size
	}
	assert.Equal(t, 64, run(40), "a burst of 40 grows the ring to 64")
	var sizes []int
	for range 6 {
		sizes = append(sizes, run(0))
	}
	assert.Equal(t, []int{64, 32, 16, 8, 4, 4}, sizes, "the next run starts at 64, and the quiet runs after it halve it")
	assert.Equal(t, 32, run(20), "a run that needs more grows it as before")
	assert.Equal(t, 1024, run(1000), "a burst of 1000 grows it to 1024")
	assert.Equal(t, 64, run(0), "the run after a large burst starts at 64 entries, no more")
}

// TestE2_AnItemThatEndsItsGoroutineStillReturnsItsReservation: a Run that ends its goroutine
// with runtime.Goexit (t.FailNow or require in a handler under test) is no panic that runItem
// could recover, yet its item completes: Panicked is told, its reservation returns and the work
// queued after it runs, on the runner and after an inline run alike. RunEnd is told once the
// run of work ends.
func TestE2_AnItemThatEndsItsGoroutineStillReturnsItsReservation(t *testing.T) {
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, nil)
	var exits, runEnds atomic.Int32
	e.SetOwner(owner{
		panicked: func(v any, _ []byte) { assert.Equal(t, exec.ErrExited, v); exits.Add(1) },
		runEnd:   func() { runEnds.Add(1) },
	})
	gate := make(chan struct{})
	require.NoError(t, e.Submit(app(0), fn{run: func() { <-gate; runtime.Goexit() }}))
	ran := make(chan struct{})
	require.NoError(t, e.Submit(app(0), fn{run: func() { close(ran) }}))
	close(gate)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		e.Close(nil) // drops the queued item, so that the test ends
		require.Fail(t, "the item queued after the one that exited never runs", "%+v", e.Stats())
	}
	waitQuiescent(t, e)
	assert.Equal(t, int32(1), exits.Load())
	assert.Equal(t, int32(1), runEnds.Load())
	assert.Equal(t, exec.Stats{}, e.Stats())

	// Inline, on the caller's goroutine, which ends with it; the work queued meanwhile runs.
	inline := exec.Item{Lane: sdk.LaneApplication, Inline: true}
	queued := make(chan struct{})
	ranAfter := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Submit(inline, fn{run: func() {
			assert.NoError(t, e.Submit(app(0), fn{run: func() { close(ranAfter) }}))
			close(queued)
			runtime.Goexit()
		}})
	}()
	<-done
	<-queued
	select {
	case <-ranAfter:
	case <-time.After(5 * time.Second):
		e.Close(nil)
		require.Fail(t, "the item queued during the inline one that exited never runs", "%+v", e.Stats())
	}
	waitQuiescent(t, e)
	assert.Equal(t, int32(2), exits.Load())
	assert.Equal(t, exec.Stats{}, e.Stats())
}
