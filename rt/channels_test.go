package rt_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// withChannels adds reg's channel registrations to a cluster host's own.
func withChannels(reg func(i int, r sdk.Registrar, node sdk.NodeID) error) func(int, *rt.Config) {
	return func(i int, cfg *rt.Config) {
		base := cfg.Register
		node := cfg.NodeID
		cfg.Register = func(r sdk.Registrar) error {
			if err := base(r); err != nil {
				return err
			}
			return reg(i, r, node)
		}
	}
}

func who(ctx context.Context, c sdk.Client, opts ...sdk.CallOption) (sdk.NodeID, error) {
	out, err := c.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoWho, wrapperspb.String("?"), opts...)
	if err != nil {
		return "", err
	}
	return sdk.NodeID(out.(*wrapperspb.StringValue).GetValue()), nil
}

// awaitReadyTargets waits until h sees n Ready servers of the Who channel.
func awaitReadyTargets(t *testing.T, h *rt.Host, n int) sdk.ClientServerStatus {
	t.Helper()
	var st sdk.ClientServerStatus
	require.Eventually(t, func() bool {
		var err error
		st, err = h.ClientServerStatus(rttest.WhoChannel)
		return err == nil && st.ReadyTargetCount == n
	}, 15*time.Second, 10*time.Millisecond, "never %d ready targets: %+v", n, st)
	return st
}

func TestG6_LocalServerIsANormalWeightedTarget(t *testing.T) {
	weights := []int{1, 1, 3} // node-a (the caller, its own server), node-b, node-c
	c := newCluster(t, 3, withChannels(func(i int, r sdk.Registrar, node sdk.NodeID) error {
		return rttest.RegisterWhoServer(r, node, nil, sdk.Weight(weights[i]))
	}))
	a := c.hosts[0]
	st := awaitReadyTargets(t, a, 3)
	assert.Equal(t, sdk.ClientServerRoleServer, st.LocalRole, "it serves and has not called yet")
	assert.Equal(t, []sdk.ClientServerTargetStatus{
		{NodeRid: "node-a", Weight: 1, State: sdk.PeerStateReady},
		{NodeRid: "node-b", Weight: 1, State: sdk.PeerStateReady},
		{NodeRid: "node-c", Weight: 3, State: sdk.PeerStateReady},
	}, st.Targets, "the local server is listed like the others, without endpoints")

	const calls = 10_000
	counts := map[sdk.NodeID]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range calls / 8 {
				node, err := who(ctx, a)
				if !assert.NoError(t, err, "caller %d", g) {
					return
				}
				mu.Lock()
				counts[node]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, calls, counts["node-a"]+counts["node-b"]+counts["node-c"])
	for i, node := range []sdk.NodeID{"node-a", "node-b", "node-c"} {
		share := float64(counts[node]) / calls
		want := float64(weights[i]) / 5
		assert.InDelta(t, want, share, 0.02, "share of %s: %v", node, counts)
	}

	st, err := a.ClientServerStatus(rttest.WhoChannel)
	require.NoError(t, err)
	assert.Equal(t, sdk.ClientServerRoleClientAndServer, st.LocalRole)
	assert.Equal(t, sdk.TopologyStateReady, st.State)
	assert.True(t, st.IsReady)
	assert.Nil(t, st.UnavailableReason)
	mesh := a.MeshStatus()
	assert.Equal(t, []sdk.ChannelStatus{{ChannelName: rttest.WhoChannel, IsReady: true, ReadyTargetCount: 3}}, mesh.Channels)
}

// G1, G6: a node that relocated its objects takes no new application work: its view of a
// channel is Degraded for RuntimeNotReady, not Ready with no reason, although every server is
// Ready.
func TestG6_ARelocatedNodesChannelIsNotReadyAndSaysWhy(t *testing.T) {
	c := newCluster(t, 2, withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
		if err := rttest.RegisterWhoServer(r, node, nil); err != nil {
			return err
		}
		return rttest.SubscribeFeed(r, rttest.NewFeedLog(0))
	}))
	a := c.hosts[0]
	awaitReadyTargets(t, a, 2)
	fan, err := a.FanoutStatus(rttest.FeedChannel)
	require.NoError(t, err)
	require.True(t, fan.IsReady, "%+v", fan)
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 20 * time.Second})
	require.NoError(t, err)
	require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)

	st, err := a.ClientServerStatus(rttest.WhoChannel)
	require.NoError(t, err)
	assert.False(t, st.IsReady)
	assert.Equal(t, sdk.TopologyStateDegraded, st.State)
	require.NotNil(t, st.UnavailableReason)
	assert.Equal(t, sdk.TopologyReasonRuntimeNotReady, *st.UnavailableReason)

	fan, err = a.FanoutStatus(rttest.FeedChannel)
	require.NoError(t, err)
	assert.False(t, fan.IsReady)
	assert.Equal(t, sdk.TopologyStateDegraded, fan.State)
	require.NotNil(t, fan.UnavailableReason)
	assert.Equal(t, sdk.TopologyReasonRuntimeNotReady, *fan.UnavailableReason)
}

func TestG6_StickyKey(t *testing.T) {
	c := newCluster(t, 3, withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
		return rttest.RegisterWhoServer(r, node, nil)
	}))
	a := c.hosts[0]
	awaitReadyTargets(t, a, 3)
	owner := map[string]sdk.NodeID{}
	used := map[sdk.NodeID]int{}
	for k := range 60 {
		key := fmt.Sprintf("player-%d", k)
		for range 5 {
			node, err := who(ctx, a, sdk.Key(key))
			require.NoError(t, err)
			if prev, ok := owner[key]; ok {
				require.Equal(t, prev, node, "key %s moved while the servers did not change", key)
			}
			owner[key] = node
		}
		used[owner[key]]++
	}
	assert.Len(t, used, 3, "keys spread over every server: %v", used)

	// node-c leaves: only its keys move, each to a server that remains.
	_, err := c.hosts[2].Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	awaitReadyTargets(t, a, 2)
	for key, before := range owner {
		node, err := who(ctx, a, sdk.Key(key))
		require.NoError(t, err)
		if before != "node-c" {
			assert.Equal(t, before, node, "key %s of a server that stayed moved", key)
		} else {
			assert.NotEqual(t, sdk.NodeID("node-c"), node)
		}
	}
}

func TestG1_NoReadyTarget(t *testing.T) {
	c := newCluster(t, 2, withChannels(func(i int, r sdk.Registrar, node sdk.NodeID) error {
		if i == 1 {
			return rttest.RegisterWhoServer(r, node, nil, sdk.Weight(0)) // a member never chosen
		}
		return nil
	}))
	a := c.hosts[0]
	var st sdk.ClientServerStatus
	require.Eventually(t, func() bool {
		var err error
		st, err = a.ClientServerStatus(rttest.WhoChannel)
		return err == nil && len(st.Targets) == 1 && st.Targets[0].State == sdk.PeerStateReady
	}, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, sdk.ClientServerRoleClient, st.LocalRole)
	assert.Equal(t, sdk.TopologyStateDegraded, st.State)
	assert.False(t, st.IsReady)
	assert.Zero(t, st.ReadyTargetCount, "a server of weight 0 is no ready target")
	require.NotNil(t, st.UnavailableReason)
	assert.Equal(t, sdk.TopologyReasonNoReadyTarget, *st.UnavailableReason)
	require.NotNil(t, st.Targets[0].UnavailableReason)
	assert.Equal(t, sdk.TopologyReasonNoReadyTarget, *st.Targets[0].UnavailableReason)
	assert.Equal(t, []sdk.ChannelStatus{{ChannelName: rttest.WhoChannel, IsReady: false, ReadyTargetCount: 0}}, a.MeshStatus().Channels)
	assert.Equal(t, sdk.TopologyStateReady, a.MeshStatus().State, "a channel without a target does not degrade the mesh (G1)")

	_, err := who(ctx, a)
	require.ErrorIs(t, err, sdk.ErrNoReadyTarget)
	assert.Contains(t, err.Error(), rttest.WhoChannel)

	// An observer sees the channel lose its last server entirely.
	obsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq, err := a.ObserveClientServer(obsCtx, rttest.WhoChannel)
	require.NoError(t, err)
	next, stop := iter.Pull(seq)
	defer stop()
	first, ok := next()
	require.True(t, ok)
	assert.Len(t, first.Status.Targets, 1)
	_, err = c.hosts[1].Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	for {
		obs, ok := next()
		require.True(t, ok, "the observation ended before the server left")
		if len(obs.Status.Targets) == 0 {
			assert.Equal(t, sdk.TopologyStateDegraded, obs.Status.State)
			break
		}
	}

	_, err = a.ClientServerStatus("no-such-channel")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	_, err = a.FanoutStatus(rttest.WhoChannel)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "a ClientServer channel has no Fanout status")
}

func TestG7_FanoutStatusListsThePublishers(t *testing.T) {
	logs := []*rttest.FeedLog{rttest.NewFeedLog(0), rttest.NewFeedLog(0), rttest.NewFeedLog(0)}
	c := newCluster(t, 3, withChannels(func(i int, r sdk.Registrar, _ sdk.NodeID) error {
		if i == 2 {
			return rttest.SubscribeFeed(r, logs[i], sdk.ManualSubscriber("node-b"))
		}
		return rttest.SubscribeFeed(r, logs[i])
	}))
	a, b, cc := c.hosts[0], c.hosts[1], c.hosts[2]
	st, err := a.FanoutStatus(rttest.FeedChannel)
	require.NoError(t, err)
	assert.Empty(t, st.Publishers, "nobody published yet")
	assert.Equal(t, sdk.TopologyStateReady, st.State)
	assert.True(t, st.IsReady)

	// node-b's posts reach a, itself and the manual subscriber c, which names it; node-c's
	// reach a and b only.
	require.Eventually(t, func() bool { return reach(b) == 3 && reach(cc) == 2 }, 15*time.Second, 10*time.Millisecond)
	require.NoError(t, b.Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf("node-b", 1)))
	require.NoError(t, cc.Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf("node-c", 1)))
	require.Eventually(t, func() bool {
		st, err = a.FanoutStatus(rttest.FeedChannel)
		return err == nil && st.ReadyPublisherCount == 2
	}, 15*time.Second, 10*time.Millisecond, "%+v", st)
	assert.Equal(t, []sdk.PeerStatus{{NodeRid: "node-b", State: sdk.PeerStateReady}, {NodeRid: "node-c", State: sdk.PeerStateReady}}, st.Publishers)
	require.Eventually(t, func() bool {
		return logs[0].Report().Total == 2 && logs[1].Report().Total == 2 && logs[2].Report().Total == 1
	}, 5*time.Second, 10*time.Millisecond, "%v %v %v", logs[0].Report(), logs[1].Report(), logs[2].Report())
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, 1, logs[2].Report().Total, "the manual subscriber takes node-b's posts only")
	assert.Equal(t, map[string]int{"node-b": 1}, logs[2].Report().Last)

	_, err = cc.FanoutStatus(rttest.FeedChannel)
	require.ErrorIs(t, err, sdk.ErrConfig, "a manual subscriber's channel has no Fanout status")
	_, err = a.FanoutStatus("no-such-channel")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	_, err = a.ClientServerStatus(rttest.FeedChannel)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	// The publisher's mesh status counts the subscriber nodes its posts reach: a, b, and c,
	// which takes node-b's.
	assert.Equal(t, []sdk.ChannelStatus{{ChannelName: rttest.FeedChannel, IsReady: true, ReadyTargetCount: 3}}, b.MeshStatus().Channels)
	assert.Equal(t, []sdk.ChannelStatus{{ChannelName: rttest.FeedChannel, IsReady: true, ReadyTargetCount: 2}}, a.MeshStatus().Channels)

	// A publisher that leaves is seen leaving.
	obsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq, err := a.ObserveFanout(obsCtx, rttest.FeedChannel)
	require.NoError(t, err)
	next, stop := iter.Pull(seq)
	defer stop()
	_, ok := next()
	require.True(t, ok)
	_, err = cc.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	for {
		obs, ok := next()
		require.True(t, ok)
		if len(obs.Status.Publishers) == 1 {
			assert.Equal(t, sdk.NodeID("node-b"), obs.Status.Publishers[0].NodeRid)
			assert.Equal(t, 1, obs.Status.ReadyPublisherCount)
			break
		}
	}
}

func TestFanoutDeliversEachPostOnceInOrderPerPublisher(t *testing.T) {
	logs := []*rttest.FeedLog{rttest.NewFeedLog(0), rttest.NewFeedLog(0), rttest.NewFeedLog(0)}
	c := newCluster(t, 3, withChannels(func(i int, r sdk.Registrar, _ sdk.NodeID) error {
		return rttest.SubscribeFeed(r, logs[i])
	}))
	for _, h := range c.hosts[:2] {
		// At most once: posts reach the subscriber nodes this node knows of and is connected
		// to when it publishes.
		require.Eventually(t, func() bool { return reach(h) == 3 }, 15*time.Second, 10*time.Millisecond)
	}
	const posts = 1000
	var wg sync.WaitGroup
	for _, h := range c.hosts[:2] {
		wg.Go(func() {
			for i := 1; i <= posts; i++ {
				if !assert.NoError(t, h.Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf(h.LocalNode(), i))) {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, l := range logs {
		require.Eventually(t, func() bool { return l.Report().Total >= 2*posts }, 10*time.Second, 10*time.Millisecond, "node %d: %v", i, l.Report())
		r := l.Report()
		assert.Equal(t, 2*posts, r.Total)
		assert.Zero(t, r.Dups)
		assert.Zero(t, r.OutOfOrder)
		assert.Equal(t, map[string]int{"node-a": posts, "node-b": posts}, r.Last)
	}
}

func TestG4_ChannelServerMembershipMakesObjectClientsConnect(t *testing.T) {
	c := newCluster(t, 1, nil)
	clientCfg := func(id string, reg func(sdk.Registrar) error) rt.Config {
		cfg := rt.DefaultConfig()
		cfg.NodeID = sdk.NodeID(id)
		cfg.Roles = rt.RoleObjectClient
		cfg.EtcdEndpoints = c.endpoints
		cfg.LeaseTTL = 2 * time.Second
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.Register = reg
		return cfg
	}
	start := func(cfg rt.Config) *rt.Host {
		h, err := rt.Start(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	// Two Object Clients that only call the channel: no connection between them.
	x := start(clientCfg("client-x", nil))
	y := start(clientCfg("client-y", nil))
	_, err := who(ctx, x)
	require.ErrorIs(t, err, sdk.ErrNoReadyTarget, "a channel client's membership is none")
	peerState := func(h *rt.Host, peer sdk.NodeID) sdk.PeerState {
		for _, p := range h.MeshStatus().Peers {
			if p.NodeRid == peer {
				return p.State
			}
		}
		return 255
	}
	require.Eventually(t, func() bool { return peerState(x, "client-y") == sdk.PeerStateNotRequired }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, sdk.PeerStateNotRequired, peerState(y, "client-x"))
	assert.Equal(t, 1, x.MeshStatus().ReadyPeerCount, "only the Object Server")

	// A third Object Client with a server membership, of weight 0: both connect to it, and it
	// to them.
	z := start(clientCfg("client-z", func(r sdk.Registrar) error {
		return rttest.RegisterWhoServer(r, "client-z", nil, sdk.Weight(0))
	}))
	for _, h := range []*rt.Host{x, y} {
		require.Eventually(t, func() bool { return peerState(h, "client-z") == sdk.PeerStateReady }, 15*time.Second, 10*time.Millisecond,
			"%s: %+v", h.LocalNode(), h.MeshStatus().Peers)
	}
	require.Eventually(t, func() bool {
		return peerState(z, "client-x") == sdk.PeerStateReady && peerState(z, "client-y") == sdk.PeerStateReady
	}, 15*time.Second, 10*time.Millisecond, "%+v", z.MeshStatus().Peers)
	assert.Equal(t, sdk.PeerStateNotRequired, peerState(x, "client-y"), "still none between x and y")
	assert.Equal(t, 2, x.MeshStatus().ReadyPeerCount)
}

func TestI1_PublishFamily(t *testing.T) {
	// node-b subscribes to the Feed as it was; node-a publishes a method added since.
	older := rttest.FeedDesc
	newer := rttest.FeedDesc
	newer.Methods = append(append([]sdk.MethodDesc{}, rttest.FeedDesc.Methods...), sdk.MethodDesc{
		Name: "Tally", OneWay: true, NewRequest: rttest.FeedDesc.Methods[0].NewRequest,
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) { return nil, nil },
	})
	for _, tc := range []struct {
		action  sdk.UnhandledDispatchAction
		refused bool
		dropped int64
	}{
		{sdk.UnhandledDispatchActionReplyError, true, 0},
		{sdk.UnhandledDispatchActionLogAndDrop, false, 1},
		{sdk.UnhandledDispatchActionDrop, false, 1},
		{sdk.UnhandledDispatchActionThrow, true, 0},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			c := newCluster(t, 2, func(i int, cfg *rt.Config) {
				cfg.Unhandled.Publish = tc.action
				withChannels(func(i int, r sdk.Registrar, _ sdk.NodeID) error {
					if i == 1 {
						return r.Subscribe(&older, rttest.NewFeedLog(0))
					}
					return nil
				})(i, cfg)
			})
			a, b := c.hosts[0], c.hosts[1]
			require.Eventually(t, func() bool {
				return len(a.MeshStatus().Channels) == 1 && a.MeshStatus().Channels[0].ReadyTargetCount == 1
			},
				15*time.Second, 10*time.Millisecond)
			err := a.Publish(ctx, &newer, "Tally", wrapperspb.String("x"))
			if tc.refused {
				require.ErrorIs(t, err, sdk.ErrUnhandled)
				assert.Contains(t, err.Error(), "node-b")
			} else {
				require.NoError(t, err)
			}
			st := b.UnhandledStats()
			assert.Equal(t, int64(1), st.Publishes, "the receiver judged it")
			assert.Equal(t, tc.dropped, st.Dropped)
			assert.Zero(t, a.UnhandledStats().Publishes, "the publisher does not judge the receiver's answer again")
			// The method both know still reaches the subscriber.
			require.NoError(t, a.Publish(ctx, &newer, rttest.FeedPost, rttest.FeedPostOf("node-a", 1)))
		})
	}

	t.Run("ThrowWithoutSubscribers", func(t *testing.T) {
		c := newCluster(t, 1, func(_ int, cfg *rt.Config) { cfg.Unhandled.Publish = sdk.UnhandledDispatchActionThrow })
		err := c.hosts[0].Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf("node-a", 1))
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Equal(t, int64(1), c.hosts[0].UnhandledStats().NotSent)
	})
	t.Run("NoSubscribersIsNoError", func(t *testing.T) {
		c := newCluster(t, 1, nil)
		require.NoError(t, c.hosts[0].Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf("node-a", 1)))
	})
}

func TestChannelBadInputGetsClearErrors(t *testing.T) {
	c := newCluster(t, 2, withChannels(func(i int, r sdk.Registrar, node sdk.NodeID) error {
		if i == 1 {
			return rttest.RegisterWhoServer(r, node, nil, sdk.ChannelQueue(1, 1<<20))
		}
		return nil
	}))
	a := c.hosts[0]
	awaitReadyTargets(t, a, 1)
	msg := wrapperspb.String("x")

	_, err := a.CallChannel(ctx, nil, rttest.WhoWho, msg)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	_, err = a.CallChannel(ctx, &rttest.FeedDesc, rttest.FeedPost, msg)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "a Fanout channel is not called")
	_, err = a.CallChannel(ctx, &rttest.WhoDesc, "Nope", msg)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "Nope")
	_, err = a.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoWho, nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	err = a.SendChannel(ctx, &rttest.WhoDesc, rttest.WhoWho, msg)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "a method with a reply is not sent")
	err = a.Publish(ctx, &rttest.WhoDesc, rttest.WhoWho, msg)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)

	// A handler's panic is the caller's error, and the server serves on.
	_, err = a.CallChannel(ctx, &rttest.WhoDesc, rttest.WhoPanic, msg)
	require.ErrorIs(t, err, sdk.ErrHandlerPanicked)
	_, err = who(ctx, a)
	require.NoError(t, err)

	// The server holds one call at a time: a second one is refused unrun.
	slowCtx, cancelSlow := context.WithCancel(ctx)
	defer cancelSlow()
	slow := make(chan error, 1)
	go func() {
		for {
			_, err := a.CallChannel(slowCtx, &rttest.WhoDesc, rttest.WhoSleep, wrapperspb.Int64(30_000))
			if !errors.Is(err, sdk.ErrQueueFull) { // a who() of the test's may have the place
				slow <- err
				return
			}
		}
	}()
	var qf *sdk.QueueFullError
	var last error
	require.Eventually(t, func() bool {
		_, last = who(ctx, a)
		return errors.As(last, &qf)
	}, 10*time.Second, 5*time.Millisecond, "last: %v", last)
	assert.Equal(t, sdk.AxisCount, qf.Axis)
	assert.Contains(t, qf.Error(), rttest.WhoChannel+"."+rttest.WhoWho, "the refusal names the channel and method across nodes")
	assert.ErrorIs(t, qf, sdk.ErrQueueFull)
	cancelSlow() // the caller's cancellation reaches the server's handler
	require.ErrorIs(t, <-slow, context.Canceled)
	require.Eventually(t, func() bool { _, err := who(ctx, a); return err == nil }, 5*time.Second, 5*time.Millisecond, "room again")

	// Registration errors name the problem.
	for _, tc := range []struct {
		name string
		reg  func(r sdk.Registrar) error
		want string
	}{
		{"negative weight", func(r sdk.Registrar) error { return rttest.RegisterWhoServer(r, "n", nil, sdk.Weight(-1)) }, "outside 0..4294967295"},
		{"weight past the largest", func(r sdk.Registrar) error {
			return rttest.RegisterWhoServer(r, "n", nil, sdk.Weight(int(min(sdk.MaxChannelWeight+1, math.MaxInt))))
		}, "weight 4294967296 is outside 0..4294967295"},
		{"twice", func(r sdk.Registrar) error {
			_ = rttest.RegisterWhoServer(r, "n", nil)
			return rttest.RegisterWhoServer(r, "n", nil)
		}, "already"},
		{"manual without publishers", func(r sdk.Registrar) error {
			return rttest.SubscribeFeed(r, rttest.NewFeedLog(0), sdk.ManualSubscriber())
		}, "names the publisher"},
		{"a server of a Fanout channel", func(r sdk.Registrar) error { return r.RegisterServer(&rttest.FeedDesc, struct{}{}) }, "Fanout"},
		{"half a queue bound", func(r sdk.Registrar) error { return rttest.RegisterWhoServer(r, "n", nil, sdk.ChannelQueue(4, 0)) }, "positive"},
		{"a weighted subscriber", func(r sdk.Registrar) error {
			return rttest.SubscribeFeed(r, rttest.NewFeedLog(0), sdk.Weight(2))
		}, "Weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rt.DefaultConfig()
			cfg.NodeID = "bad"
			cfg.EtcdEndpoints = c.endpoints
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Register = tc.reg
			_, err := rt.Start(ctx, cfg)
			require.ErrorIs(t, err, sdk.ErrConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestChannelOneWayAndLocalCalls(t *testing.T) {
	var noted sync.Map
	var n atomic.Int64
	c := newCluster(t, 2, withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
		return rttest.RegisterWhoServer(r, node, func(msg string) {
			noted.Store(msg, node)
			n.Add(1)
		})
	}))
	a := c.hosts[0]
	awaitReadyTargets(t, a, 2)
	for i := range 100 {
		require.NoError(t, a.SendChannel(ctx, &rttest.WhoDesc, rttest.WhoNote, wrapperspb.String(fmt.Sprint(i))))
	}
	require.Eventually(t, func() bool { return n.Load() == 100 }, 5*time.Second, 5*time.Millisecond)
	on := map[any]int{}
	noted.Range(func(_, node any) bool { on[node]++; return true })
	assert.Equal(t, map[any]int{sdk.NodeID("node-a"): 50, sdk.NodeID("node-b"): 50}, on, "one-way messages are spread by weight too")
}

// A peer that sends malformed channel requests gets a refusal for each, and the node serves on.
func TestChannelRequestsFromAHostilePeerAreRefused(t *testing.T) {
	c := newCluster(t, 1, withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
		return errors.Join(rttest.RegisterWhoServer(r, node, nil), rttest.SubscribeFeed(r, rttest.NewFeedLog(0)))
	}))
	h := c.hosts[0]
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := rttest.DialRawPeer(t, h.Endpoint()).Stream(sctx, "hostile")
	require.NoError(t, err)
	reqs := []*wire.Request{
		{CallId: 1, Op: wire.Op_OP_CHANNEL_CALL, Type: rttest.WhoChannel, Method: rttest.WhoWho, Payload: []byte{0xff, 0xff, 0xff}},
		{CallId: 2, Op: wire.Op_OP_CHANNEL_CALL, Type: "no.Such", Method: "M"},
		{CallId: 3, Op: wire.Op_OP_CHANNEL_CALL, Type: "", Method: "M"},
		{CallId: 4, Op: wire.Op_OP_CHANNEL_SEND, Type: rttest.WhoChannel, Method: rttest.WhoWho},
		{CallId: 5, Op: wire.Op_OP_CHANNEL_CALL, Type: rttest.WhoChannel, Method: "Nope"},
		{CallId: 6, Op: wire.Op_OP_PUBLISH, Type: rttest.FeedChannel, Method: rttest.FeedPost, Payload: []byte{0xff}},
		{CallId: 7, Op: wire.Op_OP_PUBLISH, Type: rttest.WhoChannel, Method: rttest.WhoWho},
		{CallId: 8, Op: wire.Op_OP_CHANNEL_CALL, Type: rttest.WhoChannel, Method: strings.Repeat("m", 1000)},
	}
	require.NoError(t, s.SendMsg(rttest.Batch(reqs...)))
	got := map[uint64]*wire.Reply{}
	for len(got) < len(reqs) {
		var batch wire.Batch
		require.NoError(t, s.RecvMsg(&batch))
		for _, env := range batch.Envelopes {
			if r := env.GetReply(); r != nil {
				got[r.CallId] = r
			}
		}
	}
	for id, r := range got {
		require.NotNil(t, r.Error, "request %d was refused", id)
		assert.True(t, r.Refused, "request %d ran nothing", id)
	}
	assert.ErrorIs(t, wire.DecodeError(got[1].Error), sdk.ErrInvalidArgument)
	assert.ErrorIs(t, wire.DecodeError(got[2].Error), sdk.ErrUnhandled)
	assert.ErrorIs(t, wire.DecodeError(got[3].Error), sdk.ErrInvalidID)
	assert.ErrorIs(t, wire.DecodeError(got[4].Error), sdk.ErrInvalidArgument)
	assert.ErrorIs(t, wire.DecodeError(got[5].Error), sdk.ErrUnhandled)
	assert.ErrorIs(t, wire.DecodeError(got[6].Error), sdk.ErrInvalidArgument)
	assert.ErrorIs(t, wire.DecodeError(got[7].Error), sdk.ErrUnhandled)
	assert.ErrorIs(t, wire.DecodeError(got[8].Error), sdk.ErrInvalidArgument)
	_ = s.CloseSend()
	node, err := who(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, h.LocalNode(), node)
}

// stuckChannel is a ClientServer channel whose handler Hang says it began on entered, then
// waits for release whatever its context says, and sets finished (when given) as it returns.
func stuckChannel(entered chan<- struct{}, release <-chan struct{}, finished *atomic.Bool) *sdk.ChannelDesc {
	return &sdk.ChannelDesc{Name: "test.Stuck", Kind: sdk.ChannelClientServer, Methods: []sdk.MethodDesc{{
		Name:       "Hang",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
			entered <- struct{}{}
			<-release // ignores its context
			if finished != nil {
				finished.Store(true)
			}
			return wrapperspb.String("late"), nil
		},
	}}}
}

// A channel handler that ignores its context does not hold a shutdown past its deadline: the
// node stops ForceStopped with DeadlineExceeded.
func TestF8_ShutdownIsBoundedWhileAChannelHandlerBlocks(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	stuck := stuckChannel(entered, release, nil)
	c := newCluster(t, 2, withChannels(func(i int, r sdk.Registrar, _ sdk.NodeID) error {
		if i == 1 {
			return r.RegisterServer(stuck, struct{}{})
		}
		return nil
	}))
	a, b := c.hosts[0], c.hosts[1]
	defer close(release)
	require.Eventually(t, func() bool {
		st, err := a.ClientServerStatus(stuck.Name)
		return err == nil && st.ReadyTargetCount == 1
	},
		15*time.Second, 10*time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { _, _ = a.CallChannel(cctx, stuck, "Hang", wrapperspb.String("x")) }()
	<-entered
	start := time.Now()
	res, err := b.Shutdown(ctx, time.Second)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeForceStopped, res.Outcome)
	assert.Equal(t, sdk.TerminationReasonDeadlineExceeded, res.Reason)
	assert.Less(t, time.Since(start), 10*time.Second, "the deadline bounds the shutdown")
}

// H1, H3, G6: the ClientServer status ClientServerStatus returns is the caller's own. Writing
// to its targets or to what its reasons point to changes neither the next status nor its
// Sequence, which grows only when the channel changes; each observer's statuses are its own
// too. They shared their targets and reasons with the channel's last status, against which
// the next one is numbered, and with every other observer.
func TestH1_AClientServerStatusIsTheCallersOwn(t *testing.T) {
	c := newCluster(t, 2, withChannels(func(i int, r sdk.Registrar, node sdk.NodeID) error {
		if i == 1 {
			return rttest.RegisterWhoServer(r, node, nil, sdk.Weight(0)) // it and the channel have a reason
		}
		return nil
	}))
	a := c.hosts[0]
	var want sdk.ClientServerStatus
	require.Eventually(t, func() bool {
		var err error
		want, err = a.ClientServerStatus(rttest.WhoChannel)
		return err == nil && len(want.Targets) == 1 && want.Targets[0].State == sdk.PeerStateReady
	}, 15*time.Second, 10*time.Millisecond, "%+v", want)
	require.NotNil(t, want.UnavailableReason)
	require.NotNil(t, want.Targets[0].UnavailableReason)
	requireOwnStatus(t, want, ownStatus[sdk.ClientServerStatus]{
		sequence: func(st sdk.ClientServerStatus) uint64 { return st.Sequence },
		unstamped: func(st sdk.ClientServerStatus) sdk.ClientServerStatus {
			st.Sequence, st.ObservedAt = 0, time.Time{}
			return st
		},
		scribble: func(st *sdk.ClientServerStatus) {
			st.Targets[0].Weight, st.Targets[0].State = 99, sdk.PeerStateNotConnected
			*st.Targets[0].UnavailableReason = sdk.TopologyReasonInternalFailure
			*st.UnavailableReason = sdk.TopologyReasonInternalFailure
		},
	}, func() (sdk.ClientServerStatus, error) { return a.ClientServerStatus(rttest.WhoChannel) },
		func(ctx context.Context) (iter.Seq[sdk.Observed[sdk.ClientServerStatus]], error) {
			return a.ObserveClientServer(ctx, rttest.WhoChannel)
		})
}

// H1, H3, G7: the Fanout status FanoutStatus returns is the caller's own, as a ClientServer
// status is: writing to its publishers changes neither the next status nor its Sequence, nor
// what another observer sees.
func TestH1_AFanoutStatusIsTheCallersOwn(t *testing.T) {
	c := newCluster(t, 2, withChannels(func(_ int, r sdk.Registrar, _ sdk.NodeID) error {
		return rttest.SubscribeFeed(r, rttest.NewFeedLog(0))
	}))
	a, b := c.hosts[0], c.hosts[1]
	require.Eventually(t, func() bool { return reach(b) == 2 }, 15*time.Second, 10*time.Millisecond)
	require.NoError(t, b.Publish(ctx, &rttest.FeedDesc, rttest.FeedPost, rttest.FeedPostOf("node-b", 1)))
	var want sdk.FanoutStatus
	require.Eventually(t, func() bool {
		var err error
		want, err = a.FanoutStatus(rttest.FeedChannel)
		return err == nil && want.ReadyPublisherCount == 1
	}, 15*time.Second, 10*time.Millisecond, "%+v", want)
	requireOwnStatus(t, want, ownStatus[sdk.FanoutStatus]{
		sequence: func(st sdk.FanoutStatus) uint64 { return st.Sequence },
		unstamped: func(st sdk.FanoutStatus) sdk.FanoutStatus {
			st.Sequence, st.ObservedAt = 0, time.Time{}
			return st
		},
		scribble: func(st *sdk.FanoutStatus) {
			st.Publishers[0].State = sdk.PeerStateNotConnected
			st.Publishers[0].UnavailableReason = new(sdk.TopologyReason)
		},
	}, func() (sdk.FanoutStatus, error) { return a.FanoutStatus(rttest.FeedChannel) },
		func(ctx context.Context) (iter.Seq[sdk.Observed[sdk.FanoutStatus]], error) {
			return a.ObserveFanout(ctx, rttest.FeedChannel)
		})
}
