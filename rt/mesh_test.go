package rt_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// cluster is several hosts in this process on one embedded etcd, talking over real gRPC on
// loopback.
type cluster struct {
	endpoints []string
	hosts     []*rt.Host
	runs      *rttest.Runs
	mu        sync.Mutex
	built     map[string]int // Ledger ID -> factory runs, over all hosts
	builtOn   []atomic.Int64 // factory runs per host
}

func newCluster(t *testing.T, n int, mutate func(i int, cfg *rt.Config)) *cluster {
	t.Helper()
	srv, err := devetcd.Start(ctx, devetcd.WithoutFsync(), devetcd.WithMaxTxnOps(1024))
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c := &cluster{endpoints: srv.Endpoints(), runs: &rttest.Runs{}, built: map[string]int{}, builtOn: make([]atomic.Int64, n)}
	for i := range n {
		c.hosts = append(c.hosts, c.start(t, i, mutate))
	}
	// Every host sees every other as a Ready peer, and as Serving in its view of the mesh,
	// before the test begins: placement and relocation choose among the nodes they see Serving.
	for _, h := range c.hosts {
		require.Eventually(t, func() bool {
			st := h.MeshStatus()
			return len(st.Peers) == n-1 && st.State == sdk.TopologyStateReady && h.ServingMembers() == n
		}, 15*time.Second, 10*time.Millisecond, "mesh of %s never ready: %+v, %d nodes Serving", h.LocalNode(), h.MeshStatus(), h.ServingMembers())
	}
	return c
}

func (c *cluster) start(t *testing.T, i int, mutate func(i int, cfg *rt.Config)) *rt.Host {
	t.Helper()
	cfg := rt.DefaultConfig()
	cfg.NodeID = sdk.NodeID(fmt.Sprintf("node-%c", 'a'+i))
	cfg.EtcdEndpoints = c.endpoints
	cfg.EtcdMaxTxnOps = 1024
	cfg.LeaseTTL = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.StopTimeout = 20 * time.Second
	cfg.Register = func(r sdk.Registrar) error {
		return rttest.RegisterLedger(r, c.runs.Add, func(id string) {
			c.mu.Lock()
			c.built[id]++
			c.mu.Unlock()
			c.builtOn[i].Add(1)
		})
	}
	if mutate != nil {
		mutate(i, &cfg)
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func (c *cluster) factoryRuns(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.built[id]
}

func ledger(id string) sdk.Target {
	return sdk.InstanceTarget(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
}

func openLedger(id string) sdk.Target {
	return sdk.InstanceIntent(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)
}

func record(c sdk.Client, t sdk.Target, msg string, opts ...sdk.CallOption) (string, error) {
	out, err := c.Call(ctx, t, rttest.LedgerRecord, wrapperspb.String(msg), opts...)
	if err != nil {
		return "", err
	}
	return out.(*wrapperspb.StringValue).GetValue(), nil
}

func TestRemoteCallThroughTheSameAPI(t *testing.T) {
	c := newCluster(t, 3, nil)
	a, b := c.hosts[0], c.hosts[1]
	_, err := record(a, openLedger("r1"), "m0", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.builtOn[1].Load(), "created on node b as asked")
	for i := range 50 {
		got, err := record(a, ledger("r1"), fmt.Sprint("m", i+1))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint("m", i+1), got)
	}
	require.NoError(t, a.Send(ctx, ledger("r1"), rttest.LedgerNote, wrapperspb.String("note-1")))
	require.Eventually(t, func() bool { return c.runs.Count("note-1") == 1 }, 5*time.Second, time.Millisecond, "a one-way send is delivered")
	assert.Equal(t, 1, c.factoryRuns("r1"))

	_, err = a.Call(ctx, ledger("missing"), rttest.LedgerRecord, wrapperspb.String("x"))
	require.ErrorIs(t, err, sdk.ErrNotFound, "a plain call never creates, across nodes too (B1)")
	_, err = a.Call(ctx, ledger("r1"), "NoSuchMethod", wrapperspb.String("x"))
	require.ErrorIs(t, err, sdk.ErrUnhandled, "an unknown method at the receiver")
}

func TestK3_RemoteConcurrentCreateRunsFactoryOnce(t *testing.T) {
	c := newCluster(t, 3, nil)
	const trials, callers = 300, 16
	for trial := range trials {
		id := fmt.Sprintf("k3-%d", trial)
		// Half the trials let placement choose; the other half make every node create on
		// itself, so that the three nodes race in the store.
		local := trial%2 == 1
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 3*callers)
		for i := range errs {
			h := c.hosts[i%3]
			var opts []sdk.CallOption
			if local {
				opts = append(opts, sdk.OnNode(h.LocalNode()))
			}
			wg.Go(func() {
				<-start
				_, errs[i] = record(h, openLedger(id), fmt.Sprintf("%s-%d", id, i), opts...)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "trial %d caller %d", trial, i)
		}
		require.Equal(t, 1, c.factoryRuns(id), "trial %d: the factory runs exactly once", trial)
	}
	assert.Empty(t, c.runs.Twice())
}

func TestK6_RecreatedObjectTakesPlainMessages(t *testing.T) {
	c := newCluster(t, 3, nil)
	a, b, caller := c.hosts[0], c.hosts[1], c.hosts[2]
	_, err := record(b, openLedger("k6"), "first", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	_, err = record(caller, ledger("k6"), "cached") // the caller now has a Ready route to a
	require.NoError(t, err)
	require.NoError(t, b.CloseSpot(ctx, ledger("k6")))
	_, err = record(b, openLedger("k6"), "recreated", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	assert.Equal(t, 2, c.factoryRuns("k6"), "a new activation, a new generation")

	// The route still names node a, which owns the new incarnation: no generation check (C2).
	got, err := record(caller, ledger("k6"), "after")
	require.NoError(t, err)
	assert.Equal(t, "after", got)
	out, err := caller.Call(ctx, ledger("k6"), rttest.LedgerCount, wrapperspb.Int64(0))
	require.NoError(t, err)
	assert.Equal(t, int64(2), out.(*wrapperspb.Int64Value).GetValue(), "recreated + after ran on the new activation")
}

func TestK7_StaleOwnerEndsWithErrorAndNoRetry(t *testing.T) {
	c := newCluster(t, 3, nil)
	a, b, caller := c.hosts[0], c.hosts[1], c.hosts[2]
	_, err := record(a, openLedger("k7"), "first", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	_, err = record(caller, ledger("k7"), "cached")
	require.NoError(t, err)
	require.NoError(t, a.CloseSpot(ctx, ledger("k7")))
	_, err = record(b, openLedger("k7"), "moved", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)

	_, err = record(caller, ledger("k7"), "stale")
	require.ErrorIs(t, err, sdk.ErrStaleRoute, "the old owner refuses: not the owner (C1)")

	got, err := record(caller, ledger("k7"), "fresh")
	require.NoError(t, err, "the application's new call resolves the new owner")
	assert.Equal(t, "fresh", got)
	// A retry of the refused message would have reached the new owner before the new call.
	assert.Equal(t, 0, c.runs.Count("stale"), "the refused message never ran, and was not retried (C3)")
}

func TestPlacementFollowsWeights(t *testing.T) {
	weights := []uint32{1, 2, 3}
	c := newCluster(t, 3, func(i int, cfg *rt.Config) { cfg.Weight = weights[i] })
	const creations = 10_000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range creations {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := record(c.hosts[i%3], openLedger(fmt.Sprint("w-", i)), "x")
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	total := 0.0
	for _, w := range weights {
		total += float64(w)
	}
	for i, w := range weights {
		share := float64(c.builtOn[i].Load()) / creations
		want := float64(w) / total
		assert.InDelta(t, want, share, 0.05, "node %d: %.3f of the creations, weight share %.3f", i, share, want)
		t.Logf("node %d weight %d: %.3f (weight share %.3f)", i, w, share, want)
	}
}

func TestD6_PlacementRespectsCaps(t *testing.T) {
	c := newCluster(t, 3, func(i int, cfg *rt.Config) {
		if i == 0 {
			cfg.MaxActiveObjects = 20
		}
	})
	for i := range 300 {
		_, err := record(c.hosts[i%3], openLedger(fmt.Sprint("cap-", i)), "x")
		require.NoError(t, err, "creation %d: placement finds a node with room", i)
	}
	assert.LessOrEqual(t, c.builtOn[0].Load(), int64(20), "node a never exceeds its cap")
	assert.Equal(t, int64(300), c.builtOn[0].Load()+c.builtOn[1].Load()+c.builtOn[2].Load())
	require.Eventually(t, func() bool { return !c.hosts[0].MeshStatus().Placement.IsAvailable }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, sdk.TopologyReasonCapacityExceeded, *c.hosts[0].MeshStatus().Placement.UnavailableReason)
}

func TestDeadlineAndCancellationReachTheRemoteSide(t *testing.T) {
	c := newCluster(t, 2, nil)
	a, b := c.hosts[0], c.hosts[1]
	_, err := record(a, openLedger("slow"), "x", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = a.Call(cctx, ledger("slow"), rttest.LedgerSleep, wrapperspb.Int64(10_000))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 3*time.Second)
	ended := func() int {
		return c.runs.Count("sleep-ended:context deadline exceeded") + c.runs.Count("sleep-ended:context canceled")
	}
	// The remote context ends at the deadline it was sent with, or at the caller's cancel that
	// follows its own deadline, whichever arrives first.
	require.Eventually(t, func() bool { return ended() == 1 }, 5*time.Second, 5*time.Millisecond,
		"the remote handler's context ended with the caller's deadline")

	cctx, cancel = context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = a.Call(cctx, ledger("slow"), rttest.LedgerSleep, wrapperspb.Int64(10_000))
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { return ended() == 2 }, 5*time.Second, 5*time.Millisecond,
		"the caller's cancellation reached the remote handler")
}

func TestMaxMessageSizeBetweenNodes(t *testing.T) {
	c := newCluster(t, 2, func(_ int, cfg *rt.Config) { cfg.MaxMessageSize = 1 << 10 })
	a, b := c.hosts[0], c.hosts[1]
	_, err := record(a, openLedger("big"), "x", sdk.OnNode(b.LocalNode()))
	require.NoError(t, err)
	big := string(make([]byte, 2<<10))
	_, err = record(a, ledger("big"), big)
	require.ErrorIs(t, err, sdk.ErrMessageTooLarge)
	assert.Contains(t, err.Error(), "over the limit of 1024")
	_, err = record(a, ledger("big"), "small")
	require.NoError(t, err, "the connection survives")
}

func TestUnknownTypeAtReceiverIsUnhandled(t *testing.T) {
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		if i == 1 {
			cfg.Register = nil // node b hosts nothing
		}
	})
	_, err := record(c.hosts[0], openLedger("x"), "x", sdk.OnNode(c.hosts[1].LocalNode()))
	require.ErrorIs(t, err, sdk.ErrUnhandled)
	assert.Contains(t, err.Error(), "not registered on node node-b")
}

func TestG3_MeshStatusAndG4_ObjectClientsDoNotConnect(t *testing.T) {
	c := newCluster(t, 2, nil)
	// Two pure Object Clients join.
	clientCfg := func(id string) rt.Config {
		cfg := rt.DefaultConfig()
		cfg.NodeID = sdk.NodeID(id)
		cfg.Roles = rt.RoleObjectClient
		cfg.EtcdEndpoints = c.endpoints
		cfg.Logger = slog.New(slog.DiscardHandler)
		return cfg
	}
	var clients []*rt.Host
	for _, id := range []string{"client-x", "client-y"} {
		h, err := rt.Start(ctx, clientCfg(id))
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		clients = append(clients, h)
	}
	x := clients[0]
	require.Eventually(t, func() bool {
		st := x.MeshStatus()
		return st.ReadyPeerCount == 2 && len(st.Peers) == 3
	}, 15*time.Second, 10*time.Millisecond, "%+v", x.MeshStatus())
	st := x.MeshStatus()
	states := map[sdk.NodeID]sdk.PeerState{}
	for _, p := range st.Peers {
		states[p.NodeRid] = p.State
	}
	assert.Equal(t, map[sdk.NodeID]sdk.PeerState{"node-a": sdk.PeerStateReady, "node-b": sdk.PeerStateReady, "client-y": sdk.PeerStateNotRequired}, states)
	assert.Equal(t, 2, st.ReadyPeerCount, "NotRequired is not counted")
	assert.Equal(t, sdk.TopologyStateReady, st.State, "a NotRequired peer does not degrade the mesh")
	assert.True(t, st.IsReady)
	assert.False(t, st.Placement.IsAvailable, "an Object Client takes no Spots (G5)")
	assert.Equal(t, "default", st.MeshName)

	// The client calls everything: it hosts nothing, and placement never picks it.
	_, err := record(x, openLedger("from-client"), "x")
	require.NoError(t, err)
	assert.Equal(t, 1, c.factoryRuns("from-client"))

	srv := c.hosts[0].MeshStatus()
	assert.True(t, srv.Placement.IsAvailable)
	assert.Equal(t, 3, srv.ReadyPeerCount, "a server connects to every peer, clients included")
	seq := srv.Sequence
	assert.Equal(t, seq, c.hosts[0].MeshStatus().Sequence, "an unchanged status keeps its sequence")
	_, err = record(c.hosts[0], openLedger("more"), "x", sdk.OnNode("node-a"))
	require.NoError(t, err)
	after := c.hosts[0].MeshStatus()
	assert.Greater(t, after.Sequence, seq, "a changed status gets a new sequence (H3)")
	assert.Equal(t, srv.Placement.ActiveSpotCount+1, after.Placement.ActiveSpotCount)
}

func TestZeroPeersDoNotMakeTheMeshUnavailable(t *testing.T) {
	c := newCluster(t, 1, nil)
	st := c.hosts[0].MeshStatus()
	assert.Empty(t, st.Peers)
	assert.True(t, st.IsReady, "local traffic still works (G3)")
	assert.Equal(t, sdk.TopologyStateReady, st.State)
}

func TestMutualTLSBetweenNodes(t *testing.T) {
	mesh := rttest.NewPKI(t, "mesh-ca")
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.ServerTLS, cfg.ClientTLS = mesh.MutualTLS(t, fmt.Sprintf("node-%c", 'a'+i))
	})
	_, err := record(c.hosts[0], openLedger("secure"), "x", sdk.OnNode(c.hosts[1].LocalNode()))
	require.NoError(t, err, "nodes of the mesh's CA call each other over mutual TLS")

	// A node whose certificate another CA signed joins the store, but no peer lets it connect.
	rogue := rttest.NewPKI(t, "rogue-ca")
	cfg := rt.DefaultConfig()
	cfg.NodeID = "rogue"
	cfg.EtcdEndpoints = c.endpoints
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.ServerTLS, cfg.ClientTLS = rogue.MutualTLS(t, "rogue")
	cfg.ClientTLS.RootCAs = mesh.Pool // it even trusts the mesh's certificates
	cfg.Register = func(r sdk.Registrar) error { return rttest.RegisterLedger(r, c.runs.Add, nil) }
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	require.Eventually(t, func() bool { return len(h.MeshStatus().Peers) == 2 }, 10*time.Second, 10*time.Millisecond)
	// Every connection attempt has failed at least once before the status is judged.
	failed := map[sdk.NodeID]bool{}
	require.Eventually(t, func() bool {
		for _, p := range h.MeshStatus().Peers {
			if p.State == sdk.PeerStateNotConnected {
				failed[p.NodeRid] = true
			}
		}
		return len(failed) == 2
	}, 10*time.Second, time.Millisecond, "the rogue node's connections never failed")
	st := h.MeshStatus()
	assert.Zero(t, st.ReadyPeerCount, "%+v", st.Peers)
	assert.Equal(t, sdk.TopologyStateDegraded, st.State)
	_, err = record(h, ledger("secure"), "from-rogue")
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.Zero(t, c.runs.Count("from-rogue"))
}

// A node that does not host a type still calls its Spots after its cached route is gone: it
// finds the owner in the store, as for any type.
func TestClientNodeFindsSpotsOfTypesItDoesNotHost(t *testing.T) {
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		if i == 1 {
			cfg.Roles = rt.RoleObjectClient
			cfg.Register = nil // hosts nothing, knows no type
		}
	})
	server, client := c.hosts[0], c.hosts[1]
	_, err := record(server, openLedger("foreign"), "created")
	require.NoError(t, err)
	got, err := record(client, ledger("foreign"), "plain")
	require.NoError(t, err, "a plain call from a node without the type")
	assert.Equal(t, "plain", got)
	require.NoError(t, client.CloseSpot(ctx, ledger("foreign")), "and so does a close")
	_, err = record(client, ledger("foreign"), "after")
	require.ErrorIs(t, err, sdk.ErrNotFound)
}

// scribble writes to everything a mesh status shares when it is not its holder's own: its
// slices' elements and what its pointers point to.
func scribble(st *sdk.RouteMeshStatus) {
	st.Peers[0].State = sdk.PeerStateNotConnected
	st.Peers[0].UnavailableReason = new(sdk.TopologyReason)
	st.Channels[0].ReadyTargetCount = 99
	*st.Placement.UnavailableReason = sdk.TopologyReasonInternalFailure
}

// H1, H3, G3: the mesh status MeshStatus returns is the caller's own. Writing to its peers,
// its channels or its placement's reason changes neither the next status nor its Sequence,
// which grows only when the mesh changes; each observer's statuses are its own too. They
// shared their slices and pointers with the mesh's last status, against which the next one is
// numbered, and with every other observer.
func TestH1_AMeshStatusIsTheCallersOwn(t *testing.T) {
	servers := withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
		return rttest.RegisterWhoServer(r, node, nil)
	})
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		servers(i, cfg)
		if i == 0 {
			clientOnly(cfg) // its placement is unavailable, with a reason
		}
	})
	h := c.hosts[0]
	awaitReadyTargets(t, h, 2)
	want := h.MeshStatus()
	require.Len(t, want.Peers, 1)
	require.Len(t, want.Channels, 1)
	require.NotNil(t, want.Placement.UnavailableReason)
	requireOwnStatus(t, want, ownStatus[sdk.RouteMeshStatus]{
		sequence: func(st sdk.RouteMeshStatus) uint64 { return st.Sequence },
		unstamped: func(st sdk.RouteMeshStatus) sdk.RouteMeshStatus {
			st.Sequence, st.ObservedAt = 0, time.Time{}
			return st
		},
		scribble: scribble,
	}, func() (sdk.RouteMeshStatus, error) { return h.MeshStatus(), nil },
		func(ctx context.Context) (iter.Seq[sdk.Observed[sdk.RouteMeshStatus]], error) {
			return h.ObserveMesh(ctx, want.MeshName)
		})
}
