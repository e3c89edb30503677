// Package stopwait is how the helper processes of the benchmarks know to stop: their standard
// input closes (the harness went away) or they get SIGTERM or SIGINT.
package stopwait

import (
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Arm starts listening for SIGTERM and SIGINT and returns a function that blocks until one
// arrives or standard input closes. Call it before announcing readiness.
func Arm() (wait func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	return func() {
		select {
		case <-signals:
		case <-closed:
		}
		signal.Stop(signals)
	}
}
