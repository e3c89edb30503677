package rttest

import (
	"sync/atomic"
	"testing"
	"time"
)

// RunCallers runs b.N operations on exactly callers goroutines, op getting 1..b.N, stops the
// benchmark at the first error and reports ops/s.
func RunCallers(b *testing.B, callers int, op func(i int64) error) {
	var next atomic.Int64
	errs := make(chan error, callers)
	b.ResetTimer()
	start := time.Now()
	for range callers {
		go func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					errs <- nil
					return
				}
				if err := op(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range callers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
