// Package wait reads what a test expects to arrive on a channel, failing the test rather
// than hanging it when nothing comes. It imports nothing of the runtime, so the internal
// tests of any runtime package can use it.
package wait

import (
	"testing"
	"time"
)

// Bound is how long For waits: long enough for a loaded shared machine, short enough that
// a lost value fails the test well inside its timeout.
const Bound = 10 * time.Second

// For returns the next value received from ch, or fails t if none arrives within Bound.
func For[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(Bound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("nothing arrived within %v", Bound)
		var zero T
		return zero
	}
}
