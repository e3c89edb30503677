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

// OnNumGoroutine makes the executors see n goroutines in the process, until the returned
// function restores them.
func OnNumGoroutine(n int) (restore func()) {
	numGoroutine = func() int { return n }
	return func() { numGoroutine = runtime.NumGoroutine }
}
