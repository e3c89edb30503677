package harness

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stalls is what a probe saw of the machine taking its processors away: one thread per
// processor reads the clock in a loop, and every gap between two readings of MinGap or more is
// a time in which that thread did not run, whoever ran instead (the kernel, another process,
// the hypervisor). A latency row's longest calls are such gaps when they fall on the thread
// that runs a turn everyone waits for.
type Stalls struct {
	Threads int
	Window  time.Duration
	// Gaps counts the gaps of MinGap or more, over all threads; Total is their sum.
	Gaps           int
	Longest, Total time.Duration
}

// MinGap is the shortest gap a stall probe counts.
const MinGap = time.Millisecond

// ProbeStalls spins one thread per processor (GOMAXPROCS) for window and reports the gaps. It
// keeps every processor busy meanwhile: run it when nothing else is measured.
func ProbeStalls(window time.Duration) Stalls {
	threads := runtime.GOMAXPROCS(0)
	res := make([]Stalls, threads)
	var wg sync.WaitGroup
	for i := range res {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			begin := time.Now()
			res[i] = spin(window, func() time.Duration { return time.Since(begin) })
		})
	}
	wg.Wait()
	all := Stalls{Threads: threads, Window: window}
	for _, s := range res {
		all.Gaps += s.Gaps
		all.Total += s.Total
		all.Longest = max(all.Longest, s.Longest)
	}
	return all
}

// spin reads the clock, which tells the time since the window began, until window has passed
// and returns the gaps it found.
func spin(window time.Duration, clock func() time.Duration) Stalls {
	var s Stalls
	prev := time.Duration(0)
	for prev < window {
		now := clock()
		if gap := now - prev; gap >= MinGap {
			s.Gaps++
			s.Total += gap
			s.Longest = max(s.Longest, gap)
		}
		prev = now
	}
	return s
}

// String is the one-line description.
func (s Stalls) String() string {
	return fmt.Sprintf("a thread spinning on each of the %d processors for %s was off its processor for %s or more %d times (%s in all, the longest %s)",
		s.Threads, s.Window, MinGap, s.Gaps, s.Total.Round(time.Millisecond), s.Longest.Round(10*time.Microsecond))
}

// CPUTimes are the machine's processor times since boot, from the first line of /proc/stat,
// in the kernel's clock ticks.
type CPUTimes struct {
	Total, Steal uint64
}

// ReadCPUTimes reads /proc/stat; ok is false where the system has none.
func ReadCPUTimes() (CPUTimes, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUTimes{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return CPUTimes{}, false
	}
	return parseCPULine(sc.Text())
}

// parseCPULine reads the "cpu" line of /proc/stat: user nice system idle iowait irq softirq
// steal ..., the eighth being the time the hypervisor ran something else while this machine
// wanted to run.
func parseCPULine(line string) (CPUTimes, bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return CPUTimes{}, false
	}
	var t CPUTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return CPUTimes{}, false
		}
		if i == 7 {
			t.Steal = n
		}
		if i < 8 { // guest times are counted in user and nice already
			t.Total += n
		}
	}
	return t, true
}

// StealShare is the share of the machine's processor time between a and b that its
// hypervisor gave to others; ok is false if no time passed.
func StealShare(a, b CPUTimes) (share float64, ok bool) {
	if b.Total <= a.Total || b.Steal < a.Steal {
		return 0, false
	}
	return float64(b.Steal-a.Steal) / float64(b.Total-a.Total), true
}
