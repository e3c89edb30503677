package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/internal/browsertest"
	"github.com/zlink-go/zlink/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Println("goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The default run: three nodes, 200 players, a rolling update of node-1 to node-2 midway and
// node-1's shutdown; every match that formed finished, no message was lost or ran twice.
func TestMatchRunsClean(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	err := run(ctx, nil, &out, &errs)
	t.Log(out.String())
	require.NoError(t, err, errs.String())
	field := func(name string) int {
		m := regexp.MustCompile(`(?m)^` + name + `\s+(\d+)`).FindStringSubmatch(out.String())
		require.NotNil(t, m, "no %q in the summary", name)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	assert.Zero(t, field("lost messages"))
	assert.Zero(t, field("duplicate executions"))
	assert.Zero(t, field("incomplete histories"))
	formed := field("matches formed")
	assert.Positive(t, formed)
	assert.Equal(t, formed, field("matches played"), "every match finished")
	assert.Equal(t, formed, field("results heard by node-2's leaderboard"))
	assert.Positive(t, field("objects relocated"))
	assert.Contains(t, out.String(), "(Relocated/None)")
	assert.Regexp(t, `node-1\s+runtime Stopped`, out.String())
	assert.Regexp(t, `node-2\s+runtime Serving\s+mesh Ready`, out.String())
}

// Bad flags get one clear line and change nothing.
func TestMatchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-players", "3"}, "a match takes 4 players"},
		{[]string{"-players", "x"}, `invalid value "x"`},
		{[]string{"-play", "10ms"}, "at least 1s"},
		{[]string{"-rounds", "0"}, "between 1 and 1000"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-log", "LOUD"}, `invalid value "LOUD"`},
		{[]string{"-metrics"}, "-metrics needs -admin"},
		{[]string{"-admin", "nonsense"}, `-admin "nonsense"`},
		{[]string{"-admin", "127.0.0.1:70000"}, "the port must be a number from 0 to 65535"},
	} {
		var out, errs bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errs)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error()+errs.String(), tc.want, "%v", tc.args)
		assert.Empty(t, out.String(), "%v started nothing", tc.args)
	}
}

// matchNode is one node process of TestMatchAcrossProcesses and its output lines.
type matchNode struct {
	p     *proctest.Process
	lines chan string
}

func startMatchNode(t *testing.T, bin string, eps []string, args ...string) *matchNode {
	t.Helper()
	p := proctest.Start(t, bin, nil, append([]string{"-etcd", strings.Join(eps, ",")}, args...)...)
	_, err := p.Expect("ready ", time.Minute)
	require.NoError(t, err)
	n := &matchNode{p: p, lines: make(chan string, 4096)}
	go func() { // ends with the process's output
		for line := range p.Lines() {
			if !strings.HasPrefix(line, "progress ") {
				n.lines <- line
			}
		}
		close(n.lines)
	}()
	return n
}

func (n *matchNode) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line, ok := <-n.lines:
			require.True(t, ok, "the process ended before printing %q", prefix)
			if rest, found := strings.CutPrefix(line, prefix); found {
				return rest
			}
			require.False(t, strings.HasPrefix(line, "error "), "%s", line)
		case <-deadline:
			t.Fatalf("no %q line within %v", prefix, within)
		}
	}
}

// Three node processes play; node-1 relocates to node-2 (version 2) under play and then gets
// SIGTERM; every player's matches are counted from the survivors: none lost a round or ran one
// twice, and every match is in all its players' histories.
func TestMatchAcrossProcesses(t *testing.T) {
	_, eps := proctest.EtcdProcess(t, "-nofsync")
	bin := proctest.Build(t, "github.com/zlink-go/zlink/examples/match")
	n2 := startMatchNode(t, bin, eps, "-node", "node-2", "-version", "2", "-matchmaker", "2", "-players", "40")
	n3 := startMatchNode(t, bin, eps, "-node", "node-3", "-matchmaker", "1", "-players", "40")
	n1 := startMatchNode(t, bin, eps, "-node", "node-1", "-players", "40")
	for _, n := range []*matchNode{n1, n2, n3} {
		n.expect(t, "players ", time.Minute)
	}
	time.Sleep(2 * time.Second)
	_, err := fmt.Fprintln(n1.p.Stdin(), "relocate 2")
	require.NoError(t, err)
	assert.Equal(t, "Relocated/None", n1.expect(t, "relocated ", time.Minute))
	n1.expect(t, "safe", 30*time.Second)
	require.NoError(t, n1.p.Signal(syscall.SIGTERM))
	assert.Equal(t, "Stopped/None", n1.expect(t, "stopped ", time.Minute))
	time.Sleep(time.Second)
	for _, n := range []*matchNode{n2, n3} {
		_, err := fmt.Fprintln(n.p.Stdin(), "pause")
		require.NoError(t, err)
		n.expect(t, "paused", 10*time.Second)
	}
	_, err = fmt.Fprintln(n2.p.Stdin(), "summary node-1:40 node-2:40 node-3:40")
	require.NoError(t, err)
	sum := n2.expect(t, "summary ", time.Minute)
	t.Log(sum)
	m := regexp.MustCompile(`played=(\d+) sent=(\d+) lost=(-?\d+) duplicates=(\d+) incomplete=(\d+)`).FindStringSubmatch(sum)
	require.NotNil(t, m, sum)
	played, _ := strconv.Atoi(m[1])
	assert.Positive(t, played)
	assert.Equal(t, "0", m[3], "lost")
	assert.Equal(t, "0", m[4], "duplicates")
	assert.Equal(t, "0", m[5], "incomplete histories")
}

// With -admin and -metrics, the default run's nodes serve their admin pages: node-2's
// dashboard, in a real headless Chromium, shows the matchmaker and results channels, node-1
// relocating to it and leaving, and charts of the play; its /metrics has the runtime's
// metrics in Prometheus's format. The run still ends clean. The screenshot is saved under the
// test's temp dir, and where ZLINK_DASHBOARD_PNG says (docs/dashboard.png is one).
func TestMatchAdminDashboardUnderPlay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	screen, stdout := io.Pipe()
	defer screen.Close()
	var transcript bytes.Buffer
	var warnings syncBuffer // the runtime's and the game's warnings, for a failure's message
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(screen)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	done := make(chan error, 1)
	go func() {
		done <- runWith(ctx, []string{"-admin", "127.0.0.1:0", "-metrics", "-players", "160", "-play", "20s", "-log", "WARN"},
			strings.NewReader(""), io.MultiWriter(stdout, &transcript), &warnings)
		stdout.Close()
	}()
	expect := func(prefix string) string {
		for line := range lines {
			if strings.HasPrefix(line, prefix) {
				return strings.TrimPrefix(line, prefix)
			}
		}
		t.Fatalf("no line %q", prefix)
		return ""
	}
	url := strings.TrimSuffix(expect("node-2's admin page: "), "/")

	bctx := browsertest.Chromium(t)
	browsertest.Navigate(t, bctx, url+"/")
	browsertest.WaitFor(t, bctx, "node-2 serving", `document.querySelector('#state-badge').dataset.state === 'Serving'`)
	browsertest.WaitFor(t, bctx, "both channels", `!!document.querySelector('#channels tr[data-channel="match.Matchmaker"]') && !!document.querySelector('#channels tr[data-channel="match.Results"]')`)
	browsertest.WaitFor(t, bctx, "three nodes in the mesh view", `document.querySelectorAll('#mesh-nodes tr[data-node]').length === 3`)
	expect("node-1's relocation: ")
	browsertest.WaitFor(t, bctx, "node-1 gone from node-2's peers", `!document.querySelector('#peers tr[data-node="node-1"][data-state="Ready"]')`)
	browsertest.WaitFor(t, bctx, "some seconds of chart", `Number(document.querySelector('#chart-calls').dataset.points || 0) >= 6`)
	browsertest.WaitFor(t, bctx, "calls under way", `Number(document.querySelector('#now-calls').textContent.replace(/,/g, '')) > 0`)
	paths := []string{filepath.Join(t.TempDir(), "dashboard.png")}
	if p := os.Getenv("ZLINK_DASHBOARD_PNG"); p != "" {
		paths = append(paths, p)
	}
	browsertest.Screenshot(t, bctx, paths...)

	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, want := range []string{"# TYPE zlink_calls_total counter", `zlink_spot_type="match.Match"`, "zlink_spots_active"} {
		assert.Contains(t, string(metrics), want)
	}

	go func() {
		for range lines { // the rest of the run
		}
	}()
	require.NoError(t, <-done, transcript.String()+"\nwarnings:\n"+warnings.String())
	assert.Contains(t, transcript.String(), "(Relocated/None)")
}

// syncBuffer is a bytes.Buffer that the run's loggers may write from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
