package workload

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestForCountRunsEveryOperationOnce(t *testing.T) {
	seen := make([]atomic.Int32, 1001)
	res, err := ForCount(context.Background(), 8, 1000, func(_ int, seq int64) error {
		seen[seq].Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 1000 {
		t.Fatalf("ops %d, want 1000", res.Ops)
	}
	for i := 1; i <= 1000; i++ {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("seq %d ran %d times", i, n)
		}
	}
}

func TestForDurationStopsOnTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	_, err := ForDuration(context.Background(), 4, time.Millisecond, time.Minute, func(_ int, seq int64) error {
		if seq == 50 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

func TestForDurationMeasuresLatency(t *testing.T) {
	res, err := ForDuration(context.Background(), 2, 5*time.Millisecond, 30*time.Millisecond, func(int, int64) error {
		time.Sleep(100 * time.Microsecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops == 0 || res.Latency == nil || res.Latency.P50 < 100e3 || res.Latency.Max < res.Latency.P99 {
		t.Fatalf("implausible result %+v %+v", res, res.Latency)
	}
}

func TestForDurationWaitsForACallToComplete(t *testing.T) {
	// Every call takes longer than the window, as on a machine that stalls the process.
	res, err := ForDuration(context.Background(), 2, time.Millisecond, 5*time.Millisecond, func(int, int64) error {
		time.Sleep(200 * time.Millisecond)
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, res.Ops)
	require.GreaterOrEqual(t, res.Seconds, 0.1, "the window lasted until a call completed")
}

func TestSummarize(t *testing.T) {
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(1000-i) * time.Microsecond
	}
	l := Summarize(lat)
	if l.P50 != 501e3 || l.P99 != 991e3 || l.P999 != 1000e3 || l.Max != 1000e3 || l.Mean != 500.5e3 {
		t.Fatalf("summary %+v", l)
	}
	if Summarize(nil) != nil {
		t.Fatal("an empty summary is nil")
	}
}

func TestTinyParamsAreValid(t *testing.T) {
	for _, n := range All {
		if err := Tiny(n).Validate(); err != nil {
			t.Error(err)
		}
		if err := Defaults(n).Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestChunkKeepsSixtyFourCallersAsTheyWere(t *testing.T) {
	require.Equal(t, 1<<16, chunkFor(1))
	require.Equal(t, 1<<16, chunkFor(64))
	require.Equal(t, 1<<12, chunkFor(1024))
	require.Equal(t, 1<<12, chunkFor(100_000))
}

func TestWhatEachWorkloadNeeds(t *testing.T) {
	for _, n := range All {
		require.Equal(t, n == RemoteCall1 || n == RemoteCall64 || n == RemoteColdActivation, n.Remote(), n)
		require.Equal(t, n == RemoteColdActivation, n.RemoteGrains(), n)
		require.Equal(t, n == IdleFootprint || n == Memory100k, n.Memory(), n)
	}
	require.Equal(t, 1024, Defaults(Steady10k1024).Callers)
	require.Equal(t, 10_000, Defaults(Steady10k1024).Objects)
	require.Equal(t, 100_000, Defaults(Memory100k).Objects)
	require.Error(t, Params{Workload: IdleFootprint, Callers: 64, Timeout: time.Second}.Validate())
	require.Error(t, Params{Workload: "nope", Callers: 1, Timeout: time.Second}.Validate())
}

// TestMeasureMemorySeesWhatIsHeld holds 10,000 objects of 1 KiB between the two readings.
func TestMeasureMemorySeesWhatIsHeld(t *testing.T) {
	before := MarkHeap()
	held := make([][]byte, 10_000)
	for i := range held {
		held[i] = make([]byte, 1024)
	}
	m, err := MeasureMemory(before, len(held))
	require.NoError(t, err)
	runtime.KeepAlive(held)
	require.InDelta(t, 1024+24, m.LivePerObject, 64, "live bytes per object")
	require.GreaterOrEqual(t, m.InusePerObject, 1000.0)
	require.Greater(t, m.HeapInuse, float64(10<<20))
	require.Greater(t, m.Resident, m.HeapInuse/2)
	require.GreaterOrEqual(t, m.PeakResident, m.Resident)
}

func TestARunWithAFloorTakesAWindowForEachFloor(t *testing.T) {
	for _, n := range All {
		p := Defaults(n)
		want := 1
		switch n {
		case LocalCall1, LocalCall64, ChannelCall64:
			want = 2
		case RemoteCall1, RemoteCall64:
			want = 3 // the gRPC floor's window, then the TCP floor's
		}
		require.Equal(t, want > 1 || n == OneWay64, n.HasFloor(), n)
		require.Equal(t, want, p.Windows(), n, "the one-way floor is bound by its count, not a window")
		p.NoFloor = true
		require.Equal(t, 1, p.Windows(), "%s without its floor", n)
	}
}

// work keeps a processor busy for a fixed amount of work, whatever the wall time it takes.
func work() (sum uint64) {
	for i := range uint64(20_000_000) {
		sum += i * i
	}
	return sum
}

var sink atomic.Uint64

func TestTheDriversMeasureTheProcessorTimeOfTheirWindow(t *testing.T) {
	// Ten calls of the work before the window: what one call costs, and what a window that
	// began too early would hold.
	before := ProcessCPU()
	for range 10 {
		sink.Add(work())
	}
	ten := (ProcessCPU() - before).Seconds()
	require.Positive(t, ten)
	res, err := ForCount(context.Background(), 2, 2, func(int, int64) error {
		sink.Add(work())
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, res.CPUSeconds, ten/10, "two calls of the work took %.4fs, ten %.4fs", res.CPUSeconds, ten)
	require.Less(t, res.CPUSeconds, ten/2, "two calls of the work took %.4fs, ten %.4fs", res.CPUSeconds, ten)
	require.InDelta(t, res.CPUSeconds/2, res.CPUPerOp(), 1e-12)

	// ForDuration counts its measured window, not its warmup: the calls work during the
	// warmup and only sleep in the window.
	began := time.Now()
	total := StartCPUWindow()
	res, err = ForDuration(context.Background(), 1, 200*time.Millisecond, 50*time.Millisecond, func(int, int64) error {
		if time.Since(began) < 200*time.Millisecond {
			sink.Add(work())
		} else {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	require.NoError(t, err)
	spent := total.Seconds()
	require.Positive(t, res.CPUSeconds)
	require.Less(t, res.CPUSeconds, spent/2, "the window took %.4fs of the run's %.4fs", res.CPUSeconds, spent)
	require.Zero(t, Result{Ops: 5}.CPUPerOp())
}
