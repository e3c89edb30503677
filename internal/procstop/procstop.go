// Package procstop is how the repository's helper processes (etcdproc, nodeproc) learn that
// the test that started them wants them gone.
package procstop

import (
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Wait blocks until standard input closes (the parent went away or closed it) or the process
// gets SIGTERM or SIGINT.
func Wait() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stop:
	case <-stdinClosed:
	}
}
