package harness

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

func TestProbeStallsSpinsEveryProcessorForItsWindow(t *testing.T) {
	begin := time.Now()
	s := ProbeStalls(50 * time.Millisecond)
	require.GreaterOrEqual(t, time.Since(begin), 50*time.Millisecond)
	assert.Equal(t, runtime.GOMAXPROCS(0), s.Threads)
	assert.LessOrEqual(t, s.Longest, s.Total)
	assert.Equal(t, s.Gaps == 0, s.Total == 0)
	assert.Contains(t, s.String(), "spinning on each of the")
}

func TestSpinCountsTheGapsInWhichTheThreadDidNotRun(t *testing.T) {
	// Readings every 100 µs, but for gaps of 4 ms, of 1 ms and of 3.5 ms (the last, which
	// ends the window), and one just under 1 ms, which is not a stall.
	readings := []time.Duration{100, 200, 4200, 4300, 5300, 5400, 6399, 6500, 10_000}
	i := 0
	clock := func() time.Duration {
		r := readings[i] * time.Microsecond
		i++
		return r
	}
	s := spin(10*time.Millisecond, clock)
	assert.Equal(t, len(readings), i, "it reads until the window has passed")
	assert.Equal(t, 3, s.Gaps)
	assert.Equal(t, 4*time.Millisecond, s.Longest)
	assert.Equal(t, 8500*time.Microsecond, s.Total)
}

func TestParseCPULineReadsStealAndTotal(t *testing.T) {
	ct, ok := parseCPULine("cpu  659705 604 121575 1189978 5111 0 10308 26747 5 7")
	require.True(t, ok)
	assert.Equal(t, uint64(26747), ct.Steal)
	assert.Equal(t, uint64(659705+604+121575+1189978+5111+0+10308+26747), ct.Total)

	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		_, ok := parseCPULine(bad)
		assert.False(t, ok, "%q", bad)
	}
}

func TestStealShare(t *testing.T) {
	share, ok := StealShare(CPUTimes{Total: 1000, Steal: 10}, CPUTimes{Total: 3000, Steal: 30})
	require.True(t, ok)
	assert.InDelta(t, 0.01, share, 1e-9)
	_, ok = StealShare(CPUTimes{Total: 1000}, CPUTimes{Total: 1000})
	assert.False(t, ok, "no time passed")
}

func TestResultsNameTheMachinesStallsAndStealWhenMeasured(t *testing.T) {
	steal := 0.0123
	r := Report{Rounds: 1, Params: workload.Defaults,
		Stalls: &Stalls{Threads: 2, Window: 2 * time.Second, Gaps: 7, Longest: 4100 * time.Microsecond, Total: 21 * time.Millisecond},
		Steal:  &steal}
	md := r.Markdown()
	assert.Contains(t, md, "- Stalls: a thread spinning on each of the 2 processors for 2s was off its processor for 1ms or more 7 times (21ms in all, the longest 4.1ms), before the runs")
	assert.Contains(t, md, "- Steal: the hypervisor gave 1.23% of this machine's processor time")

	md = Report{Rounds: 1, Params: workload.Defaults}.Markdown()
	assert.NotContains(t, md, "- Stalls:")
	assert.NotContains(t, md, "- Steal:")
}
