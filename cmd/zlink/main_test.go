package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// counterDesc is an Instance Spot type that counts, so that the nodes have objects to move.
var counterDesc = &sdk.SpotDesc{Name: "zlinkcmd.Counter", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Add",
	NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
	NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
	Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
		c := impl.(*counter)
		c.n += req.(*wrapperspb.Int64Value).GetValue()
		return wrapperspb.Int64(c.n), nil
	},
}}}

type counter struct{ n int64 }

// MarshalState makes the counter relocatable with its count.
func (c *counter) MarshalState(context.Context) ([]byte, error) {
	return proto.Marshal(wrapperspb.Int64(c.n))
}

// startNode starts a node with an admin server on loopback (etcd: the first node's embedded
// one, or the given endpoints), closed at the end of the test.
func startNode(t *testing.T, id string, version int64, etcd []string, admin bool) *rt.Host {
	t.Helper()
	cfg := rt.DefaultConfig()
	cfg.NodeID, cfg.ApplicationVersion, cfg.EtcdEndpoints = sdk.NodeID(id), version, etcd
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.StopTimeout = 20 * time.Second
	if admin {
		cfg.AdminAddr = "127.0.0.1:0"
	}
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(counterDesc, func(sc sdk.SpotContext) (any, error) {
			c := &counter{}
			if st := sc.RestoredState(); st != nil {
				var v wrapperspb.Int64Value
				if err := proto.Unmarshal(st, &v); err != nil {
					return nil, err
				}
				c.n = v.GetValue()
			}
			return c, nil
		})
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// cli runs the command line and returns its exit code, stdout and stderr.
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func waitReady(t *testing.T, hosts ...*rt.Host) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, h := range hosts {
			if h.MeshStatus().ReadyPeerCount != len(hosts)-1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
}

// zlink status prints every node of a real two-node mesh as its own /status says, and a node
// registered without an admin server as its registration says.
func TestStatusPrintsTheMeshTable(t *testing.T) {
	a := startNode(t, "node-1", 1, nil, true)
	etcd := strings.Join(a.EtcdEndpoints(), ",")
	b := startNode(t, "node-2", 1, a.EtcdEndpoints(), true)
	c := startNode(t, "node-3", 1, a.EtcdEndpoints(), false)
	waitReady(t, a, b, c)
	// A node publishes Serving in its registration a moment after it serves: the table reads
	// the registrations.
	require.Eventually(t, func() bool {
		nodes, err := rt.ListNodes(ctx, rt.Config{EtcdEndpoints: a.EtcdEndpoints()})
		if err != nil || len(nodes) != 3 {
			return false
		}
		for _, n := range nodes {
			if n.State != sdk.RuntimeStateServing {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)

	code, out, errOut := cli("status", "-etcd", etcd)
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Regexp(t, `^NODE\s+VERSION\s+STATE\s+MESH\s+READY\s+PEERS\s+SPOTS\s+ACTORS\s+PLACEMENT\s+ADMIN$`, lines[0])
	assert.Regexp(t, `^node-1\s+1\s+Serving\s+Ready\s+true\s+node-2:Ready node-3:Ready\s+0\s+0\s+available\s+`+a.AdminURL()+`$`, lines[1])
	assert.Regexp(t, `^node-2\s+1\s+Serving\s+Ready\s+true\s+node-1:Ready node-3:Ready\s+`, lines[2])
	assert.Regexp(t, `^node-3\s+1\s+Serving \(registered\)\s+.*none: no admin server$`, lines[3])

	code, out, _ = cli("status", "-etcd", etcd, "-mesh", "elsewhere")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "no node is registered in mesh \"elsewhere\"\n", out)
}

// zlink relocate moves node-1's objects to node-2 (planned maintenance, the same version),
// printing the progress until Relocated; a relocation of another mode while one runs answers
// Blocked/OperationInProgress and exits 1; zlink shutdown stops node-1 and prints Stopped, and
// a second shutdown finds it gone.
func TestRelocateAndShutdownANode(t *testing.T) {
	a := startNode(t, "node-1", 1, nil, true)
	etcd := strings.Join(a.EtcdEndpoints(), ",")
	b := startNode(t, "node-2", 1, a.EtcdEndpoints(), true)
	waitReady(t, a, b)
	for i := range 20 {
		_, err := a.Call(ctx, sdk.InstanceIntent(counterDesc.Name, "c"+string(rune('a'+i))), "Add", wrapperspb.Int64(int64(i)), sdk.OnNode("node-1"))
		require.NoError(t, err)
	}

	// A rolling update to a version no node runs waits for a target (F6) until its deadline;
	// meanwhile a planned relocation is refused as another operation in progress (F10).
	blocked := make(chan [3]string, 1)
	go func() {
		code, out, errOut := cli("relocate", "-etcd", etcd, "-node", "node-1", "-mode", "rolling", "-version", "7", "-deadline", "2s")
		blocked <- [3]string{string(rune('0' + code)), out, errOut}
	}()
	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateRelocating }, 10*time.Second, 10*time.Millisecond)
	code, out, errOut := cli("relocate", "-etcd", etcd, "-node", "node-1", "-mode", "planned")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, out, "node-1 Relocating: Blocked/OperationInProgress (PlannedMaintenance to version 1)")
	assert.Equal(t, "zlink relocate: node node-1 did not relocate: OperationInProgress\n", errOut)
	r := <-blocked
	assert.Equal(t, "1", r[0])
	assert.Contains(t, r[1], "node-1 Relocating: 0 of 20 units moved")
	assert.Contains(t, r[1], "node-1 Serving: Blocked/TargetUnavailable (RollingUpdate to version 7)")
	assert.Equal(t, "zlink relocate: node node-1 did not relocate: TargetUnavailable\n", r[2])

	code, out, errOut = cli("relocate", "-etcd", etcd, "-node", "node-1", "-mode", "planned", "-deadline", "30s")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "node-1 Relocating")
	assert.True(t, strings.HasSuffix(out, "node-1 Relocated: Relocated/None (PlannedMaintenance to version 1)\n"), out)
	assert.Zero(t, a.MeshStatus().Placement.ActiveSpotCount, "every Spot moved")
	got, err := b.Call(ctx, sdk.InstanceTarget(counterDesc.Name, "ck"), "Add", wrapperspb.Int64(0))
	require.NoError(t, err)
	assert.Equal(t, int64(10), got.(*wrapperspb.Int64Value).GetValue(), "moved with its state")

	code, out, errOut = cli("shutdown", "-etcd", etcd, "-node", "node-2", "-deadline", "15s")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "node-2 Draining\n")
	assert.True(t, strings.HasSuffix(out, "node-2 Stopped: Stopped/None\n"), out)
	assert.Equal(t, sdk.RuntimeStateStopped, b.Status().State)

	code, _, errOut = cli("shutdown", "-etcd", etcd, "-node", "node-2")
	assert.Equal(t, exitFailed, code)
	assert.Equal(t, "zlink shutdown: node node-2 is not registered in mesh \"default\" (registered: node-1)\n", errOut)
}

// A registration whose admin URL leads to another node's server (a node replaced on the same
// fixed port, a wildcard address) gets the other node neither operated nor shown as the one
// named: shutdown and relocate are refused by the server that answers, which is told the node
// meant, and status shows the mismatch on that node's row.
func TestOperationsReachOnlyTheNodeNamed(t *testing.T) {
	a := startNode(t, "node-1", 1, nil, true)
	etcd := strings.Join(a.EtcdEndpoints(), ",")
	b := startNode(t, "node-2", 1, a.EtcdEndpoints(), true)
	waitReady(t, a, b)
	require.Eventually(t, func() bool {
		nodes, err := rt.ListNodes(ctx, rt.Config{EtcdEndpoints: a.EtcdEndpoints()})
		return err == nil && len(nodes) == 2 && nodes[0].State == sdk.RuntimeStateServing && nodes[1].State == sdk.RuntimeStateServing
	}, 30*time.Second, 20*time.Millisecond)

	// node-2's registration now names node-1's admin server. The two URLs differ only in
	// their ports, which have the same length, so the descriptor stays valid.
	require.Len(t, b.AdminURL(), len(a.AdminURL()), "the test needs ports of one length")
	cli3, err := clientv3.New(clientv3.Config{Endpoints: a.EtcdEndpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli3.Close()
	got, err := cli3.Get(ctx, "", clientv3.WithPrefix())
	require.NoError(t, err)
	rewritten := 0
	for _, kv := range got.Kvs {
		if strings.Contains(string(kv.Key), "node-2") && bytes.Contains(kv.Value, []byte(b.AdminURL())) {
			v := bytes.ReplaceAll(kv.Value, []byte(b.AdminURL()), []byte(a.AdminURL()))
			_, err := cli3.Put(ctx, string(kv.Key), string(v), clientv3.WithIgnoreLease())
			require.NoError(t, err)
			rewritten++
		}
	}
	require.Equal(t, 1, rewritten, "node-2's registration")
	require.Eventually(t, func() bool {
		nodes, err := rt.ListNodes(ctx, rt.Config{EtcdEndpoints: a.EtcdEndpoints()})
		return err == nil && len(nodes) == 2 && nodes[1].AdminURL == a.AdminURL()
	}, 10*time.Second, 20*time.Millisecond)

	refusal := fmt.Sprintf("node node-2 refused (409 Conflict): the admin server at %s is node node-1's, not node node-2's", strings.TrimPrefix(a.AdminURL(), "http://"))
	code, out, errOut := cli("shutdown", "-etcd", etcd, "-node", "node-2", "-deadline", "15s")
	assert.Equal(t, exitFailed, code, out)
	assert.Empty(t, out)
	assert.Equal(t, "zlink shutdown: "+refusal+"\n", errOut)
	code, out, errOut = cli("relocate", "-etcd", etcd, "-node", "node-2", "-mode", "planned")
	assert.Equal(t, exitFailed, code, out)
	assert.Empty(t, out)
	assert.Equal(t, "zlink relocate: "+refusal+"\n", errOut)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "node-1 was not operated")
	assert.Nil(t, a.Status().RelocationResult, "node-1 did not relocate")

	code, out, errOut = cli("status", "-etcd", etcd)
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.Regexp(t, `^node-1\s+1\s+Serving\s+Ready\s+true\s+node-2:Ready\s+`, lines[1])
	assert.Regexp(t, `^node-2\s+1\s+Serving \(registered\)\s+-.*`+a.AdminURL()+`: answers for node "node-1", not "node-2"$`, lines[2])
}

// Bad command lines and unreachable places get one line that names the problem, and start
// nothing.
func TestBadInputGetsOneClearLine(t *testing.T) {
	a := startNode(t, "node-1", 1, nil, true)
	etcd := strings.Join(a.EtcdEndpoints(), ",")
	startNode(t, "node-2", 1, a.EtcdEndpoints(), false)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())

	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, exitUsage, `zlink: unknown command "frobnicate": use status, relocate or shutdown`},
		{[]string{"status"}, exitUsage, "zlink status: -etcd is required"},
		{[]string{"status", "-etcd", etcd, "-bogus"}, exitUsage, "zlink status: flag provided but not defined: -bogus (zlink status -h lists the flags)"},
		{[]string{"status", "-etcd", etcd, "extra"}, exitUsage, `zlink status: unexpected arguments ["extra"]`},
		{[]string{"status", "-etcd", etcd, "-timeout", "0s"}, exitUsage, "zlink status: -timeout 0s: it must be positive"},
		{[]string{"status", "-etcd", etcd, "-cert", "c.pem"}, exitUsage, "zlink status: -cert and -key go together"},
		{[]string{"status", "-etcd", etcd, "-cacert", "/nonexistent/ca.pem"}, exitFailed, "zlink status: -cacert: open /nonexistent/ca.pem"},
		{[]string{"status", "-etcd", deadAddr, "-timeout", "500ms"}, exitFailed, "zlink status: rt: etcd at " + deadAddr},
		{[]string{"relocate", "-etcd", etcd, "-mode", "planned"}, exitUsage, "zlink relocate: -node is required"},
		{[]string{"relocate", "-etcd", etcd, "-node", "bad\x00id", "-mode", "planned"}, exitUsage, "zlink relocate: -node: "},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-1"}, exitUsage, "zlink relocate: -mode is required: planned or rolling"},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-1", "-mode", "sideways"}, exitUsage, `zlink relocate: -mode "sideways": use planned or rolling`},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-1", "-mode", "planned", "-version", "2"}, exitUsage, "zlink relocate: -mode planned takes no -version"},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-1", "-mode", "rolling"}, exitUsage, "zlink relocate: -mode rolling needs -version"},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-1", "-mode", "rolling", "-version", "two"}, exitUsage, `zlink relocate: invalid value "two" for flag -version`},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-1", "-mode", "rolling", "-version", "1"}, exitFailed, "zlink relocate: node node-1 refused (400 Bad Request): zlink: invalid argument: RollingUpdate target application version 1 is not greater than the source's 1"},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-9", "-mode", "planned"}, exitFailed, `zlink relocate: node node-9 is not registered in mesh "default" (registered: node-1, node-2)`},
		{[]string{"relocate", "-etcd", etcd, "-node", "node-2", "-mode", "planned"}, exitFailed, "zlink relocate: node node-2 serves no admin server (its AdminAddr is not set)"},
		{[]string{"shutdown", "-etcd", etcd, "-node", "node-1", "-deadline", "-1s"}, exitUsage, "zlink shutdown: -deadline -1s: it must be positive"},
		{[]string{"shutdown", "-etcd", etcd, "-node", "node-1", "-deadline", "48h"}, exitFailed, "zlink shutdown: node node-1 refused (400 Bad Request): deadline 48h0m0s is out of range"},
		{[]string{"shutdown", "-etcd", etcd, "-node", "node-1", "-etcd-user", "ops"}, exitUsage, "zlink shutdown: -etcd-user needs the password in ZLINK_ETCD_PASSWORD"},
	}
	for _, tc := range cases {
		code, out, errOut := cli(tc.args...)
		assert.Equal(t, tc.code, code, "%q: %s", tc.args, errOut)
		assert.Empty(t, out, "%q", tc.args)
		assert.True(t, strings.HasPrefix(errOut, tc.want), "%q:\n got %q\nwant %q", tc.args, errOut, tc.want)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		assert.NotContains(t, errOut, "goroutine", "no stack trace")
	}
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "nothing was started")

	code, out, _ := cli("relocate", "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "usage: zlink relocate -etcd")
	code, _, errOut := cli()
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "usage: zlink <command>")
}
