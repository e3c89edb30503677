package admin_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/internal/admin"
	"github.com/zlink-go/zlink/rt/internal/observe"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite testdata/status.golden.json from the document the test makes")

// fixedSnapshot sets every field of a snapshot, so that the golden document shows each name.
func fixedSnapshot() admin.Snapshot {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	deadline := at.Add(30 * time.Second)
	reason := sdk.TopologyReasonDraining
	noTarget := sdk.TopologyReasonNoReadyTarget
	budget, limit, manual := uint64(256<<20), uint64(1<<30), uint64(5000)
	return admin.Snapshot{
		Node: "node-1", Mesh: "default", ApplicationVersion: 2, TakenAt: at, Turns: 123456,
		Runtime: sdk.RuntimeStatus{
			State: sdk.RuntimeStateRelocating, Deadline: &deadline, Sequence: 7, ObservedAt: at,
			RelocationResult:  &sdk.RelocationResult{Mode: sdk.RelocationModePlannedMaintenance, TargetApplicationVersion: 2, Outcome: sdk.RelocationOutcomeBlocked, Reason: sdk.RelocationReasonTargetUnavailable},
			TerminationResult: &sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded},
		},
		Relocation: &admin.Relocation{
			Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: 3, Running: false, Units: 40, Moved: 38, Gone: 2, Deadline: deadline,
			Result: &sdk.RelocationResult{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: 3, Outcome: sdk.RelocationOutcomeRelocated},
		},
		MeshStatus: sdk.RouteMeshStatus{
			MeshName: "default", State: sdk.TopologyStateDegraded, IsReady: true, ReadyPeerCount: 1,
			Channels: []sdk.ChannelStatus{{ChannelName: "match.Matchmaker", IsReady: true, ReadyTargetCount: 2}},
			Peers: []sdk.PeerStatus{
				{NodeRid: "node-2", State: sdk.PeerStateReady},
				{NodeRid: "node-3", State: sdk.PeerStateDraining, UnavailableReason: &reason},
			},
			Placement: sdk.PlacementStatus{IsAvailable: false, ActiveActorCount: 5, ActiveSpotCount: 17, UnavailableReason: &reason},
			Sequence:  11, ObservedAt: at,
		},
		ClientServer: []sdk.ClientServerStatus{{
			ChannelName: "match.Matchmaker", LocalRole: sdk.ClientServerRoleClientAndServer, State: sdk.TopologyStateReady, IsReady: true, ReadyTargetCount: 2,
			Targets: []sdk.ClientServerTargetStatus{
				{NodeRid: "node-1", Weight: 2, State: sdk.PeerStateReady},
				{NodeRid: "node-3", Weight: 0, State: sdk.PeerStateReady, UnavailableReason: &noTarget},
			},
			Sequence: 4, ObservedAt: at,
		}},
		Fanout: []sdk.FanoutStatus{{
			ChannelName: "match.Results", State: sdk.TopologyStateReady, IsReady: true, ReadyPublisherCount: 1,
			Publishers: []sdk.PeerStatus{{NodeRid: "node-2", State: sdk.PeerStateReady}}, Sequence: 3, ObservedAt: at,
		}},
		Capacity: sdk.HostCapacityStatus{
			MeasurementEpoch: 1,
			CoreHwm: sdk.CoreHwmStatus{
				ConfiguredMemoryLimitBytes: &limit, ConfiguredBudgetBytes: &budget, ConfiguredProfile: sdk.CoreHwmProfileBalanced,
				EffectiveBudgetBytes: budget, TotalAppliedHwmBytes: 1, CoreQueueAccountedBytes: 2, CurrentAccountedBytes: 3,
				ProvisionalAccountedBytes: 4, PeakAccountedBytes: 5, CompletionCurrentAccountedBytes: 6, CompletionPeakAccountedBytes: 7,
				CompletionPendingMessageCount: 8, TotalMessagingAccountedBytes: 9, MonitorQueueAppliedHwmBytes: 10,
				MonitorQueueAccountedBytes: 11, TotalInstanceAppliedHwmBytes: 12, TotalInstanceAccountedBytes: 13, BlockedRatioPpm: 14,
				ActiveDirectionalQueueCount: 15, ActiveCompletionDirectionalQueueCount: 16, ActiveSendQueueCount: 17, ActiveReceiveQueueCount: 18,
			},
			ApplicationJobQueue: sdk.ApplicationJobQueueStatus{
				ConfiguredProfile: sdk.ApplicationJobQueueProfileManual, ConfiguredManualMax: &manual, ConfiguredPauseThresholdPercent: 90,
				ConfiguredResumeThresholdPercent: 70, EffectiveProcessorCount: 2, EffectiveMaxQueuedApplicationJobs: 5000,
				PausePermitCount: 4500, ResumePermitCount: 3500, ReservedSupplyPermits: 1, QueuedApplicationJobs: 2, PermitsInUse: 3,
				PeakPermitsInUse: 4, CapacityWaiters: 5, CapacityWaitCount: 6, CapacityWaitDuration: 1500 * time.Millisecond,
				PressureState: sdk.ApplicationJobQueuePressureStatePaused, CurrentPauseDuration: 250 * time.Millisecond,
			},
		},
	}
}

// The /status document's field names are stable: the document of a snapshot that sets every
// field equals testdata/status.golden.json (go test -run TestStatusDocumentGolden -update
// rewrites it, for a change made on purpose; docs/ADMIN.md lists the same names).
func TestStatusDocumentGolden(t *testing.T) {
	got, err := json.MarshalIndent(admin.Document(fixedSnapshot()), "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	path := filepath.Join("testdata", "status.golden.json")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "the /status document changed: if on purpose, run go test ./rt/internal/admin -run TestStatusDocumentGolden -update and update docs/ADMIN.md")

	// A snapshot with nothing optional: absent values are null and lists are empty, never null.
	doc, err := json.Marshal(admin.Document(admin.Snapshot{Node: "n"}))
	require.NoError(t, err)
	for _, want := range []string{`"relocation":null`, `"peers":[]`, `"clientServer":[]`, `"fanout":[]`, `"deadline":null`, `"unavailableReason":null`} {
		assert.Contains(t, string(doc), want)
	}
}

// testNode is a node for the server: its statuses live in the runtime's own observation hubs,
// which the test publishes into as the host would.
type testNode struct {
	mu        sync.Mutex
	snap      admin.Snapshot
	runtime   *observe.Hub[sdk.RuntimeStatus]
	members   []admin.Member
	watchers  atomic.Int64
	shutdowns atomic.Int64
	relocate  func(context.Context, sdk.RelocationOptions) (sdk.RelocationResult, error)
}

func newTestNode() *testNode {
	s := fixedSnapshot()
	s.Runtime = sdk.RuntimeStatus{State: sdk.RuntimeStateServing, IsReady: true, AcceptingWork: true, SafeToShutdown: true}
	s.Relocation = nil
	n := &testNode{snap: s, runtime: observe.NewHub(s.Runtime, observe.TerminalStates(func(st *sdk.RuntimeStatus) sdk.RuntimeState { return st.State }, sdk.RuntimeStateStopped))}
	n.members = []admin.Member{{Node: "node-1", State: sdk.RuntimeStateServing, Self: true}}
	return n
}

func (n *testNode) Snapshot() admin.Snapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.snap
	s.Runtime = n.runtime.Current()
	s.TakenAt = time.Now()
	return s
}

func (n *testNode) Watch(ctx context.Context, changed func()) {
	n.watchers.Add(1)
	defer n.watchers.Add(-1)
	for range n.runtime.Observe(ctx) {
		changed()
	}
}

func (n *testNode) Members() []admin.Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.members
}

func (n *testNode) Relocate(ctx context.Context, opts sdk.RelocationOptions) (sdk.RelocationResult, error) {
	if n.relocate != nil {
		return n.relocate(ctx, opts)
	}
	return sdk.RelocationResult{Mode: opts.Mode, Outcome: sdk.RelocationOutcomeRelocated}, nil
}

func (n *testNode) BeginShutdown(time.Duration) {
	if n.shutdowns.Add(1) > 1 {
		return // joined
	}
	go func() {
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateDraining})
		time.Sleep(50 * time.Millisecond)
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
		n.runtime.Close()
	}()
}

func (n *testNode) publish(st sdk.RuntimeStatus) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st.Sequence = n.runtime.Current().Sequence + 1
	n.runtime.Publish(st)
	if st.State == sdk.RuntimeStateError {
		n.snap.Failed = &st // as the host records it
	}
}

func serve(t *testing.T, cfg admin.Config, node admin.Node) *admin.Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
		cfg.Loopback = true
	}
	s, err := admin.Listen(cfg)
	require.NoError(t, err)
	s.Serve(node)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func post(t *testing.T, c *http.Client, url, contentType, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// Bad input gets one clear line that names the problem, never a panic or an operation started:
// garbage and oversized bodies, unknown fields, two objects, a bad mode or deadline, the wrong
// method or media type, a page of another origin, and an operation meant for another node.
func TestPostsRefuseBadInputWithOneClearLine(t *testing.T) {
	n := newTestNode()
	var started atomic.Int64
	n.relocate = func(context.Context, sdk.RelocationOptions) (sdk.RelocationResult, error) {
		started.Add(1)
		return sdk.RelocationResult{}, nil
	}
	s := serve(t, admin.Config{}, n)
	c := http.DefaultClient
	cases := []struct {
		path, ctype, body string
		header            []string
		code              int
		want              string
	}{
		{"/relocate", "application/json", "{garbage", nil, 400, "not the JSON object expected"},
		{"/relocate", "application/json", "", nil, 400, "body is empty"},
		{"/relocate", "application/json", `{"mode":"planned","x":1}`, nil, 400, `unknown field "x"`},
		{"/relocate", "application/json", `{"mode":"planned"} {"mode":"rolling"}`, nil, 400, "more than one JSON object"},
		{"/relocate", "application/json", `{"mode":"` + strings.Repeat("a", 5000) + `"}`, nil, 400, "larger than 4096 bytes"},
		{"/relocate", "application/json", `{"mode":"sideways"}`, nil, 400, `unknown mode "sideways"`},
		{"/relocate", "application/json", `{}`, nil, 400, "mode is missing"},
		{"/relocate", "application/json", `{"mode":"planned","targetApplicationVersion":3}`, nil, 400, "takes no target application version"},
		{"/relocate", "application/json", `{"mode":"rolling"}`, nil, 400, "requires a target application version"},
		{"/relocate", "application/json", `{"mode":"rolling","targetApplicationVersion":1}`, nil, 400, "not greater than the source's 2"},
		{"/relocate", "application/json", `{"mode":"planned","deadline":"soon"}`, nil, 400, `deadline "soon" is not a duration`},
		{"/relocate", "application/json", `{"mode":"planned","deadline":"-1s"}`, nil, 400, "out of range"},
		{"/relocate", "text/plain", `{"mode":"planned"}`, nil, 415, "needs Content-Type: application/json"},
		{"/relocate", "", `{"mode":"planned"}`, nil, 415, "needs Content-Type: application/json"},
		{"/relocate", "application/json", `{"mode":"planned"}`, []string{"Origin", "http://evil.example"}, 403, "another origin"},
		{"/relocate", "application/json", `{"mode":"planned"}`, []string{"Sec-Fetch-Site", "cross-site"}, 403, "another origin"},
		{"/shutdown", "application/json", `[1,2]`, nil, 400, "not the JSON object expected"},
		{"/shutdown", "application/json", `null`, nil, 400, "not the JSON object expected: it is null"},
		{"/shutdown", "application/json", ` null `, nil, 400, "not the JSON object expected: it is null"},
		{"/shutdown", "application/json", `"a long string of words"`, nil, 400, `it is "a long string o...`},
		{"/relocate", "application/json", `null`, nil, 400, "not the JSON object expected: it is null"},
		{"/shutdown", "application/json", `{"deadline":"1y"}`, nil, 400, "not a duration"},
		{"/shutdown", "application/json", `{"deadline":"48h"}`, nil, 400, "out of range"},
		{"/relocate", "application/json", `{"mode":"planned","node":"node-2"}`, nil, 409, "is node node-1's, not node node-2's"},
		{"/shutdown", "application/json", `{"node":"node-2"}`, nil, 409, "is node node-1's, not node node-2's"},
	}
	for _, tc := range cases {
		resp, body := post(t, c, s.URL()+tc.path, tc.ctype, tc.body, tc.header...)
		assert.Equal(t, tc.code, resp.StatusCode, "%s %s: %s", tc.path, tc.body, body)
		if strings.Contains(tc.want, "larger than") {
			assert.True(t, resp.Close, "the connection of an oversized body is closed, not read on")
		}
		var e admin.ErrorDoc
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		assert.Contains(t, e.Error, tc.want, tc.body)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(body), "\n")+1, "one line")
	}
	// Another method on a route of the server's own is refused in JSON too, the page's
	// included.
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/relocate", "POST"}, {"PUT", "/relocate", "POST"}, {"GET", "/shutdown", "POST"},
		{"DELETE", "/shutdown", "POST"}, {"POST", "/status", "GET, HEAD"}, {"POST", "/events", "GET, HEAD"},
		{"PATCH", "/mesh", "GET, HEAD"}, {"POST", "/", "GET, HEAD"}, {"DELETE", "/assets/app.js", "GET, HEAD"},
	} {
		req, err := http.NewRequest(tc.method, s.URL()+tc.path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
		var e admin.ErrorDoc
		require.NoError(t, json.Unmarshal(body, &e), "%s %s: %s", tc.method, tc.path, body)
		assert.Equal(t, tc.method+" "+tc.path+" is not served: use "+tc.allow, e.Error)
	}
	// And so is a path that nothing serves.
	for _, path := range []string{"/nothing", "/status/x", "/assets2"} {
		resp, err := c.Get(s.URL() + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		assert.JSONEq(t, `{"error":"`+path+` is not served here"}`, string(body), path)
	}
	assert.Zero(t, started.Load(), "no bad request started a relocation")
	assert.Zero(t, n.shutdowns.Load(), "no bad request started a shutdown")

	// A page of another site whose name resolves to 127.0.0.1 reads nothing (DNS rebinding).
	req, err := http.NewRequest(http.MethodGet, s.URL()+"/status", nil)
	require.NoError(t, err)
	req.Host = "attacker.example:80"
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
}

// A page of another site drives no route of the server's own, profiles above all: a request
// with a foreign or opaque Origin, or that the browser marks as from another site, is refused
// (403), except a plain navigation to the dashboard, which is how a link from another node's
// page opens it. The same requests from the page itself and from the command line, which
// sends neither header, are served; and a symbol lookup's body is bounded.
func TestCrossSiteRequestsReachNoRoute(t *testing.T) {
	s := serve(t, admin.Config{}, newTestNode())
	// do answers the status code and the body, or 0 when no complete answer came within
	// seconds (a stream, a profile that ran).
	do := func(method, path, contentType, body string, header ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, strings.NewReader(body))
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err.Error()
		}
		return resp.StatusCode, string(b)
	}
	refused := []struct {
		method, path, ctype string
		header              []string
	}{
		{"GET", "/debug/pprof/profile?seconds=1", "", []string{"Sec-Fetch-Site", "cross-site"}},
		{"GET", "/debug/pprof/trace?seconds=1", "", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "no-cors"}},
		{"POST", "/debug/pprof/symbol", "text/plain", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}},
		{"POST", "/debug/pprof/symbol", "text/plain", []string{"Origin", "null"}},
		{"GET", "/status", "", []string{"Origin", "http://evil.example"}},
		{"GET", "/events", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}},
		{"GET", "/mesh", "", []string{"Sec-Fetch-Site", "cross-site"}},
		{"GET", "/debug/pprof/profile?seconds=1", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}},
	}
	for _, tc := range refused {
		code, body := do(tc.method, tc.path, tc.ctype, "0x1", tc.header...)
		assert.Equal(t, http.StatusForbidden, code, "%s %s %q: %s", tc.method, tc.path, tc.header, body)
		assert.Contains(t, body, "another origin", "%s %s", tc.method, tc.path)
	}

	// A link from another node's page opens the dashboard; the page's own requests, and the
	// command line's, are served.
	code, _ := do("GET", "/", "", "", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document")
	assert.Equal(t, http.StatusOK, code)
	code, _ = do("GET", "/status", "", "", "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors")
	assert.Equal(t, http.StatusOK, code)
	code, _ = do("GET", "/debug/pprof/", "", "", "Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate")
	assert.Equal(t, http.StatusOK, code)
	code, _ = do("GET", "/debug/pprof/cmdline", "", "")
	assert.Equal(t, http.StatusOK, code)
	code, body := do("POST", "/debug/pprof/symbol", "text/plain", "0x1", "Origin", s.URL())
	assert.Equal(t, http.StatusOK, code, body)

	// A symbol lookup of more than 64 KiB is refused before it is read.
	code, body = do("POST", "/debug/pprof/symbol", "text/plain", strings.Repeat("0x401000+", 10000))
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, body, "larger than 65536 bytes")
}

// A POST to a server that is not on loopback needs a client certificate that TLS verified: a
// caller without one is refused, with the reason; one with one is served. GETs follow the TLS
// settings as they are.
func TestPostFromANonLoopbackCallerNeedsAClientCertificate(t *testing.T) {
	pki := rttest.NewPKI(t, "admin-ca")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pki.Cert(t, "node-1")}, ClientCAs: pki.Pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13}
	n := newTestNode()
	// Listening on 127.0.0.1 but told it is not loopback: the rule under test is the server's.
	s := serve(t, admin.Config{Addr: "127.0.0.1:0", TLS: serverTLS, Loopback: false}, n)
	require.True(t, strings.HasPrefix(s.URL(), "https://"), s.URL())

	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS13}}}
	defer anonymous.CloseIdleConnections()
	resp, body := post(t, anonymous, s.URL()+"/shutdown", "application/json", "{}")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, body, "not loopback, and the caller presented no verified client certificate")
	assert.Zero(t, n.shutdowns.Load())
	resp, err := anonymous.Get(s.URL() + "/status")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "reading needs no certificate under these TLS settings")

	operator := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(t, "operator")}}
	defer operator.CloseIdleConnections()
	resp, body = post(t, operator, s.URL()+"/shutdown", "application/json", `{"deadline":"5s","node":"node-1"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	var last admin.Progress
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
	assert.True(t, last.Done)
	assert.Equal(t, "Stopped", last.State)
	require.NotNil(t, last.TerminationResult)
	assert.Equal(t, "Stopped", last.TerminationResult.Outcome)
}

// A plaintext server on a network address serves only requests that name it by an IP
// address or by the host of its configured address: a site whose name the attacker points at
// the node's address (DNS rebinding) reads nothing, as no certificate stops it there.
func TestPlaintextNetworkServerServesOnlyItsOwnNames(t *testing.T) {
	get := func(url, host string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url+"/status", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Listening on 127.0.0.1 but told it is not loopback: the rule under test is the server's.
	s := serve(t, admin.Config{Addr: "127.0.0.1:0", Loopback: false}, newTestNode())
	_, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, http.StatusMisdirectedRequest, get(s.URL(), "attacker.example:"+port))
	assert.Equal(t, http.StatusMisdirectedRequest, get(s.URL(), "node-1.example:"+port), "not its configured name")
	assert.Equal(t, http.StatusOK, get(s.URL(), "localhost:8080"), "a tunnel to it, such as ssh -L or kubectl port-forward")
	assert.Equal(t, http.StatusOK, get(s.URL(), "admin.localhost."), "a name under localhost")
	assert.Equal(t, http.StatusOK, get(s.URL(), "127.0.0.1:"+port))
	assert.Equal(t, http.StatusOK, get(s.URL(), "10.1.2.3"), "any IP address: a rebinding page cannot send one")
	assert.Equal(t, http.StatusOK, get(s.URL(), "[::1]:"+port))

	named := serve(t, admin.Config{Addr: "localhost:0", Loopback: false}, newTestNode())
	_, port, err = net.SplitHostPort(named.Addr())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, get(named.URL(), "LocalHost:"+port), "the configured address's host")
	assert.Equal(t, http.StatusOK, get(named.URL(), "localhost.:"+port), "with the root's dot")
	assert.Equal(t, http.StatusMisdirectedRequest, get(named.URL(), "attacker.example:"+port))

	// Under TLS a rebinding page meets a certificate that does not name its site: any host.
	pki := rttest.NewPKI(t, "admin-ca")
	tlsSrv := serve(t, admin.Config{Addr: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{pki.Cert(t, "node-1")}, MinVersion: tls.VersionTLS13}}, newTestNode())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS13}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, tlsSrv.URL()+"/status", nil)
	require.NoError(t, err)
	req.Host = "node-1.example"
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// A plaintext server on a network address serves profiles only through a tunnel to
// localhost: a browser marks none of its requests to such an address with Sec-Fetch-Site, and
// an image sends no Origin, so a page of another site would be told from the operator by
// nothing.
func TestPlaintextNetworkServerServesProfilesOnlyThroughATunnel(t *testing.T) {
	get := func(s *admin.Server, path, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.URL()+path, nil)
		require.NoError(t, err)
		req.Host = host
		// What Chromium sends for <img src="http://192.0.2.2:port/debug/pprof/profile">.
		req.Header.Set("Referer", "http://127.0.0.1:18080/")
		req.Header.Set("Accept", "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	network := serve(t, admin.Config{Addr: "127.0.0.1:0", Loopback: false}, newTestNode())
	_, port, err := net.SplitHostPort(network.Addr())
	require.NoError(t, err)
	for _, path := range []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1", "/debug/pprof/symbol", "/debug/pprof/", "/debug/pprof/heap?gc=1"} {
		code, body := get(network, path, "192.0.2.2:"+port)
		assert.Equal(t, http.StatusForbidden, code, path)
		assert.Contains(t, body, "through a tunnel that ends on the node only", path)
	}
	code, _ := get(network, "/status", "192.0.2.2:"+port)
	assert.Equal(t, http.StatusOK, code, "the status is still served")
	// The test connects from loopback: a tunnel that ends on the node, such as kubectl
	// port-forward, names a loopback host.
	code, _ = get(network, "/debug/pprof/", "localhost:8080")
	assert.Equal(t, http.StatusOK, code, "through a tunnel that ends on the node")
	code, _ = get(network, "/debug/pprof/", "127.0.0.1:8080")
	assert.Equal(t, http.StatusOK, code, "through a tunnel that ends on the node")

	loopback := serve(t, admin.Config{}, newTestNode())
	code, _ = get(loopback, "/debug/pprof/", strings.TrimPrefix(loopback.URL(), "http://"))
	assert.Equal(t, http.StatusOK, code, "a loopback server serves them")
}

// readEvent reads one server-sent event: its id and its data.
func readEvent(t *testing.T, r *bufio.Reader) (id, data string) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && data != "":
			return id, data
		}
	}
}

// The event stream tells the browser to reconnect after a second, numbers its events, and
// starts every stream — a reconnection too — with the complete current snapshot: a stream
// that broke loses nothing a new one does not show at once.
func TestEventsReconnectToTheCurrentSnapshot(t *testing.T) {
	n := newTestNode()
	s := serve(t, admin.Config{Heartbeat: time.Hour}, n)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "retry: 1000\n", first)
	id1, data := readEvent(t, r)
	var doc admin.Status
	require.NoError(t, json.Unmarshal([]byte(data), &doc))
	assert.Equal(t, "Serving", doc.Runtime.State)
	// A change while connected arrives as a new snapshot.
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateRelocating})
	_, data = readEvent(t, r)
	require.NoError(t, json.Unmarshal([]byte(data), &doc))
	assert.Equal(t, "Relocating", doc.Runtime.State)
	// The connection breaks; meanwhile the state changes again.
	cancel()
	resp.Body.Close()
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateRelocated})

	req, err = http.NewRequest(http.MethodGet, s.URL()+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Last-Event-ID", id1)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	r = bufio.NewReader(resp.Body)
	id2, data := readEvent(t, r)
	require.NoError(t, json.Unmarshal([]byte(data), &doc))
	assert.Equal(t, "Relocated", doc.Runtime.State, "the reconnection starts from the current state")
	assert.Greater(t, len(id2)*1000+int(id2[len(id2)-1]), 0)
	assert.NotEqual(t, id1, id2, "event ids only grow")
}

// A browser that stops reading its event stream holds up nothing: the publisher publishes
// thousands of changes without waiting, other readers are served meanwhile, and the stalled
// stream is cut off once a write waits past the write timeout, which gives its place back.
func TestEventsAStalledReaderIsCutOffAndBlocksNoOne(t *testing.T) {
	n := newTestNode()
	// Large snapshots, so that the connection's buffers fill quickly.
	for i := range 2000 {
		n.snap.MeshStatus.Peers = append(n.snap.MeshStatus.Peers, sdk.PeerStatus{NodeRid: sdk.NodeID(fmt.Sprintf("peer-%04d", i)), State: sdk.PeerStateReady})
	}
	s := serve(t, admin.Config{EventInterval: time.Millisecond, Heartbeat: time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxStreams: 2}, n)

	conn := rawRequest(t, s, "GET /events")
	// It never reads. The publisher goes on regardless.
	for i := range 5000 {
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeState(i % 2)})
	}
	// Another reader is served while the stalled one waits.
	resp, err := http.Get(s.URL() + "/status")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// The stalled stream is cut off, which gives its place back: two streams at once are
	// served again (the bound is two). It reads nothing meanwhile.
	var bodies []io.Closer
	require.Eventually(t, func() bool {
		for _, b := range bodies {
			b.Close()
		}
		bodies = nil
		for range 2 {
			resp, err := http.Get(s.URL() + "/events")
			if err != nil {
				return false
			}
			bodies = append(bodies, resp.Body)
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the stalled stream kept its place")
	resp, err = http.Get(s.URL() + "/events")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a third stream is over the bound")
	assert.Contains(t, string(body), "too many open streams")
	for _, b := range bodies {
		b.Close()
	}
	// The stalled connection was closed: what was buffered, then the end.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err = io.Copy(io.Discard, conn)
	require.NoError(t, err, "the server closed the stalled stream (EOF)")
}

// A stream whose reader stopped while the connection's buffers still take its writes, so that
// no write times out, gives its place back at the stream's lifetime; a reader that reads is
// asked to connect again soon, and its next stream starts with the current snapshot.
func TestEventsAStreamGivesItsPlaceBackAtItsLifetime(t *testing.T) {
	n := newTestNode()
	const lifetime = 500 * time.Millisecond
	s := serve(t, admin.Config{StreamLifetime: lifetime, MaxStreams: 1}, n)
	c := &http.Client{}
	defer c.CloseIdleConnections()

	_ = rawRequest(t, s, "GET /events") // never read
	require.Eventually(t, func() bool {
		resp, err := c.Get(s.URL() + "/events")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, 5*time.Second, 10*time.Millisecond, "the stalled stream holds the one place")
	var resp *http.Response
	require.Eventually(t, func() bool {
		r, err := c.Get(s.URL() + "/events")
		if err != nil {
			return false
		}
		if r.StatusCode != http.StatusOK {
			r.Body.Close()
			return false
		}
		resp = r
		return true
	}, 10*lifetime, 10*time.Millisecond, "the stalled stream gave its place back")
	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the server ends the stream")
	assert.True(t, strings.HasPrefix(string(body), "retry: 1000\n\n"), "%q", body)
	assert.True(t, strings.HasSuffix(string(body), "\n\nretry: 50\n\n"), "the browser connects again soon: %q", body)
	assert.Contains(t, string(body), "event: status\n")
}

// rawRequest sends request ("METHOD /path") to s on a connection of its own, which it
// returns unread; the test's end closes it.
func rawRequest(t *testing.T, s *admin.Server, request string) net.Conn {
	t.Helper()
	return rawRequestWith(t, s, &net.Dialer{}, request)
}

// rawRequestWith is rawRequest on a connection that d dials, with the header lines extra.
func rawRequestWith(t *testing.T, s *admin.Server, d *net.Dialer, request string, extra ...string) net.Conn {
	t.Helper()
	host := strings.TrimPrefix(s.URL(), "http://")
	conn, err := d.Dial("tcp", host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	var headers strings.Builder
	for _, h := range extra {
		headers.WriteString(h + "\r\n")
	}
	_, err = fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: %s\r\n%s\r\n", request, host, headers.String())
	require.NoError(t, err)
	return conn
}

// H1: an event stream is one more observer of the host's statuses, and never loses a terminal
// one silently: a host that fails and is shut down within one EventInterval is shown in Error
// before it is shown Stopped, in order, though the changes between coalesce.
func TestEventsShowAnErrorThatAShutdownFollowedAtOnce(t *testing.T) {
	n := newTestNode()
	s := serve(t, admin.Config{EventInterval: 300 * time.Millisecond}, n)
	r, first := followEvents(t, s)
	require.Contains(t, first, `"state":"Serving"`)

	// Each within the interval that follows the first event's write, and each taken by the
	// stream's observation of the host before the next (a host's own observer that missed
	// one counts it apart, H1).
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateError})
	time.Sleep(20 * time.Millisecond)
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateDraining})
	time.Sleep(20 * time.Millisecond)
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
	n.runtime.Close()

	states := eventStates(t, r)
	// The Draining between coalesces unless the machine stalled the stream meanwhile; the
	// Error never does.
	require.NotEmpty(t, states)
	assert.Equal(t, "Error", states[0], "%v", states)
	assert.Equal(t, "Stopped", states[len(states)-1], "%v", states)
}

// H1: an Error that comes while the stream takes a snapshot, after the snapshot read the
// runtime's status, is written before the next snapshot, and not lost with the ones the
// snapshot replaced.
func TestEventsShowAnErrorThatCameDuringASnapshot(t *testing.T) {
	n := &erringNode{testNode: newTestNode(), seen: make(chan struct{}, 1)}
	s := serve(t, admin.Config{EventInterval: 300 * time.Millisecond, Heartbeat: 50 * time.Millisecond}, n)
	r, first := followEvents(t, s)
	require.Contains(t, first, `"state":"Serving"`)
	n.armed.Store(true)
	_, second := readEvent(t, r) // the snapshot during which the Error came
	require.False(t, n.armed.Load())
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
	n.runtime.Close()

	states := slices.Compact(append([]string{stateOf(t, first), stateOf(t, second)}, eventStates(t, r)...))
	require.GreaterOrEqual(t, len(states), 3, "%v", states)
	assert.Equal(t, []string{"Serving", "Error"}, states[:2])
	assert.Equal(t, "Stopped", states[len(states)-1], "%v", states)
}

// erringNode publishes the runtime's Error inside the snapshot it is asked for once armed,
// after it read the status it returns, and returns once the stream's observation took it.
type erringNode struct {
	*testNode
	armed atomic.Bool
	seen  chan struct{}
}

func (n *erringNode) Watch(ctx context.Context, changed func()) {
	n.testNode.Watch(ctx, func() {
		changed()
		if n.runtime.Current().State == sdk.RuntimeStateError {
			select {
			case n.seen <- struct{}{}:
			default:
			}
		}
	})
}

func (n *erringNode) Snapshot() admin.Snapshot {
	s := n.testNode.Snapshot()
	if n.armed.CompareAndSwap(true, false) {
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateError})
		select {
		case <-n.seen:
		case <-time.After(5 * time.Second):
		}
	}
	return s
}

// H1, H3: a stream whose observation of the host lags the host (its goroutine descheduled
// with an Error in hand) writes the statuses in their order: never a held Error after a newer
// snapshot that showed Stopped. Nor does a shutdown's progress stream.
func TestStreamsWriteAnErrorTheirObservationHeldInOrder(t *testing.T) {
	t.Run("events", func(t *testing.T) {
		n := newLaggingNode()
		s := serve(t, admin.Config{EventInterval: 10 * time.Millisecond, Heartbeat: 20 * time.Millisecond}, n)
		r, first := followEvents(t, s)
		docs := []admin.Status{statusOf(t, first)}

		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateError})
		<-n.errorTaken
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
		n.runtime.Close()
		for range 3 { // heartbeats while the observation holds the Error
			_, d := readEvent(t, r)
			docs = append(docs, statusOf(t, d))
		}
		close(n.release)
		docs = append(docs, eventDocs(t, r)...)
		var seqs []uint64
		var states []string
		for _, doc := range docs {
			seqs, states = append(seqs, doc.Runtime.Sequence), append(states, doc.Runtime.State)
		}
		assert.True(t, slices.IsSorted(seqs), "the sequence goes back: %v %v", seqs, states)
		assert.Equal(t, []string{"Serving", "Error", "Stopped"}, slices.Compact(states))
	})
	t.Run("shutdown", func(t *testing.T) {
		n := newLaggingNode()
		n.begin = func() {
			n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateDraining})
			time.Sleep(100 * time.Millisecond)
			n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateError})
			<-n.errorTaken
			n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
			n.runtime.Close()
			n.otherChange() // a capacity change: the stream takes a snapshot meanwhile
			time.Sleep(100 * time.Millisecond)
			close(n.release)
		}
		states := shutdownStates(t, serve(t, admin.Config{}, n))
		require.GreaterOrEqual(t, len(states), 3, "%v", states)
		assert.Equal(t, []string{"Draining", "Error", "Stopped"}, states[len(states)-3:])
	})
}

// laggingNode is a testNode whose observation for a stream holds the runtime's Error (its
// goroutine descheduled) until released, and which can report another change as the host's
// other observations do.
type laggingNode struct {
	*testNode
	mu         sync.Mutex
	changed    func()
	once       sync.Once
	errorTaken chan struct{}
	release    chan struct{}
	begin      func()
}

func newLaggingNode() *laggingNode {
	return &laggingNode{testNode: newTestNode(), errorTaken: make(chan struct{}), release: make(chan struct{})}
}

func (n *laggingNode) Watch(ctx context.Context, changed func()) {
	n.mu.Lock()
	n.changed = changed
	n.mu.Unlock()
	for o := range n.runtime.Observe(ctx) {
		if o.Status.State == sdk.RuntimeStateError {
			n.once.Do(func() { close(n.errorTaken) })
			<-n.release
		}
		changed()
	}
}

func (n *laggingNode) otherChange() {
	n.mu.Lock()
	c := n.changed
	n.mu.Unlock()
	c()
}

func (n *laggingNode) BeginShutdown(time.Duration) { go n.begin() }

// followEvents opens the event stream of s, which the test's end closes, and returns it after
// its first event, with that event's data.
func followEvents(t *testing.T, s *admin.Server) (r *bufio.Reader, first string) {
	t.Helper()
	c := &http.Client{}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Get(s.URL() + "/events")
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	r = bufio.NewReader(resp.Body)
	_, first = readEvent(t, r)
	return r, first
}

// eventDocs reads the event stream r to its end and returns the documents of its events.
func eventDocs(t *testing.T, r *bufio.Reader) []admin.Status {
	t.Helper()
	body, err := io.ReadAll(r)
	require.NoError(t, err)
	var docs []admin.Status
	for line := range strings.Lines(string(body)) {
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			docs = append(docs, statusOf(t, data))
		}
	}
	return docs
}

// eventStates reads the event stream r to its end and returns the runtime states of its
// events, a state repeated in a row once.
func eventStates(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	var states []string
	for _, doc := range eventDocs(t, r) {
		states = append(states, doc.Runtime.State)
	}
	return slices.Compact(states)
}

// statusOf decodes a status document.
func statusOf(t *testing.T, data string) admin.Status {
	t.Helper()
	var doc admin.Status
	require.NoError(t, json.Unmarshal([]byte(data), &doc))
	return doc
}

// stateOf is the runtime state of an encoded status document.
func stateOf(t *testing.T, data string) string { return statusOf(t, data).Runtime.State }

// A shutdown's progress stream prints an Error that Stopped followed before the stream wrote
// it, before its last line.
func TestShutdownProgressShowsAnErrorThatStoppedFollowed(t *testing.T) {
	// The first line is Serving or, if the shutdown began first, Draining.
	states := shutdownStates(t, serve(t, admin.Config{}, &failingNode{newTestNode()}))
	require.GreaterOrEqual(t, len(states), 3, "%v", states)
	assert.Equal(t, []string{"Draining", "Error", "Stopped"}, states[len(states)-3:])
}

// shutdownStates posts a shutdown to s and returns the states of its progress lines, a state
// repeated in a row once (the line of a change to Stopped comes before the last line's).
func shutdownStates(t *testing.T, s *admin.Server) []string {
	t.Helper()
	resp, body := post(t, &http.Client{}, s.URL()+"/shutdown", "application/json", `{}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var states []string
	for line := range strings.Lines(body) {
		var p admin.Progress
		require.NoError(t, json.Unmarshal([]byte(line), &p))
		states = append(states, p.State)
	}
	return slices.Compact(states)
}

// failingNode fails as its shutdown begins: Draining, then Error, and Stopped right after
// the Error was observed.
type failingNode struct{ *testNode }

func (n *failingNode) BeginShutdown(time.Duration) {
	go func() {
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateDraining})
		time.Sleep(100 * time.Millisecond)
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateError})
		time.Sleep(10 * time.Millisecond) // taken by the stream's observation, not yet written
		n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
		n.runtime.Close()
	}()
}

// A HEAD of the event stream answers the stream's headers and holds no stream place: net/http
// drops the body of a HEAD, so no write would ever wait and the write timeout would never
// end it.
func TestEventsHeadTakesNoStreamPlace(t *testing.T) {
	n := newTestNode()
	s := serve(t, admin.Config{EventInterval: time.Millisecond, Heartbeat: 10 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxStreams: 1}, n)
	conn := rawRequest(t, s, "HEAD /events")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodHead})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	// The connection stays open for several write timeouts; the one place is free all along.
	time.Sleep(time.Second)
	resp, err = http.Get(s.URL() + "/events")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the HEAD kept the only stream place")
}

// A shutdown asked twice is one shutdown: both callers follow it to the same result, and the
// event streams end with the Stopped snapshot.
// F9: a shutdown can begin while a relocation runs, however many callers follow that
// relocation's progress: the two operations' streams have places of their own.
func TestShutdownIsServedWhileEveryRelocationStreamIsTaken(t *testing.T) {
	n := newTestNode()
	release := make(chan struct{})
	n.relocate = func(ctx context.Context, opts sdk.RelocationOptions) (sdk.RelocationResult, error) {
		select {
		case <-ctx.Done():
			return sdk.RelocationResult{}, ctx.Err()
		case <-release:
			return sdk.RelocationResult{Mode: opts.Mode, Outcome: sdk.RelocationOutcomeRelocated}, nil
		}
	}
	s := serve(t, admin.Config{}, n)
	c := &http.Client{}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	opened := make(chan int, 9)
	for range 9 { // one more than the relocation streams' places
		wg.Go(func() {
			resp, err := postStream(c, s.URL()+"/relocate", `{"mode":"planned"}`)
			if err != nil {
				opened <- 0
				return
			}
			defer resp.Body.Close()
			opened <- resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
	codes := map[int]int{}
	for range 9 {
		codes[<-opened]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 8, http.StatusServiceUnavailable: 1}, codes, "eight relocation streams, then none")

	resp, body := post(t, c, s.URL()+"/shutdown", "application/json", `{}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.EqualValues(t, 1, n.shutdowns.Load(), "the shutdown began")
}

// postStream posts body as JSON to url and returns the answer, its body still to be read.
func postStream(c *http.Client, url, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.Do(req)
}

func TestShutdownTwiceSharesOneShutdown(t *testing.T) {
	n := newTestNode()
	s := serve(t, admin.Config{}, n)
	resp, err := http.Get(s.URL() + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	var wg sync.WaitGroup
	results := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			_, body := post(t, http.DefaultClient, s.URL()+"/shutdown", "application/json; charset=utf-8", "")
			lines := strings.Split(strings.TrimSpace(body), "\n")
			results[i] = lines[len(lines)-1]
		})
	}
	wg.Wait()
	assert.Equal(t, results[0], results[1])
	assert.Contains(t, results[0], `"done":true`)
	assert.Contains(t, results[0], `"terminationResult":{"outcome":"Stopped","reason":"None"}`)
	assert.Equal(t, int64(2), n.shutdowns.Load(), "the second joined")
	// The event stream shows Stopped, then ends.
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	assert.Contains(t, events[len(events)-1], `"state":"Stopped"`)
}

// A node whose admin server does not answer is shown with the reason after the per-node
// timeout; the view neither hangs nor waits for it again within its lifetime.
func TestMeshViewTimesOutASilentNode(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	var held []net.Conn
	var hmu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c) // accepted, never answered
			hmu.Unlock()
		}
	}()
	defer func() {
		hmu.Lock()
		for _, c := range held {
			c.Close()
		}
		hmu.Unlock()
	}()
	n := newTestNode()
	other := newTestNode()
	other.snap.Node = "node-2"
	peer := serve(t, admin.Config{}, other)
	n.members = []admin.Member{
		{Node: "node-1", State: sdk.RuntimeStateServing, Self: true},
		{Node: "node-2", State: sdk.RuntimeStateServing, AdminURL: peer.URL()},
		{Node: "node-3", State: sdk.RuntimeStateServing, AdminURL: "http://" + silent.Addr().String()},
		{Node: "node-4", State: sdk.RuntimeStateDraining},
	}
	s := serve(t, admin.Config{PeerTimeout: 300 * time.Millisecond}, n)
	resp, err := http.Get(s.URL() + "/mesh")
	require.NoError(t, err)
	defer resp.Body.Close()
	var v admin.MeshView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.Len(t, v.Nodes, 4)
	assert.Equal(t, "node-1", v.Node)
	assert.True(t, v.Nodes[0].Self)
	require.NotNil(t, v.Nodes[0].Status)
	require.NotNil(t, v.Nodes[1].Status, v.Nodes[1].Error)
	assert.Equal(t, "Serving", v.Nodes[1].Status.Runtime.State)
	assert.Nil(t, v.Nodes[2].Status)
	assert.Contains(t, v.Nodes[2].Error, "within 300ms")
	assert.Equal(t, "the node serves no admin page", v.Nodes[3].Error)

	// An address that leads to another node's server (a wildcard address published as it
	// is) shows that, not the other node's status under this name.
	n3 := newTestNode()
	n3.members = []admin.Member{
		{Node: "node-1", State: sdk.RuntimeStateServing, Self: true},
		{Node: "node-2", State: sdk.RuntimeStateServing, AdminURL: s.URL()}, // node-1's server
	}
	s3 := serve(t, admin.Config{PeerTimeout: 300 * time.Millisecond}, n3)
	resp2, err := http.Get(s3.URL() + "/mesh")
	require.NoError(t, err)
	defer resp2.Body.Close()
	var v2 admin.MeshView
	require.NoError(t, json.NewDecoder(resp2.Body).Decode(&v2))
	require.Len(t, v2.Nodes, 2)
	assert.Nil(t, v2.Nodes[1].Status)
	assert.Contains(t, v2.Nodes[1].Error, `answers for node "node-1", not "node-2"`)
	assert.Equal(t, "Draining", v.Nodes[3].RegisteredState)
}

// The application's handlers share the mux; a pattern that is empty, has no handler, is
// malformed or overlaps the server's own is refused, each with its reason.
func TestApplicationHandlers(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "mine") })
	s := serve(t, admin.Config{Handlers: map[string]http.Handler{"GET /metrics": ok}}, newTestNode())
	resp, err := http.Get(s.URL() + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "mine", string(b))

	err = admin.CheckHandlers(map[string]http.Handler{
		"":              ok,
		"/nil":          nil,
		"GET /status":   ok,
		"/debug/":       ok,
		"/assets/x.css": ok,
		"BAD PATTERN {": ok,
		"/fine":         ok,
	})
	require.ErrorIs(t, err, sdk.ErrConfig)
	for _, want := range []string{"an empty pattern", `"/nil" has a nil handler`, `"GET /status" overlaps`, `"/debug/" overlaps`, `"/assets/x.css" overlaps`, `"BAD PATTERN {"`} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "/fine")

	// A subtree whose path without its slash is one of the server's own would take the
	// requests for it that the server does not serve: ServeMux redirects them into the subtree.
	for pattern, own := range map[string]string{
		"/status/": "/status", "/events/": "/events", "POST /mesh/": "/mesh", "/relocate/": "/relocate",
		"DELETE /shutdown/": "/shutdown", "/assets": "/assets/", "/debug/pprof": "/debug/pprof/",
	} {
		err := admin.CheckHandlers(map[string]http.Handler{pattern: ok})
		require.ErrorIs(t, err, sdk.ErrConfig, pattern)
		assert.Contains(t, err.Error(), fmt.Sprintf("pattern %q overlaps the admin server's own %s", pattern, own))
	}
}

// An application's pattern with a wildcard that the server's own routes are more specific
// than is served beside them, and another method on those routes is still refused in JSON.
func TestApplicationWildcardsAreServedBesideTheOwnRoutes(t *testing.T) {
	mine := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "mine") })
	handlers := map[string]http.Handler{"GET /{name}": mine, "POST /{op}": mine, "PURGE /{key}": mine, "TRACE /{path}": mine}
	require.NoError(t, admin.CheckHandlers(handlers))
	s := serve(t, admin.Config{Handlers: handlers}, newTestNode())
	c := &http.Client{}
	defer c.CloseIdleConnections()
	resp, err := c.Get(s.URL() + "/anything")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "mine", string(b))
	resp, err = c.Get(s.URL() + "/status")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), `"runtime"`, "the server's own route")
	req, err := http.NewRequest(http.MethodDelete, s.URL()+"/status", nil)
	require.NoError(t, err)
	resp, err = c.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD, POST, PURGE, TRACE", resp.Header.Get("Allow"), "the application serves POST, PURGE and TRACE /status, named as ServeMux names them")
	assert.JSONEq(t, `{"error":"DELETE /status is not served: use GET, HEAD, POST, PURGE, TRACE"}`, string(b))
}

// A pattern that names a host is refused: ServeMux puts host patterns before the others, so
// even a catch-all such as "127.0.0.1/" would take the server's own routes for that host —
// the status, the page and the operations.
func TestApplicationHandlersNamingAHostAreRefused(t *testing.T) {
	mine := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "mine") })
	for _, pattern := range []string{"127.0.0.1/", "localhost/", "GET 127.0.0.1/{x}", "POST localhost/shutdown", "example.com/metrics"} {
		err := admin.CheckHandlers(map[string]http.Handler{pattern: mine})
		require.ErrorIs(t, err, sdk.ErrConfig, pattern)
		assert.Contains(t, err.Error(), fmt.Sprintf("pattern %q names a host", pattern))

		_, err = admin.Listen(admin.Config{Addr: "127.0.0.1:0", Loopback: true, Handlers: map[string]http.Handler{pattern: mine}})
		require.ErrorIs(t, err, sdk.ErrConfig, "no server takes %q", pattern)
	}
}

// A profile or a trace longer than MaxProfileDuration is refused in one clear line, and
// nothing is collected; one within it is served.
func TestAProfileLongerThanTheBoundIsRefused(t *testing.T) {
	s := serve(t, admin.Config{MaxProfileDuration: 2 * time.Second}, newTestNode())
	for _, path := range []string{
		"/debug/pprof/profile?seconds=3", "/debug/pprof/profile?seconds=1000000000",
		"/debug/pprof/trace?seconds=2.5", "/debug/pprof/trace?seconds=NaN", "/debug/pprof/trace?seconds=Inf",
		"/debug/pprof/heap?seconds=60", "/debug/pprof/allocs?seconds=3",
	} {
		start := time.Now()
		resp, err := http.Get(s.URL() + path)
		require.NoError(t, err, path)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		assert.Contains(t, string(body), "asks for a profile longer than the 2s this server allows", path)
		assert.Less(t, time.Since(start), time.Second, "%s was refused before any collection", path)
	}
	// In a POST's form too, where pprof reads it.
	resp, body := post(t, http.DefaultClient, s.URL()+"/debug/pprof/profile", "application/x-www-form-urlencoded", "seconds=30")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "asks for a profile longer than the 2s this server allows")

	resp, err := http.Get(s.URL() + "/debug/pprof/heap?seconds=1")
	require.NoError(t, err)
	body2, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body2))
}

// CloseWithin gives the requests under way its grace, not the server's own two seconds: a
// shutdown whose deadline is near returns by it though a request holds on (F10), and the
// request is cut off.
func TestCloseWithinCutsOffWhatIsLeftAtItsGrace(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	handled := make(chan struct{})
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handled)
		close(entered)
		// Not its context's end, which the close also brings: an answer written then would
		// be whole, and race the connection's close.
		<-release
	})
	t.Cleanup(func() {
		close(release)
		<-handled
	})
	s := serve(t, admin.Config{Handlers: map[string]http.Handler{"GET /hold": hold}}, newTestNode())
	ended := make(chan error, 1)
	go func() {
		resp, err := http.Get(s.URL() + "/hold")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		ended <- err
	}()
	<-entered
	start := time.Now()
	_ = s.CloseWithin(200 * time.Millisecond)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "the request had its grace")
	assert.Less(t, took, 1500*time.Millisecond, "not the server's own grace of 2 s")
	select {
	case err := <-ended:
		assert.Error(t, err, "the request was cut off")
	case <-time.After(10 * time.Second):
		t.Fatal("the request held on after the close")
	}
}

// H1: an event stream shows the host's stop though the server closes right after it, as it
// does when a shutdown ends at its deadline and leaves the server's requests little grace: the
// stop is written at once, not after the stream's pause between two snapshots.
func TestEventsShowTheStopThoughTheServerClosesAtOnce(t *testing.T) {
	n := newTestNode()
	s := serve(t, admin.Config{EventInterval: time.Second}, n)
	r, first := followEvents(t, s)
	require.Equal(t, "Serving", stateOf(t, first))
	n.publish(sdk.RuntimeStatus{State: sdk.RuntimeStateStopped, TerminationResult: &sdk.TerminationResult{}})
	n.runtime.Close()
	_ = s.CloseWithin(0)
	states := eventStates(t, r)
	require.NotEmpty(t, states)
	assert.Equal(t, "Stopped", states[len(states)-1], "%v", states)
}

// A trace that writes as it collects, a little at a time, is not cut off by the write
// deadline, which counts only the time spent writing, while its reader takes it.
func TestATraceThatWritesAsItGoesIsNotCutOff(t *testing.T) {
	s := serve(t, admin.Config{WriteTimeout: 300 * time.Millisecond}, newTestNode())
	resp, err := http.Get(s.URL() + "/debug/pprof/trace?seconds=2")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the whole trace")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.NotEmpty(t, body)
}

// An application's handler that hijacks its connection owns it: the server sets no write
// deadline on it, during the handler or after it returns.
func TestAHijackedConnectionIsTheApplications(t *testing.T) {
	const timeout = 200 * time.Millisecond
	wrote := make(chan error, 1)
	hijack := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			wrote <- err
			return
		}
		go func() {
			defer conn.Close()
			time.Sleep(5 * timeout) // past the server's write deadline, had it set one
			_, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			wrote <- err
		}()
	})
	s := serve(t, admin.Config{WriteTimeout: timeout, Handlers: map[string]http.Handler{"GET /hijack": hijack}}, newTestNode())
	resp, err := http.Get(s.URL() + "/hijack")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "ok", string(body))
	require.NoError(t, <-wrote)
}

// Over TLS the server speaks HTTP/1.1 though its TLS offers h2 (the mesh's gRPC needs it),
// also through GetConfigForClient: an HTTP/2 stream's write deadline would reset a trace
// between two of its writes.
func TestTheServerSpeaksHTTP1OverTLS(t *testing.T) {
	pki := rttest.NewPKI(t, "admin-ca")
	withH2 := &tls.Config{Certificates: []tls.Certificate{pki.Cert(t, "node-1")}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS13}
	perClient := &tls.Config{MinVersion: tls.VersionTLS13, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return withH2, nil }}
	for name, serverTLS := range map[string]*tls.Config{"offers h2": withH2, "offers h2 per client": perClient} {
		s := serve(t, admin.Config{Addr: "127.0.0.1:0", TLS: serverTLS, WriteTimeout: 300 * time.Millisecond}, newTestNode())
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool, MinVersion: tls.VersionTLS13}, ForceAttemptHTTP2: true}}
		resp, err := c.Get(s.URL() + "/debug/pprof/trace?seconds=1")
		require.NoError(t, err, name)
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		c.CloseIdleConnections()
		require.NoError(t, err, "%s: the whole trace", name)
		assert.Equal(t, http.StatusOK, resp.StatusCode, name)
		assert.Equal(t, "HTTP/1.1", resp.Proto, name)
	}
}
