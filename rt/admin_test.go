package rt_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/admin"
	"github.com/zlink-go/zlink/sdk"
)

// adminPair starts two nodes with admin servers on loopback, node-1 serving the embedded etcd.
func adminPair(t *testing.T, handlers map[string]http.Handler) (a, b *rt.Host) {
	t.Helper()
	var built atomic.Int64
	cfg := config(t, &built)
	cfg.NodeID, cfg.AdminAddr, cfg.AdminHandlers = "node-1", "127.0.0.1:0", handlers
	a, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	cfg = config(t, &built)
	cfg.NodeID, cfg.AdminAddr, cfg.EtcdEndpoints = "node-2", "127.0.0.1:0", a.EtcdEndpoints()
	b, err = rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	waitPeers(t, a, "node-2")
	waitPeers(t, b, "node-1")
	return a, b
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// keyPaths lists the object keys of a JSON value as paths (a.b.c; lists as a.b[]).
func keyPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out[prefix+k] = true
			keyPaths(e, prefix+k+".", out)
		}
	case []any:
		for _, e := range x {
			keyPaths(e, strings.TrimSuffix(prefix, ".")+"[].", out)
		}
	}
}

// A node with AdminAddr serves its statuses: /status as the documented JSON (every name in
// it is one of the golden document's), the page, the mesh view with both nodes' statuses,
// pprof and the application's handlers; its URL is in its registration.
func TestAdminServesTheNodeItsMeshAndTheApplicationsHandlers(t *testing.T) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	a, b := adminPair(t, map[string]http.Handler{"GET /hello": hello})
	require.True(t, strings.HasPrefix(a.AdminURL(), "http://127.0.0.1:"), a.AdminURL())

	var doc admin.Status
	getJSON(t, a.AdminURL()+"/status", &doc)
	assert.Equal(t, "node-1", doc.Node)
	assert.Equal(t, "Serving", doc.Runtime.State)
	assert.True(t, doc.Runtime.IsReady)
	require.Len(t, doc.MeshStatus.Peers, 1)
	assert.Equal(t, admin.PeerDoc{Node: "node-2", State: "Ready"}, doc.MeshStatus.Peers[0])
	assert.Positive(t, doc.Capacity.CoreHwm.EffectiveBudgetBytes)
	assert.Nil(t, doc.Relocation)

	add(t, a, "counted", 1)
	var raw map[string]any
	getJSON(t, a.AdminURL()+"/status", &raw)
	assert.Positive(t, raw["activity"].(map[string]any)["turns"], "the call took a turn")
	golden, err := os.ReadFile(filepath.Join("internal", "admin", "testdata", "status.golden.json"))
	require.NoError(t, err)
	var goldenDoc any
	require.NoError(t, json.Unmarshal(golden, &goldenDoc))
	want, got := map[string]bool{}, map[string]bool{}
	keyPaths(goldenDoc, "", want)
	keyPaths(raw, "", got)
	for k := range got {
		assert.True(t, want[k], "field %s of a live node's /status is not in the golden document", k)
	}

	var view admin.MeshView
	getJSON(t, b.AdminURL()+"/mesh", &view)
	require.Len(t, view.Nodes, 2)
	assert.Equal(t, "node-2", view.Node)
	for i, want := range []string{"node-1", "node-2"} {
		n := view.Nodes[i]
		assert.Equal(t, want, n.Node)
		require.NotNil(t, n.Status, n.Error)
		assert.Equal(t, want, n.Status.Node)
		assert.Equal(t, "Serving", n.Status.Runtime.State)
	}
	assert.Equal(t, a.AdminURL(), view.Nodes[0].AdminURL, "node-1's URL comes from its registration")

	for path, want := range map[string]string{"/": `id="state-badge"`, "/assets/app.js": "EventSource", "/debug/pprof/": "goroutine", "/hello": "hello"} {
		resp, err := http.Get(a.AdminURL() + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, string(body), want, path)
	}

	nodes, err := rt.ListNodes(ctx, rt.Config{EtcdEndpoints: a.EtcdEndpoints()})
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	assert.Equal(t, rt.NodeInfo{ID: "node-1", State: sdk.RuntimeStateServing, ObjectServer: true, AdminURL: a.AdminURL()}, nodes[0])
	assert.Equal(t, b.AdminURL(), nodes[1].AdminURL)
}

// readProgress reads a POST's answer stream to its end.
func readProgress(t *testing.T, resp *http.Response) []admin.Progress {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []admin.Progress
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var p admin.Progress
		require.NoError(t, json.Unmarshal(sc.Bytes(), &p), sc.Text())
		out = append(out, p)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out)
	require.True(t, out[len(out)-1].Done, "the stream ends with the result")
	return out
}

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	return resp
}

// F10 over HTTP: a relocation started by POST /relocate reports its progress; another with a
// different mode while it runs gets Blocked/OperationInProgress at once and changes nothing;
// the first ends with its own result (here no node of version 9: TargetUnavailable, F6).
// Then POST /shutdown drains node-2 to Stopped, a second POST afterwards finds nothing to
// reach, and node-1's status shows the peer gone.
func TestAdminRelocateAndShutdownOverHTTP(t *testing.T) {
	a, b := adminPair(t, nil)
	_, err := a.Call(ctx, sdk.InstanceIntent("test.Counter", "stays"), "Add", wrapperspb.Int64(1), sdk.OnNode("node-1"))
	require.NoError(t, err)

	first := make(chan []admin.Progress, 1)
	go func() {
		resp, err := http.Post(a.AdminURL()+"/relocate", "application/json", strings.NewReader(`{"mode":"rolling","targetApplicationVersion":9,"deadline":"2s"}`))
		if err != nil {
			first <- nil
			return
		}
		var out []admin.Progress
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var p admin.Progress
			if json.Unmarshal(sc.Bytes(), &p) == nil {
				out = append(out, p)
			}
		}
		resp.Body.Close()
		first <- out
	}()
	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateRelocating }, 10*time.Second, 10*time.Millisecond)
	other := readProgress(t, postJSON(t, a.AdminURL()+"/relocate", `{"mode":"planned"}`))
	last := other[len(other)-1]
	require.NotNil(t, last.RelocationResult, last.Error)
	assert.Equal(t, admin.RelocationResultDoc{Mode: "PlannedMaintenance", TargetApplicationVersion: 0, Outcome: "Blocked", Reason: "OperationInProgress"}, *last.RelocationResult)

	progress := <-first
	require.NotEmpty(t, progress)
	require.NotNil(t, progress[0].Relocation, "the first line shows the relocation begun")
	assert.Equal(t, "RollingUpdate", progress[0].Relocation.Mode)
	assert.True(t, slices.ContainsFunc(progress, func(p admin.Progress) bool { return p.State == "Relocating" && p.Relocation.Running }))
	done := progress[len(progress)-1]
	require.True(t, done.Done)
	require.NotNil(t, done.RelocationResult)
	assert.Equal(t, "Blocked", done.RelocationResult.Outcome)
	assert.Equal(t, "TargetUnavailable", done.RelocationResult.Reason)
	assert.Equal(t, "Serving", done.State, "Blocked: the node serves again (F7)")

	url := b.AdminURL()
	steps := readProgress(t, postJSON(t, url+"/shutdown", `{"deadline":"10s"}`))
	var states []string
	for _, p := range steps {
		states = append(states, p.State)
	}
	assert.Contains(t, states, "Draining")
	end := steps[len(steps)-1]
	assert.Equal(t, "Stopped", end.State)
	require.NotNil(t, end.TerminationResult)
	assert.Equal(t, admin.TerminationResultDoc{Outcome: "Stopped", Reason: "None"}, *end.TerminationResult)
	assert.Equal(t, sdk.RuntimeStateStopped, b.Status().State)

	// Asked again after the end, the stopped node's admin server is gone with it. A new
	// connection asks: one the default client kept from the requests before may be found closed
	// (EOF) rather than refused.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	_, err = fresh.Post(url+"/shutdown", "application/json", strings.NewReader("{}"))
	require.Error(t, err)
	var netErr *net.OpError
	assert.ErrorAs(t, err, &netErr)

	require.Eventually(t, func() bool {
		var doc admin.Status
		getJSON(t, a.AdminURL()+"/status", &doc)
		return !slices.ContainsFunc(doc.MeshStatus.Peers, func(p admin.PeerDoc) bool { return p.Node == "node-2" && p.State == "Ready" })
	}, 30*time.Second, 50*time.Millisecond)
}

// The admin settings are checked with the rest of the configuration: a network address
// without TLS, an address that is not host:port, handlers without a server or overlapping its
// own; an address already taken fails Start with the address named.
func TestAdminConfigIsValidated(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.AdminAddr = "0.0.0.0:9090"
	err := cfg.Validate()
	require.ErrorIs(t, err, sdk.ErrConfig)
	assert.Contains(t, err.Error(), "the admin server listens on 0.0.0.0:9090 without TLS")
	cfg.InsecurePlaintext = true
	require.NoError(t, cfg.Validate())

	cfg = rt.DefaultConfig()
	cfg.AdminAddr = "nonsense"
	assert.ErrorContains(t, cfg.Validate(), `AdminAddr "nonsense" is not host:port`)

	cfg = rt.DefaultConfig()
	cfg.AdminHandlers = map[string]http.Handler{"/metrics": http.NotFoundHandler()}
	assert.ErrorContains(t, cfg.Validate(), "AdminHandlers are set but AdminAddr is not")
	cfg.AdminAddr = "127.0.0.1:0"
	require.NoError(t, cfg.Validate())
	cfg.AdminHandlers["POST /shutdown"] = http.NotFoundHandler()
	assert.ErrorContains(t, cfg.Validate(), `pattern "POST /shutdown" overlaps the admin server's own /shutdown`)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	var built atomic.Int64
	cfg = config(t, &built)
	cfg.AdminAddr = taken.Addr().String()
	_, err = rt.Start(ctx, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "admin: listen on "+taken.Addr().String())
}

// ListNodes needs endpoints, and names an etcd that does not answer.
func TestListNodesErrors(t *testing.T) {
	_, err := rt.ListNodes(ctx, rt.Config{})
	require.ErrorIs(t, err, sdk.ErrConfig)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := dead.Addr().String()
	require.NoError(t, dead.Close())
	_, err = rt.ListNodes(ctx, rt.Config{EtcdEndpoints: []string{addr}, EtcdDialTimeout: 500 * time.Millisecond})
	require.Error(t, err)
	assert.Contains(t, err.Error(), addr)
	_, err = rt.ListNodes(ctx, rt.Config{EtcdEndpoints: []string{addr}, MeshName: "bad mesh\x00"})
	require.Error(t, err)
}
