package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Channel memberships are written with the registration, on its lease; a joined one is fenced
// on the registration and ends with it; a watch reports each, and a later registration of the
// node carries them all.
func TestChannelMembershipLivesWithTheLease(t *testing.T) {
	s := newStore(t)
	server := store.ChannelMembership{Channel: "match/maker", Role: store.ChannelServer, Kind: sdk.ChannelClientServer, Weight: 3, Methods: []string{"Find(a.Req)a.Reply"}}
	sub := store.ChannelMembership{Channel: "results", Role: store.ChannelSubscriber, Kind: sdk.ChannelFanout, Publishers: []string{"node-b"}}
	reg, err := s.Register(ctx, nodeDesc("node-a"), store.LeaseOptions{}, server, sub)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })

	members, rev, err := s.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, members, 2)
	byChannel := map[string]store.ChannelMember{}
	for _, m := range members {
		byChannel[m.Channel] = m
	}
	got := byChannel["match/maker"]
	assert.Equal(t, sdk.NodeID("node-a"), got.Node)
	assert.Equal(t, reg.Owner().Lease, got.Lease, "the membership is on the node's lease")
	assert.Equal(t, server, got.ChannelMembership, "a '/' in a channel name round-trips")
	assert.Equal(t, sub, byChannel["results"].ChannelMembership)

	var mu sync.Mutex
	var events []store.ChannelEvent
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.WatchChannels(wctx, rev, func(ev store.ChannelEvent) {
			if ev.Progress {
				return
			}
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		})
	}()
	pub := store.ChannelMembership{Channel: "results", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout}
	require.NoError(t, reg.JoinChannel(ctx, pub))
	assert.Equal(t, []store.ChannelMembership{server, sub, pub}, reg.Channels(), "a later registration carries every membership")

	require.NoError(t, reg.Close(ctx))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 4
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	assert.False(t, events[0].Gone)
	assert.Equal(t, store.ChannelPublisher, events[0].Member.Role)
	gone := map[store.ChannelRole]bool{}
	for _, ev := range events[1:] {
		assert.True(t, ev.Gone, "the lease's end ends every membership")
		gone[ev.Member.Role] = true
	}
	assert.Equal(t, map[store.ChannelRole]bool{store.ChannelServer: true, store.ChannelSubscriber: true, store.ChannelPublisher: true}, gone)

	// A registration that ended joins nothing more.
	err = reg.JoinChannel(ctx, store.ChannelMembership{Channel: "late", Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
	require.ErrorIs(t, err, store.ErrFenced)
	members, _, err = s.Channels(ctx)
	require.NoError(t, err)
	assert.Empty(t, members)
}
