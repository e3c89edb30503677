package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zlink-go/zlink/internal/proctest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		proctest.Cleanup()
		os.Exit(code) // the leak check's verdict: goleak leaves the exit to its cleanup
	}))
}

func TestScriptedSession(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, nil, strings.NewReader(""), &out, io.Discard))
	transcript := out.String()
	t.Log(transcript)
	for _, want := range []string{
		"node-1 is up; it serves an embedded etcd at 127.0.0.1:",
		"node-2 is up and joined the mesh",
		"ann logged in on node-1",
		"bob logged in on node-2",
		`ann logs in again: zlink: already exists: User chat.User/"ann"`,
		"ann joins #gophers (on node-1): ann",
		"bob joins #gophers (on node-1): ann, bob",
		"cara joins #crabs (on node-2): cara",
		"[#gophers] ann: hello from node-1!  (delivered to 1)",
		"bob's screen: [#gophers] ann: hello from node-1!",
		"ann's screen: [#gophers] bob: hi ann, I'm on node-2",
		"cara says something in #gophers without joining: cara is not in #gophers: join it first (code not_member)",
		"node-1: #gophers",
		"node-2: #crabs",
		"node-1's lobby: #gophers closed (IdleEvicted): 2 lines from ann, bob",
		`bob says something in #gophers: zlink: not found: Instance chat.Room/"gophers"`,
		`bob joins #no-such-room without create-intent: zlink: not found: Instance chat.Room/"no-such-room"`,
		"NODE    MESH     STATE  READY  PEERS",
		"node-1  default  Ready  true   node-2:Ready",
		"node-2  default  Ready  true   node-1:Ready",
		"node-2: Stopped (reason None); its runtime status says Stopped",
		"ann joins #crabs (on node-1): ann", // node-2's room, created afresh on node-1 at once
	} {
		assert.Contains(t, transcript, want)
	}
	assert.NotContains(t, strings.ToLower(transcript), "panic")
}

func TestBadFlags(t *testing.T) {
	var errOut bytes.Buffer
	err := run(context.Background(), []string{"-nope"}, strings.NewReader(""), io.Discard, &errOut)
	require.Error(t, err)
	assert.Contains(t, errOut.String(), "flag provided but not defined: -nope")
	require.Error(t, run(context.Background(), []string{"extra"}, strings.NewReader(""), io.Discard, io.Discard))
}

// terminal drives the interactive mode of a real chat process through its standard input and
// output.
type terminal struct {
	t *testing.T
	p *proctest.Process
}

func startTerminal(t *testing.T, args ...string) *terminal {
	t.Helper()
	bin := proctest.Build(t, "github.com/zlink-go/zlink/examples/chat")
	return &terminal{t: t, p: proctest.Start(t, bin, nil, append([]string{"-i", "-log", "WARN"}, args...)...)}
}

func (term *terminal) send(line string) {
	term.t.Helper()
	_, err := fmt.Fprintln(term.p.Stdin(), line)
	require.NoError(term.t, err)
}

// expect waits for an output line that contains want and returns it.
func (term *terminal) expect(want string) string {
	term.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-term.p.Lines():
			require.True(term.t, ok, "the process ended before printing %q", want)
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			term.t.Fatalf("no line with %q", want)
		}
	}
}

func TestInteractiveTwoNodesTwoPeople(t *testing.T) {
	one := startTerminal(t, "-node", "node-1")
	line := one.expect("start more nodes with -etcd ")
	etcd := line[strings.LastIndex(line, " ")+1:]
	two := startTerminal(t, "-node", "node-2", "-etcd", etcd)
	two.expect("node node-2 is up on etcd " + etcd)

	one.send("/login ann")
	one.expect("welcome, ann (your session lives on node-1)")
	two.send("hello?")
	two.expect("! log in first: /login <name>")
	two.send("/login bob")
	two.expect("welcome, bob (your session lives on node-2)")
	two.send("hello?")
	two.expect("! join a room first: /join <room>")
	two.send("/bogus")
	two.expect("unknown command /bogus; commands: /login <name>")

	one.send("/join lounge")
	one.expect("you joined #lounge (on node-")
	two.send("/join #lounge")
	two.expect("you joined #lounge (on node-")
	one.send("hi bob, from node-1")
	two.expect("[#lounge] ann: hi bob, from node-1")
	two.send("/say hi ann")
	one.expect("[#lounge] bob: hi ann")

	two.send("/rooms")
	rooms := two.expect("#lounge")
	assert.Regexp(t, `^node-[12]: #lounge$`, rooms)
	two.send("/leave")
	two.expect("you left #lounge")
	two.send("/quit")
	two.expect("bye")
	require.NoError(t, two.p.Wait(context.Background()), "a clean exit")

	one.send("/quit")
	one.expect("bye")
	require.NoError(t, one.p.Wait(context.Background()))
}

func TestOtelStdoutExportsSpansAndMetrics(t *testing.T) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, []string{"-otel", "stdout"}, strings.NewReader(""), &out, &errOut))
	exported := errOut.String()
	for _, want := range []string{`"Name": "chat.Room/Join"`, `"Name": "zlink.activate chat.Room"`, `"Name": "zlink.client.calls"`, `"Name": "zlink.calls"`} {
		assert.Contains(t, exported, want)
	}
	assert.NotContains(t, out.String(), "chat.Room/Join", "the transcript on standard output stays clean")

	err := run(context.Background(), []string{"-otel", "carrier-pigeon"}, strings.NewReader(""), io.Discard, io.Discard)
	require.ErrorContains(t, err, "unknown -otel exporter")
}

// With -admin and -metrics, a node serves its admin pages and, at /metrics, the runtime's
// OpenTelemetry metrics in Prometheus's format (the exporter is the application's, I5).
func TestAdminPageAndPrometheusMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdin, typed := io.Pipe()
	screen, stdout := io.Pipe()
	defer typed.Close()
	defer screen.Close() // a failed check ends the session too: its writes fail
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-i", "-node", "node-1", "-admin", "127.0.0.1:0", "-metrics"}, stdin, stdout, io.Discard)
		stdout.Close()
	}()
	// The screen is read all along, as a terminal would.
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(screen)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody looks any more
			}
		}
	}()
	expect := func(prefix string) string {
		for line := range lines {
			if strings.HasPrefix(line, prefix) {
				return line
			}
		}
		t.Fatalf("no line %q", prefix)
		return ""
	}
	url := strings.TrimSuffix(strings.TrimPrefix(expect("admin page "), "admin page "), "/")
	_, err := io.WriteString(typed, "/login ann\n")
	require.NoError(t, err)
	expect("welcome, ann")
	get := func(path string) string {
		resp, err := http.Get(url + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	assert.Contains(t, get("/status"), `"node": "node-1"`)
	// The session polls ann's inbox (User.Inbox) ten times a second.
	require.Eventually(t, func() bool { return strings.Contains(get("/metrics"), `zlink_method="Inbox"`) }, 30*time.Second, 50*time.Millisecond)
	metrics := get("/metrics")
	for _, want := range []string{"# TYPE zlink_client_calls_total counter", "zlink_calls_total{", `zlink_spot_type="chat.User"`} {
		assert.Contains(t, metrics, want)
	}
	_, err = io.WriteString(typed, "/quit\n")
	require.NoError(t, err)
	require.NoError(t, <-done)

	for args, want := range map[string]string{
		"-metrics":        "-metrics needs -admin",
		"-admin nonsense": `-admin "nonsense"`,
		"-admin :99999":   "the port must be a number from 0 to 65535",
	} {
		err := run(context.Background(), strings.Fields(args), strings.NewReader(""), io.Discard, io.Discard)
		assert.ErrorContains(t, err, want, args)
	}
}
