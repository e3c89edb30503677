package exec

import "runtime"

// OnYield makes the executors call f instead of yielding the processor, until the returned
// function restores them.
func OnYield(f func()) (restore func()) {
	gosched = f
	return func() { gosched = runtime.Gosched }
}

// YieldEvery is how many items with company run between yields.
const YieldEvery = yieldEvery

// OnRunnableGoroutines makes the executors see n runnable goroutines in the process, until
// the returned function restores them.
func OnRunnableGoroutines(n int) (restore func()) {
	runnableGoroutines = func() int { return n }
	return func() { runnableGoroutines = readRunnableGoroutines }
}

// RunnableGoroutines is what the executors see of the process's runnable goroutines.
func RunnableGoroutines() int { return readRunnableGoroutines() }

// ApplicationRingSize is the size of the application lane's ring now (0 without one).
func (e *Executor) ApplicationRingSize() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.app.ring)
}

// Listed is how many executors are in the gauges' list of executors with queued work.
func (g *Gauges) Listed() int {
	n := 0
	for i := range g.stripes {
		st := &g.stripes[i]
		st.mu.Lock()
		n += len(st.busy)
		st.mu.Unlock()
	}
	return n
}
