package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Op is one operation of caller; seq numbers the operations of a run from 1. It returns an
// error when the call failed or answered wrongly.
type Op func(caller int, seq int64) error

// chunkFor is how many latencies each of callers records before it starts a new slice: 65,536
// up to 64 callers, fewer with more callers, so that 1,024 callers do not start with half a
// GiB of empty slices. The slices hold no pointers, so the garbage collector does not scan them.
func chunkFor(callers int) int {
	return min(1<<16, max(1<<12, (1<<22)/callers))
}

// ForDuration runs op on callers goroutines in a closed loop: each starts its next call when
// the previous one answered. It warms up for warmup, then measures for duration: the calls that
// complete in that window count, and their latencies are summarized. A window in which no call
// completed (the machine stalled the process throughout) goes on until one does, so that the
// run measures a rate rather than nothing. The first error stops the run; ctx bounds it.
func ForDuration(ctx context.Context, callers int, warmup, duration time.Duration, op Op) (Result, error) {
	var (
		seq       atomic.Int64
		measuring atomic.Bool
		completed atomic.Bool // a call completed in the window
		stop      atomic.Bool
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	lats := make([][][]time.Duration, callers)
	counts := make([]int64, callers)
	chunk := chunkFor(callers)
	failed := make(chan struct{})
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; close(failed) })
		stop.Store(true)
	}
	for c := range callers {
		wg.Go(func() {
			cur := make([]time.Duration, 0, chunk)
			defer func() { lats[c] = append(lats[c], cur) }()
			for !stop.Load() {
				if ctx.Err() != nil {
					fail(ctx.Err())
					return
				}
				start := time.Now()
				if err := op(c, seq.Add(1)); err != nil {
					fail(err)
					return
				}
				if measuring.Load() {
					if len(cur) == cap(cur) {
						lats[c] = append(lats[c], cur)
						cur = make([]time.Duration, 0, chunk)
					}
					cur = append(cur, time.Since(start))
					counts[c]++
					if !completed.Load() { // read first: the line is written once
						completed.Store(true)
					}
				}
			}
		})
	}
	sleep(ctx, failed, warmup)
	measuring.Store(true)
	begin, cpu := time.Now(), StartCPUWindow()
	sleep(ctx, failed, duration)
	for !completed.Load() && !stop.Load() && ctx.Err() == nil {
		sleep(ctx, failed, time.Millisecond)
	}
	measuring.Store(false)
	elapsed := time.Since(begin)
	used, procs := cpu.End()
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return Result{}, firstErr
	}
	var n int64
	var all []time.Duration
	for c := range callers {
		n += counts[c]
		for _, l := range lats[c] {
			all = append(all, l...)
		}
	}
	return Result{Ops: n, Seconds: elapsed.Seconds(), Latency: Summarize(all), CPUSeconds: used, Processes: procs}, nil
}

// ForCount runs op count times in all on callers goroutines and returns how long that took.
// The first error stops the run; ctx bounds it.
func ForCount(ctx context.Context, callers int, count int64, op Op) (Result, error) {
	var (
		seq      atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	begin, cpu := time.Now(), StartCPUWindow()
	for c := range callers {
		wg.Go(func() {
			for {
				i := seq.Add(1)
				if i > count {
					return
				}
				if err := ctx.Err(); err != nil {
					errOnce.Do(func() { firstErr = err })
					seq.Store(count)
					return
				}
				if err := op(c, i); err != nil {
					errOnce.Do(func() { firstErr = err })
					seq.Store(count)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return Result{}, firstErr
	}
	elapsed := time.Since(begin)
	used, procs := cpu.End()
	return Result{Ops: count, Seconds: elapsed.Seconds(), CPUSeconds: used, Processes: procs}, nil
}

// ProcessCPU is the processor time, user and system, that this process has used so far; -1
// where the system does not tell it.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUWindow measures the processor time that this process uses in a window of a run, and what
// every process of the run uses: this one and its peers (SetPeers).
type CPUWindow struct {
	start time.Duration
	procs usage
	read  bool // procs was read
}

// StartCPUWindow starts a window now.
func StartCPUWindow() CPUWindow {
	w := CPUWindow{start: ProcessCPU()}
	w.procs, w.read = readUsage()
	return w
}

// End ends the window: the processor time this process used in it, as Seconds, and what
// every process of the run used, or nil when one of them could not be read.
func (w CPUWindow) End() (float64, *Processes) {
	own := w.Seconds()
	if !w.read {
		return own, nil
	}
	u, ok := readUsage()
	if !ok {
		return own, nil
	}
	return own, u.since(w.procs)
}

// Seconds is the processor time used since the window started, or 0 when the system did not
// tell it (Result.CPUSeconds then says that it was not measured).
func (w CPUWindow) Seconds() float64 {
	end := ProcessCPU()
	if w.start < 0 || end < 0 {
		return 0
	}
	return (end - w.start).Seconds()
}

// WaitFor polls done every 100 µs until it reports true, and fails when ctx ends first.
func WaitFor(ctx context.Context, what string, done func() bool) error {
	for !done() {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// CheckSeq verifies that a reply carries the request's sequence number.
func CheckSeq(want, got int64) error {
	if want != got {
		return fmt.Errorf("reply to seq %d carries seq %d", want, got)
	}
	return nil
}

// ErrWrongReply is returned when a reply has an unexpected type.
var ErrWrongReply = errors.New("unexpected reply type")

// sleep waits for d, or less when ctx ends or failed closes.
func sleep(ctx context.Context, failed <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-failed:
	}
}
