package capacity_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ptr(v uint64) *uint64 { return &v }

const mib = 1 << 20

func TestI4_ResolveTheBudgetFromTheProfileAndTheMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	maxMsg := 4 * mib
	cases := []struct {
		name string
		opts sdk.InboundDispatchOptions
		want int64
	}{
		{"explicit budget", sdk.InboundDispatchOptions{CoreHwmBudgetBytes: ptr(100 * mib)}, 100 * mib},
		{"balanced, memory limit", sdk.InboundDispatchOptions{CoreHwmMemoryLimitBytes: ptr(1 << 30)}, 256 * mib},
		{"throughput, memory limit", sdk.InboundDispatchOptions{CoreHwmMemoryLimitBytes: ptr(1 << 30), CoreHwmProfile: sdk.CoreHwmProfileThroughput}, 512 * mib},
		{"low memory, memory limit", sdk.InboundDispatchOptions{CoreHwmMemoryLimitBytes: ptr(1 << 30), CoreHwmProfile: sdk.CoreHwmProfileLowMemory}, 128 * mib},
		{"balanced, no limit", sdk.InboundDispatchOptions{}, 256 * mib},
		{"throughput, no limit", sdk.InboundDispatchOptions{CoreHwmProfile: sdk.CoreHwmProfileThroughput}, 1 << 30},
		{"low memory, no limit", sdk.InboundDispatchOptions{CoreHwmProfile: sdk.CoreHwmProfileLowMemory}, 64 * mib},
		{"a small limit is raised to two messages", sdk.InboundDispatchOptions{CoreHwmMemoryLimitBytes: ptr(8 * mib)}, 2 * capacity.Request(maxMsg)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := capacity.Resolve(tc.opts, maxMsg)
			require.NoError(t, err)
			assert.Equal(t, tc.want, s.Budget)
		})
	}

	t.Run("GOMEMLIMIT", func(t *testing.T) {
		debug.SetMemoryLimit(2 << 30)
		s, err := capacity.Resolve(sdk.InboundDispatchOptions{}, maxMsg)
		require.NoError(t, err)
		assert.Equal(t, int64(512*mib), s.Budget, "a quarter of GOMEMLIMIT")
		assert.Equal(t, uint64(2<<30), s.MemoryLimit)
	})
}

func TestJ3_ResolveTheJobQueue(t *testing.T) {
	s, err := capacity.Resolve(sdk.InboundDispatchOptions{}, mib)
	require.NoError(t, err)
	assert.Equal(t, runtime.GOMAXPROCS(0), s.Processors)
	assert.Equal(t, max(int64(4096), 1024*int64(s.Processors)), s.MaxJobs)
	assert.Equal(t, uint32(90), s.PausePercent)
	assert.Equal(t, uint32(70), s.ResumePercent)
	assert.Equal(t, (s.MaxJobs*90+99)/100, s.PauseAt)
	assert.Equal(t, s.MaxJobs*70/100, s.ResumeAt)

	s, err = capacity.Resolve(sdk.InboundDispatchOptions{
		ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: ptr(10),
		ApplicationJobQueuePauseThresholdPercent: 80, ApplicationJobQueueResumeThresholdPercent: 50,
	}, mib)
	require.NoError(t, err)
	assert.Equal(t, []int64{10, 8, 5}, []int64{s.MaxJobs, s.PauseAt, s.ResumeAt})
}

// TestI4_OptionsValidateEveryProblemAtOnce: each problem is named, all in one error.
func TestI4_OptionsValidateEveryProblemAtOnce(t *testing.T) {
	_, err := capacity.Resolve(sdk.InboundDispatchOptions{
		CoreHwmBudgetBytes:                        ptr(1000),
		CoreHwmMemoryLimitBytes:                   ptr(500),
		ApplicationJobQueueProfile:                sdk.ApplicationJobQueueProfileManual,
		ApplicationJobQueuePauseThresholdPercent:  120,
		ApplicationJobQueueResumeThresholdPercent: 101,
	}, mib)
	require.ErrorIs(t, err, sdk.ErrConfig)
	for _, want := range []string{
		"cannot admit one message of the largest size",
		"CoreHwmBudgetBytes 1000 is over CoreHwmMemoryLimitBytes 500",
		"Manual application job queue profile needs MaxQueuedApplicationJobs",
		"pause threshold 120% is over 100%",
		"resume threshold 101% is over 100%",
	} {
		assert.Contains(t, err.Error(), want)
	}

	for name, o := range map[string]sdk.InboundDispatchOptions{
		"MaxQueuedApplicationJobs is set but the application job queue profile is Auto": {MaxQueuedApplicationJobs: ptr(5)},
		"MaxQueuedApplicationJobs is 0":             {ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: ptr(0)},
		"CoreHwmMemoryLimitBytes is 0":              {CoreHwmMemoryLimitBytes: ptr(0)},
		"not below the default pause threshold 90%": {ApplicationJobQueueResumeThresholdPercent: 95},
		"unknown Core HWM profile":                  {CoreHwmProfile: 9},
	} {
		_, err := capacity.Resolve(o, mib)
		require.ErrorIs(t, err, sdk.ErrConfig, name)
		assert.Contains(t, err.Error(), name)
	}
}

func newMeter(t *testing.T, o sdk.InboundDispatchOptions, maxMsg int) *capacity.Meter {
	t.Helper()
	s, err := capacity.Resolve(o, maxMsg)
	require.NoError(t, err)
	return capacity.New(s)
}

func TestE1_CoreHwmChargesAndRefusesBeyondTheBudget(t *testing.T) {
	m := newMeter(t, sdk.InboundDispatchOptions{CoreHwmBudgetBytes: ptr(10_000)}, 1000)
	one := capacity.Request(1000) // 1,256 bytes
	n := 0
	for m.Charge(one) {
		n++
	}
	assert.Equal(t, 7, n, "10,000 / 1,256 requests fit")
	st := m.Status(0, exec.DefaultConfig()).CoreHwm
	assert.Equal(t, uint64(7*one), st.CurrentAccountedBytes)
	assert.Equal(t, uint64(7*one), st.ProvisionalAccountedBytes, "none is in a lane yet")
	assert.Equal(t, uint64(10_000), st.EffectiveBudgetBytes)

	m.InLane(one)
	st = m.Status(0, exec.DefaultConfig()).CoreHwm
	assert.Equal(t, uint64(6*one), st.ProvisionalAccountedBytes)

	// Queued replies are counted, but against their streams' shares, not the budget.
	m.Release(2 * one)
	m.Queued(one, true)
	assert.True(t, m.Charge(one))
	assert.True(t, m.Charge(one), "a queued reply does not take a request's room")
	assert.False(t, m.Charge(one))
	st = m.Status(0, exec.DefaultConfig()).CoreHwm
	assert.Equal(t, uint64(one), st.CompletionCurrentAccountedBytes)
	assert.Equal(t, uint64(1), st.CompletionPendingMessageCount)
	assert.Equal(t, uint64(8*one), st.TotalMessagingAccountedBytes)
	assert.Equal(t, uint64(8*one), st.PeakAccountedBytes)
	m.Queued(-one, true)
	st = m.Status(0, exec.DefaultConfig()).CoreHwm
	assert.Zero(t, st.CompletionCurrentAccountedBytes)
	assert.Zero(t, st.CompletionPendingMessageCount)
}

func TestE1_ABatchLeavingASendQueueIsCountedAsItsEnvelopes(t *testing.T) {
	m := newMeter(t, sdk.InboundDispatchOptions{CoreHwmBudgetBytes: ptr(10_000)}, 1000)
	for _, n := range []int64{100, 200, 300} {
		m.Queued(n, true)
	}
	m.Queued(50, false)
	m.Left(300, 2, true) // the first two replies were taken in one batch
	m.Left(0, 0, true)   // an empty batch changes nothing
	st := m.Status(0, exec.DefaultConfig()).CoreHwm
	assert.Equal(t, uint64(300), st.CompletionCurrentAccountedBytes)
	assert.Equal(t, uint64(1), st.CompletionPendingMessageCount)
	assert.Equal(t, uint64(350), st.CoreQueueAccountedBytes)
	m.Left(50, 1, false) // a request: not a completion
	m.Left(300, 1, true)
	st = m.Status(0, exec.DefaultConfig()).CoreHwm
	assert.Zero(t, st.CompletionCurrentAccountedBytes)
	assert.Zero(t, st.CompletionPendingMessageCount)
	assert.Zero(t, st.CoreQueueAccountedBytes)
}

func TestE1_TheFirstRequestIsAdmittedWhateverItsSize(t *testing.T) {
	m := newMeter(t, sdk.InboundDispatchOptions{CoreHwmBudgetBytes: ptr(2000)}, 1000)
	assert.True(t, m.Charge(5000), "nothing is held: one message always gets through")
	assert.False(t, m.Charge(1))
}

func TestE1_WaitRoomReturnsWhenBytesReturn(t *testing.T) {
	m := newMeter(t, sdk.InboundDispatchOptions{CoreHwmBudgetBytes: ptr(2000)}, 1000)
	require.True(t, m.Charge(2000))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.WaitRoom(ctx, 500), context.DeadlineExceeded, "no bytes returned")

	done := make(chan error, 1)
	go func() { done <- m.WaitRoom(context.Background(), 500) }()
	time.Sleep(10 * time.Millisecond)
	m.Release(500)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRoom did not return after bytes returned")
	}
	assert.Positive(t, m.Status(0, exec.DefaultConfig()).CoreHwm.BlockedRatioPpm, "the reader was blocked for part of the epoch")
}

func manual(maxJobs uint64, pause, resume uint32) sdk.InboundDispatchOptions {
	return sdk.InboundDispatchOptions{
		ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: ptr(maxJobs),
		ApplicationJobQueuePauseThresholdPercent: pause, ApplicationJobQueueResumeThresholdPercent: resume,
	}
}

func notNested(context.Context) bool { return false }
func nested(context.Context) bool    { return true }

func TestJ3_PauseAndResumeThresholds(t *testing.T) {
	m := newMeter(t, manual(10, 80, 50), mib) // pause at 8 permits, resume at 5
	ctx := context.Background()
	jobs := func() sdk.ApplicationJobQueueStatus { return m.Status(0, exec.DefaultConfig()).ApplicationJobQueue }

	for range 7 {
		_, err := m.Acquire(ctx, notNested)
		require.NoError(t, err)
	}
	assert.False(t, m.Paused(), "7 permits are below the pause threshold of 8")
	assert.Equal(t, sdk.ApplicationJobQueuePressureStateNormal, jobs().PressureState)

	_, err := m.Acquire(ctx, notNested)
	require.NoError(t, err)
	assert.True(t, m.Paused(), "the 8th permit reaches the pause threshold")
	<-m.Changed()
	assert.Equal(t, sdk.ApplicationJobQueuePressureStatePaused, jobs().PressureState)

	// Intake waits while paused.
	intake := make(chan error, 1)
	go func() { intake <- m.WaitIntake(ctx) }()

	for range 2 {
		m.Return(false)
	}
	assert.True(t, m.Paused(), "6 permits: still above the resume threshold of 5")
	select {
	case <-intake:
		t.Fatal("intake resumed above the resume threshold")
	case <-time.After(20 * time.Millisecond):
	}
	time.Sleep(5 * time.Millisecond)
	assert.Positive(t, jobs().CurrentPauseDuration)

	m.Return(false)
	assert.False(t, m.Paused(), "5 permits: the resume threshold")
	select {
	case err := <-intake:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("intake did not resume at the resume threshold")
	}
	<-m.Changed()
	st := jobs()
	assert.Equal(t, sdk.ApplicationJobQueuePressureStateNormal, st.PressureState)
	assert.Zero(t, st.CurrentPauseDuration)
	assert.Equal(t, uint64(5), st.PermitsInUse)
	assert.Equal(t, uint64(8), st.PeakPermitsInUse)
	assert.Equal(t, []uint64{10, 8, 5}, []uint64{st.EffectiveMaxQueuedApplicationJobs, st.PausePermitCount, st.ResumePermitCount})
	assert.Equal(t, uint32(80), st.ConfiguredPauseThresholdPercent)
	require.NotNil(t, st.ConfiguredManualMax)
	assert.Equal(t, uint64(10), *st.ConfiguredManualMax)

	// Up again to 7 does not pause: the state changes only at the thresholds.
	for range 2 {
		_, err := m.Acquire(ctx, notNested)
		require.NoError(t, err)
	}
	assert.False(t, m.Paused())
}

func TestJ3_AFullQueueMakesCallersWaitThenFailsWithScheduler(t *testing.T) {
	m := newMeter(t, manual(2, 0, 0), mib)
	for range 2 {
		_, err := m.Acquire(context.Background(), notNested)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := m.Acquire(ctx, notNested)
	require.ErrorIs(t, err, sdk.ErrCapacityExceeded)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var ce *sdk.CapacityError
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, sdk.CapacityScheduler, ce.Where)
	assert.Equal(t, int64(2), ce.Limit)
	assert.NotErrorIs(t, err, sdk.ErrQueueFull)

	// A waiter gets the permit that returns.
	got := make(chan error, 1)
	go func() {
		_, err := m.Acquire(context.Background(), notNested)
		got <- err
	}()
	require.Eventually(t, func() bool {
		return m.Status(0, exec.DefaultConfig()).ApplicationJobQueue.CapacityWaiters == 1
	}, 5*time.Second, time.Millisecond)
	m.Return(false)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the returned permit")
	}
	st := m.Status(0, exec.DefaultConfig()).ApplicationJobQueue
	assert.Equal(t, uint64(2), st.CapacityWaitCount)
	assert.Positive(t, st.CapacityWaitDuration)
	assert.Zero(t, st.CapacityWaiters)
}

func TestJ3_PermitsReturnedTogetherWakeAWaiterEach(t *testing.T) {
	m := newMeter(t, manual(3, 0, 0), mib)
	for range 3 {
		_, err := m.Acquire(context.Background(), notNested)
		require.NoError(t, err)
	}
	got := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := m.Acquire(context.Background(), notNested)
			got <- err
		}()
	}
	require.Eventually(t, func() bool { return m.QueuedJobWaiters() == 3 }, 5*time.Second, time.Millisecond)

	m.ReturnMany(2)
	for range 2 {
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("two permits returned together did not reach two waiters")
		}
	}
	select {
	case err := <-got:
		t.Fatalf("a third waiter got a permit that was not returned: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	st := m.Status(0, exec.DefaultConfig()).ApplicationJobQueue
	assert.Equal(t, uint64(3), st.PermitsInUse)
	assert.Equal(t, uint64(1), st.CapacityWaiters)

	m.ReturnMany(0) // nothing to return: nobody is woken
	m.ReturnMany(3) // more than wait: the rest stay free
	require.NoError(t, <-got)
	st = m.Status(0, exec.DefaultConfig()).ApplicationJobQueue
	assert.Equal(t, uint64(1), st.PermitsInUse, "the third waiter's")
	assert.Zero(t, st.CapacityWaiters)
	m.ReturnMany(1)
	assert.Zero(t, m.Status(0, exec.DefaultConfig()).ApplicationJobQueue.PermitsInUse)
}

func TestJ3_AWaitingJobHasHeldPermitsReclaimed(t *testing.T) {
	m := newMeter(t, manual(1, 0, 0), mib)
	_, err := m.Acquire(context.Background(), notNested)
	require.NoError(t, err)
	var reclaims atomic.Int64
	m.SetReclaim(func() {
		if reclaims.Add(1) == 3 {
			m.ReturnMany(1) // the third reclaim finds a permit held back
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = m.Acquire(ctx, notNested)
	require.NoError(t, err, "the waiter has the meter reclaim every millisecond until a permit returns")
	assert.GreaterOrEqual(t, reclaims.Load(), int64(3))
	m.Return(false)
}

func TestJ3_AReaderWaitingForIntakeHasHeldPermitsReclaimed(t *testing.T) {
	m := newMeter(t, manual(10, 80, 50), mib) // pause at 8 permits, resume at 5
	ctx := context.Background()
	for range 8 {
		_, err := m.Acquire(ctx, notNested)
		require.NoError(t, err)
	}
	require.True(t, m.Paused())
	var reclaims atomic.Int64
	m.SetReclaim(func() {
		if reclaims.Add(1) == 2 {
			m.ReturnMany(3) // held back by runners whose handlers block
		}
	})
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, m.WaitIntake(c), "intake resumes once the held permits are reclaimed")
	assert.False(t, m.Paused())
	for range 5 {
		m.Return(false)
	}
}

func TestJ3_HeldPermitsAreReclaimedAtMostOnceAMillisecond(t *testing.T) {
	m := newMeter(t, manual(1, 0, 0), mib)
	_, err := m.Acquire(context.Background(), notNested)
	require.NoError(t, err)
	var reclaims atomic.Int64
	m.SetReclaim(func() { reclaims.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	var waiters sync.WaitGroup
	began := time.Now()
	for range 50 {
		waiters.Go(func() {
			_, err := m.Acquire(ctx, notNested)
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	waiters.Wait()
	// 50 waiters, each of which reclaims when it starts to wait and whichever polls every
	// millisecond after: the node reclaims at most once a millisecond.
	assert.LessOrEqual(t, reclaims.Load(), time.Since(began).Milliseconds()+1)
	assert.Positive(t, reclaims.Load())
	m.Return(false)
}

func TestJ3_TheWaiterThatPollsHandsPollingOnWhenItLeaves(t *testing.T) {
	m := newMeter(t, manual(1, 0, 0), mib)
	_, err := m.Acquire(context.Background(), notNested)
	require.NoError(t, err)
	var reclaims atomic.Int64
	var firstLeft atomic.Bool
	m.SetReclaim(func() {
		reclaims.Add(1)
		if firstLeft.CompareAndSwap(true, false) {
			m.ReturnMany(1) // a permit held back, found only after the first waiter left
		}
	})
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := m.Acquire(first, notNested)
		firstDone <- err
	}()
	// The first waiter alone polls.
	require.Eventually(t, func() bool { return reclaims.Load() >= 3 }, 5*time.Second, time.Millisecond)
	secondDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := m.Acquire(ctx, notNested)
		secondDone <- err
	}()
	require.Eventually(t, func() bool { return m.QueuedJobWaiters() == 2 }, 5*time.Second, time.Millisecond)
	cancelFirst()
	require.ErrorIs(t, <-firstDone, context.Canceled)
	firstLeft.Store(true)
	require.NoError(t, <-secondDone, "the second waiter polls once the first has left, and gets the reclaimed permit")
	m.Return(false)
}

func TestJ3_NestedJobsTakeReservedPermitsInsteadOfWaiting(t *testing.T) {
	m := newMeter(t, manual(1, 0, 0), mib)
	_, err := m.Acquire(context.Background(), notNested)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	reserved, err := m.Acquire(ctx, nested)
	require.NoError(t, err, "a job made by a running job does not wait for the permit its caller holds")
	assert.True(t, reserved)
	st := m.Status(0, exec.DefaultConfig()).ApplicationJobQueue
	assert.Equal(t, uint64(1), st.ReservedSupplyPermits)
	assert.Equal(t, uint64(2), st.PermitsInUse)
	m.Return(true)
	m.Return(false)
	st = m.Status(0, exec.DefaultConfig()).ApplicationJobQueue
	assert.Zero(t, st.ReservedSupplyPermits)
	assert.Zero(t, st.PermitsInUse)
}

// TestJ2_ResetStartsANewEpoch: peaks and totals restart from the current values.
func TestJ2_ResetStartsANewEpoch(t *testing.T) {
	m := newMeter(t, sdk.InboundDispatchOptions{CoreHwmBudgetBytes: ptr(10_000)}, 1000)
	require.True(t, m.Charge(4000))
	m.Release(3000)
	st := m.Status(0, exec.DefaultConfig())
	assert.Equal(t, uint64(1), st.MeasurementEpoch)
	assert.Equal(t, uint64(4000), st.CoreHwm.PeakAccountedBytes)

	m.Reset()
	st = m.Status(0, exec.DefaultConfig())
	assert.Equal(t, uint64(2), st.MeasurementEpoch)
	assert.Equal(t, uint64(1000), st.CoreHwm.PeakAccountedBytes, "the peak restarts from the current value")
	assert.Equal(t, uint64(1000), st.CoreHwm.CurrentAccountedBytes, "current values are untouched")
}

// TestJ2_ReservedFieldsStayZeroAndLanesAreMeasured covers the fields that come from the lanes
// and the four reserved ones.
func TestJ2_ReservedFieldsStayZeroAndLanesAreMeasured(t *testing.T) {
	m := newMeter(t, sdk.InboundDispatchOptions{}, mib)
	cfg := exec.DefaultConfig()
	e := exec.New(&cfg, m.Lanes())
	block, started := make(chan struct{}), make(chan struct{})
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication, Payload: 100}, work(func() { close(started); <-block })))
	<-started
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneApplication, Payload: 200}, work(func() {})))
	require.NoError(t, e.Submit(exec.Item{Lane: sdk.LaneLifecycle, Payload: 50, AfterApplication: true}, work(func() {})))
	st := m.Status(3, cfg)
	c := st.CoreHwm
	assert.Equal(t, uint64(100+200+2*exec.ItemOverhead), c.TotalInstanceAccountedBytes)
	assert.Equal(t, uint64(50+exec.ItemOverhead), c.MonitorQueueAccountedBytes)
	assert.Equal(t, uint64(3*cfg.Application.Bytes), c.TotalInstanceAppliedHwmBytes)
	assert.Equal(t, uint64(3*cfg.Lifecycle.Bytes), c.MonitorQueueAppliedHwmBytes)
	assert.Equal(t, c.EffectiveBudgetBytes+c.TotalInstanceAppliedHwmBytes+c.MonitorQueueAppliedHwmBytes, c.TotalAppliedHwmBytes)
	assert.Equal(t, uint64(1), st.ApplicationJobQueue.QueuedApplicationJobs, "one application item waits behind the one running")
	assert.Zero(t, c.ApplicationAccountedBytes)
	assert.Zero(t, c.OutstandingApplicationLeaseCount)
	assert.Zero(t, c.RetiredQueueCount)
	assert.Zero(t, c.DeferredOriginCreditBytes)
	close(block)
	require.Eventually(t, func() bool { return e.Quiescent() }, 5*time.Second, time.Millisecond)
	c = m.Status(3, cfg).CoreHwm
	assert.Zero(t, c.TotalInstanceAccountedBytes)
	assert.Zero(t, c.MonitorQueueAccountedBytes)
	assert.Zero(t, m.Status(3, cfg).ApplicationJobQueue.QueuedApplicationJobs)
}

type work func()

func (w work) Run()       { w() }
func (w work) Drop(error) {}

func TestNilMeterAdmitsEverything(t *testing.T) {
	var m *capacity.Meter
	assert.True(t, m.Charge(1<<40))
	reserved, err := m.Acquire(context.Background(), notNested)
	require.NoError(t, err)
	assert.False(t, reserved)
	m.Return(false)
	m.Release(1)
	require.NoError(t, m.WaitRoom(context.Background(), 500))
	require.NoError(t, m.WaitIntake(context.Background()))
	assert.Equal(t, sdk.HostCapacityStatus{}, m.Status(1, exec.DefaultConfig()))
}
