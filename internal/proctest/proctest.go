// Package proctest starts and stops the processes a test needs: helper binaries built from this
// module (a node, an etcd, an example), their output, and signals to pause, resume or kill them.
package proctest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu  sync.Mutex
	builtDir string
	built    = map[string]string{}
)

// Build compiles the main package pkg (an import path of this module) once per test binary and
// returns the executable's path. A test binary built with the race detector gets helpers built
// with it too, so that the processes a test starts are checked as the test itself is. The
// binaries live in a directory removed by Cleanup.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	return BuildTags(tb, pkg)
}

// BuildTags is Build with build tags.
func BuildTags(tb testing.TB, pkg string, tags ...string) string {
	tb.Helper()
	return build(tb, pkg, RaceEnabled, tags)
}

// BuildWithoutRace is Build without the race detector even when the test has it: for a process
// whose memory the test measures, which the detector's shadow memory would swamp.
func BuildWithoutRace(tb testing.TB, pkg string) string {
	tb.Helper()
	return build(tb, pkg, false, nil)
}

func build(tb testing.TB, pkg string, race bool, tags []string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := fmt.Sprint(pkg, " ", strings.Join(tags, ","), " ", race)
	if path, ok := built[key]; ok {
		return path
	}
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "zlink-rttest-*")
		if err != nil {
			tb.Fatalf("rttest: temp dir: %v", err)
		}
		builtDir = dir
	}
	out := filepath.Join(builtDir, filepath.Base(pkg))
	if len(tags) > 0 {
		out += "-" + strings.Join(tags, "-")
	}
	if race {
		out += "-race"
	}
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("rttest: go build %s: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out
}

// Cleanup removes the binaries that Build made; call it from TestMain after the tests.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
		builtDir, built = "", map[string]string{}
	}
}

// Process is a helper process started by a test. Its standard output is read line by line;
// its standard error goes to the test log.
type Process struct {
	tb    testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error
}

// Start runs path with args and stops it (SIGTERM, then SIGKILL after 10 s) when the test
// ends. env adds KEY=VALUE entries to the environment.
func Start(tb testing.TB, path string, env []string, args ...string) *Process {
	tb.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("rttest: %v", err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("rttest: %v", err)
	}
	cmd.Stderr = &testWriter{tb: tb, prefix: filepath.Base(path) + ": "}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("rttest: start %s: %v", path, err)
	}
	p := &Process{tb: tb, cmd: cmd, stdin: stdin, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(p.Stop)
	return p
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stdin is the process's standard input.
func (p *Process) Stdin() io.Writer { return p.stdin }

// Expect waits for an output line with prefix and returns the rest of it.
func (p *Process) Expect(prefix string, within time.Duration) (string, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done // p.err is set once the exit was waited for, after the lines end
				return "", fmt.Errorf("rttest: process exited before printing %q: %v", prefix, p.err)
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return rest, nil
			}
		case <-timer.C:
			return "", fmt.Errorf("rttest: no %q line within %v", prefix, within)
		}
	}
}

// Lines returns the channel of output lines not yet consumed by Expect.
func (p *Process) Lines() <-chan string { return p.lines }

// Kill sends SIGKILL, as a crash would, and waits for the exit.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Pause stops the process with SIGSTOP, as a frozen VM or a long stall would: it keeps its
// sockets and state but runs nothing until Resume. It returns once every thread of the process
// has stopped (the signal takes effect asynchronously), or fails the test after 10 s.
func (p *Process) Pause() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP)
	deadline := time.Now().Add(10 * time.Second)
	for !p.stopped() {
		if time.Now().After(deadline) {
			p.tb.Fatalf("rttest: process %d did not stop", p.Pid())
		}
		time.Sleep(time.Millisecond)
	}
}

// stopped reports whether every thread of the process is stopped, as /proc tells.
func (p *Process) stopped() bool {
	dir := fmt.Sprintf("/proc/%d/task", p.Pid())
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses: "pid (comm) S ...".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Signal sends sig to the process and the processes it started.
func (p *Process) Signal(sig syscall.Signal) error { return syscall.Kill(-p.cmd.Process.Pid, sig) }

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT) }

// Stop asks the process to stop (closes stdin, SIGTERM), waits up to 10 s, then kills it.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.stdin.Close()
	p.Resume() // a paused process cannot act on SIGTERM
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.tb.Logf("rttest: process %d did not stop within 10 s of SIGTERM; killing it", p.Pid())
		p.Kill()
	}
}

// Wait waits for the process to exit and returns its error.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// EtcdProcess starts etcd in a process of its own (internal/etcdproc) and returns its
// endpoints. args are etcdproc's flags, such as "-nofsync".
func EtcdProcess(tb testing.TB, args ...string) (*Process, []string) {
	tb.Helper()
	p := Start(tb, Build(tb, "github.com/zlink-go/zlink/internal/etcdproc"), nil, args...)
	eps, err := p.Expect("endpoints=", 60*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	return p, strings.Split(eps, ",")
}

type testWriter struct {
	tb     testing.TB
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.tb.Log(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}
