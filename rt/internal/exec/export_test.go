package exec

import "runtime"

// OnYield makes the executors call f instead of yielding the processor, until the returned
// function restores them.
func OnYield(f func()) (restore func()) {
	gosched = f
	return func() { gosched = runtime.Gosched }
}

// InlineYieldEvery is how many items run inline with company between yields.
const InlineYieldEvery = inlineYieldEvery
