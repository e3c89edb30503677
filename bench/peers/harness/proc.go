// Package harness runs the side-by-side benchmarks: every run of a workload in a child process
// of its own, with the processes it needs (etcd, a server) started before it and stopped after
// it; then medians over the rounds, one table, and bench/RESULTS.md.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process started by the harness. It runs in a process group of its own, so that
// stopping it also stops what it started; its standard output is read line by line and the tail
// of its standard error is kept for error messages.
type Proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error
	tail  *tailBuffer
}

var (
	liveMu sync.Mutex
	live   = map[*Proc]struct{}{}
)

// Start runs path with args. Every started process is stopped by StopAll.
func Start(path string, args ...string) (*Proc, error) {
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{
		name: filepath.Base(path), cmd: cmd, stdin: stdin,
		lines: make(chan string, 64), done: make(chan struct{}), tail: &tailBuffer{max: 16 << 10},
	}
	cmd.Stderr = p.tail
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	liveMu.Lock()
	live[p] = struct{}{}
	liveMu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
		liveMu.Lock()
		delete(live, p)
		liveMu.Unlock()
	}()
	return p, nil
}

// Pid is the process's ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Expect waits up to within for an output line that starts with prefix and returns the rest.
// It gives up early when ctx ends.
func (p *Proc) Expect(ctx context.Context, prefix string, within time.Duration) (string, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s to print %q: %w", p.name, prefix, ctx.Err())
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("%s exited (%v) before printing %q; its stderr ends:\n%s", p.name, p.err, prefix, p.tail)
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return rest, nil
			}
		case <-timer.C:
			return "", fmt.Errorf("%s printed no %q line within %v; its stderr ends:\n%s", p.name, prefix, within, p.tail)
		}
	}
}

// Wait waits up to within for the process to exit by itself, then stops it.
func (p *Proc) Wait(within time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		p.Stop()
		return fmt.Errorf("%s did not exit within %v", p.name, within)
	}
}

// Stop asks the process group to stop (stdin closed, SIGTERM), waits up to 10 s, then kills it.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.stdin.Close()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Stderr is the tail of the process's standard error.
func (p *Proc) Stderr() string { return p.tail.String() }

// StopAll stops every process the harness started that is still running.
func StopAll() {
	liveMu.Lock()
	ps := make([]*Proc, 0, len(live))
	for p := range live {
		ps = append(ps, p)
	}
	liveMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(p.Stop)
	}
	wg.Wait()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = bytes.Clone(t.buf[over:])
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Build compiles the main packages pkgs (import paths of this module) into dir and returns the
// executables' paths in the same order.
func Build(dir string, pkgs ...string) ([]string, error) {
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	paths := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		paths[i] = filepath.Join(dir, filepath.Base(pkg))
	}
	return paths, nil
}
