// Package procstop is how the repository's helper processes (etcdproc, nodeproc) learn that
// the test that started them wants them gone.
package procstop

import (
	"bufio"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Wait blocks until standard input closes (the parent went away or closed it) or the process
// gets SIGTERM or SIGINT.
func Wait() { WaitLines(nil) }

// WaitLines is Wait that hands each line of standard input to line meanwhile (when set).
func WaitLines(line func(string)) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	stdinClosed := make(chan struct{})
	go func() {
		defer close(stdinClosed)
		if line == nil {
			_, _ = io.Copy(io.Discard, os.Stdin)
			return
		}
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			line(sc.Text())
		}
	}()
	select {
	case <-stop:
	case <-stdinClosed:
	}
}
