package rt_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// G6: a node's own registered server is a normal target while it serves, even while its
// membership record is missing (its owner lease ended and it registers again): calls are
// routed to it, and the route status and the channel's status agree on it.
func TestG6_TheLocalServerServesWhileItsMembershipRecordIsMissing(t *testing.T) {
	c := newCluster(t, 1, withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
		return rttest.RegisterWhoServer(r, node, nil)
	}))
	a := c.hosts[0]
	awaitReadyTargets(t, a, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	// What etcd does to the record when the owner lease ends.
	_, err = cli.Delete(ctx, "/zlink/default/channels/"+rttest.WhoChannel+"/servers/"+string(a.LocalNode()))
	require.NoError(t, err)
	for range 50 { // a second, in which the node's watch learns of the delete
		node, err := who(ctx, a)
		require.NoError(t, err, "the local server takes the call")
		assert.Equal(t, a.LocalNode(), node)
		st, err := a.ClientServerStatus(rttest.WhoChannel)
		require.NoError(t, err)
		assert.True(t, st.IsReady)
		ch := a.MeshStatus().Channels
		require.Len(t, ch, 1)
		assert.Equal(t, 1, ch[0].ReadyTargetCount, "the route status counts it too")
		time.Sleep(20 * time.Millisecond)
	}
}

// I1: a call to this node's own server for a method its descriptor lacks is unhandled, as the
// same call to a peer's server is: refused with ErrUnhandled under ReplyError, and the
// client's own Invoke never runs against the server's object.
func TestI1_ALocalChannelCallTheServerLacksIsUnhandled(t *testing.T) {
	var ran atomic.Int64
	newer := rttest.WhoDesc
	newer.Methods = append(append([]sdk.MethodDesc{}, rttest.WhoDesc.Methods...), sdk.MethodDesc{
		Name:       "Extra",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
			ran.Add(1)
			return wrapperspb.String("ran"), nil
		},
	})
	c := newCluster(t, 2, withChannels(func(i int, r sdk.Registrar, node sdk.NodeID) error {
		if i == 1 {
			return rttest.RegisterWhoServer(r, node, nil) // the older descriptor
		}
		return nil
	}))
	a, b := c.hosts[0], c.hosts[1]
	awaitReadyTargets(t, a, 1)
	awaitReadyTargets(t, b, 1)

	_, err := a.CallChannel(ctx, &newer, "Extra", wrapperspb.String("x"))
	require.ErrorIs(t, err, sdk.ErrUnhandled, "a peer's server refuses it")
	_, err = b.CallChannel(ctx, &newer, "Extra", wrapperspb.String("x"))
	require.ErrorIs(t, err, sdk.ErrUnhandled, "so does the node's own")
	assert.Zero(t, ran.Load(), "the client's Invoke never ran")
	assert.Equal(t, int64(2), a.UnhandledStats().Requests+b.UnhandledStats().Requests)
}

// I1: under Drop, a one-way call to this node's own server for a method it lacks is dropped
// and counted, as a peer's would be.
func TestI1_ALocalChannelSendTheServerLacksIsDropped(t *testing.T) {
	newer := rttest.WhoDesc
	newer.Methods = append(append([]sdk.MethodDesc{}, rttest.WhoDesc.Methods...), sdk.MethodDesc{
		Name:       "Later",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
			panic("the client's Invoke runs against the server's object")
		},
	})
	c := newCluster(t, 1, func(i int, cfg *rt.Config) {
		cfg.Unhandled.Send = sdk.UnhandledDispatchActionDrop
		withChannels(func(_ int, r sdk.Registrar, node sdk.NodeID) error {
			return rttest.RegisterWhoServer(r, node, nil)
		})(i, cfg)
	})
	a := c.hosts[0]
	awaitReadyTargets(t, a, 1)
	require.NoError(t, a.SendChannel(ctx, &newer, "Later", wrapperspb.String("x")))
	st := a.UnhandledStats()
	assert.Equal(t, int64(1), st.Sends)
	assert.Equal(t, int64(1), st.Dropped)
}

const pingerType = "test.Pinger"

// noteBack is a channel server whose one-way Note calls back the Pinger Entry Spot of the node
// named in the note.
type noteBack struct {
	host *atomic.Pointer[rt.Host]
	out  chan error
}

func noteBackDesc(name string) *sdk.ChannelDesc {
	return &sdk.ChannelDesc{Name: name, Kind: sdk.ChannelClientServer, Methods: []sdk.MethodDesc{{
		Name:       "Note",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			e := impl.(*noteBack)
			time.Sleep(50 * time.Millisecond) // well after the sender's turn ended
			from := sdk.NodeID(req.(*wrapperspb.StringValue).GetValue())
			_, err := e.host.Load().Call(ctx, sdk.EntryTarget(pingerType, from), "Get", wrapperspb.String("?"))
			e.out <- err
			return nil, nil
		},
	}}}
}

// pingerDesc is the Entry Spot Pinger: its one-way Kick sends a Note on the channel its request
// names, and Get answers "ok".
func pingerDesc() *sdk.SpotDesc {
	return &sdk.SpotDesc{Name: pingerType, Kind: sdk.KindEntry, Methods: []sdk.MethodDesc{
		{
			Name:       "Kick",
			OneWay:     true,
			NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
			Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
				sc := impl.(sdk.SpotContext)
				desc := noteBackDesc(req.(*wrapperspb.StringValue).GetValue())
				return nil, sc.Client().SendChannel(ctx, desc, "Note", wrapperspb.String(string(sc.Node())))
			},
		},
		{
			Name:       "Get",
			NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
			NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
			Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
				return wrapperspb.String("ok"), nil
			},
		},
	}}
}

// G6: a server in the sender's own process is a normal target. A one-way channel message sent
// from a Spot's turn runs later, on a goroutine of the server's node, and its handler may call
// that Spot back, as the same handler on a peer does: it does not run as the sender's turn,
// which ended once the message was admitted.
func TestG6_ALocalOneWayChannelHandlerIsNotTheSendersTurn(t *testing.T) {
	var hosts [2]atomic.Pointer[rt.Host]
	outs := [2]chan error{make(chan error, 1), make(chan error, 1)}
	names := [2]string{"test.NoteBackOnA", "test.NoteBackOnB"}
	c := newCluster(t, 2, withChannels(func(i int, r sdk.Registrar, _ sdk.NodeID) error {
		if err := r.RegisterSpot(pingerDesc(), func(sc sdk.SpotContext) (any, error) { return sc, nil }); err != nil {
			return err
		}
		return r.RegisterServer(noteBackDesc(names[i]), &noteBack{host: &hosts[i], out: outs[i]})
	}))
	for i, h := range c.hosts {
		hosts[i].Store(h)
	}
	a := c.hosts[0]
	for _, name := range names {
		require.Eventually(t, func() bool {
			st, err := a.ClientServerStatus(name)
			return err == nil && st.ReadyTargetCount == 1
		}, 15*time.Second, 10*time.Millisecond)
	}
	pinger := sdk.EntryTarget(pingerType, a.LocalNode())
	for i, where := range []string{"the peer's server", "the local server"} {
		require.NoError(t, a.Send(ctx, pinger, "Kick", wrapperspb.String(names[1-i])))
		select {
		case err := <-outs[1-i]:
			require.NoError(t, err, "%s calls the sender back", where)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never ran", where)
		}
	}
}

// F8, G6: a shutdown waits, within its deadline, for a channel handler that runs a call of the
// server's own node, as it waits for one that runs a peer's call: a handler that outlives the
// deadline leaves the node ForceStopped, never Stopped while it still runs.
func TestF8_ShutdownWaitsForALocalChannelHandler(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var finished atomic.Bool
	stuck := stuckChannel(entered, release, &finished)
	c := newCluster(t, 1, withChannels(func(_ int, r sdk.Registrar, _ sdk.NodeID) error {
		return r.RegisterServer(stuck, struct{}{})
	}))
	a := c.hosts[0]
	defer close(release)
	require.Eventually(t, func() bool {
		st, err := a.ClientServerStatus(stuck.Name)
		return err == nil && st.ReadyTargetCount == 1
	}, 15*time.Second, 10*time.Millisecond)
	go func() { _, _ = a.CallChannel(context.Background(), stuck, "Hang", wrapperspb.String("x")) }()
	<-entered
	res, err := a.Shutdown(ctx, time.Second)
	require.NoError(t, err)
	require.False(t, finished.Load())
	assert.Equal(t, sdk.TerminationOutcomeForceStopped, res.Outcome, "the handler still runs")
	assert.Equal(t, sdk.TerminationReasonDeadlineExceeded, res.Reason)
}
