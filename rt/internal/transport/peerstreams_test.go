package transport_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// certified serves "b" with h under mutual TLS, mutated as mutate says, and returns it with the
// client TLS configurations of the mesh's nodes x and y, for raw streams.
func certified(t *testing.T, h transport.Handler, mutate func(*transport.Config)) (b *transport.Transport, x, y *tls.Config) {
	t.Helper()
	pki := rttest.NewPKI(t, "mesh-ca")
	bs, bc := pki.MutualTLS(t, "b")
	b = start(t, "b", h, func(c *transport.Config) {
		c.ServerTLS, c.ClientTLS = bs, bc
		if mutate != nil {
			mutate(c)
		}
	})
	_, x = pki.MutualTLS(t, "x")
	_, y = pki.MutualTLS(t, "y")
	return b, x, y
}

// E1: a stream holds at most a quarter of the Core HWM budget, and a certified peer at most
// two streams: one that opens five, each with a request that holds its share, keeps two of
// them, and the node has room for another peer's request. Before, the five held the whole
// budget.
func TestE1_ACertifiedPeerThatOpensMoreStreamsThanItMayLosesItsOldest(t *testing.T) {
	const maxMessage, payload = 256 << 10, 200 << 10
	logs := &warnings{}
	var holding, started atomic.Int64
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait) // after the transport's close, which ends their contexts
	b, x, y := certified(t, handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.Method != "hold" {
			reply(&wire.Reply{})
			return
		}
		started.Add(1)
		handlers.Go(func() {
			holding.Add(1)
			<-ctx.Done() // it ends with its stream
			holding.Add(-1)
			reply(&wire.Reply{})
		})
	}}, func(c *transport.Config) {
		c.Meter, c.MaxMessageSize, c.Logger = budgetMeter(t, maxMessage), maxMessage, slog.New(logs)
	})

	var streams []grpc.ClientStream
	for i := range 5 {
		s := rawStreamWith(t, b.Addr(), "x", rawConn{tls: x})
		sendRequests(t, s, &wire.Request{CallId: 1, Method: "hold", Payload: make([]byte, payload)})
		streams = append(streams, s)
		// Each stream's request runs before the next stream opens: the order of their arrival
		// is the order of the streams.
		require.Eventually(t, func() bool { return started.Load() == int64(i+1) }, 10*time.Second, time.Millisecond)
	}
	for i, s := range streams[:3] {
		err := s.RecvMsg(&wire.Batch{})
		require.Error(t, err, "stream %d", i)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "stream %d: %v", i, err)
		assert.Contains(t, err.Error(), "at most 2 streams of one peer")
	}
	require.Eventually(t, func() bool { return holding.Load() == 2 }, 10*time.Second, time.Millisecond,
		"the calls of the streams that were closed end with them")

	// Another peer's request of the same size fits: x holds two shares of the budget at most.
	other := rawStreamWith(t, b.Addr(), "y", rawConn{tls: y})
	sendRequests(t, other, &wire.Request{CallId: 7, Method: "quick", Payload: make([]byte, payload)})
	assert.Nil(t, recvReply(t, other, 7).Error)

	// The streams that x kept still serve it.
	for _, s := range streams[3:] {
		sendRequests(t, s, &wire.Request{CallId: 2, Method: "quick"})
		assert.Nil(t, recvReply(t, s, 2).Error)
	}
	got := logs.all()
	require.Len(t, got, 3, "one warning per stream closed")
	assert.Contains(t, got[0], "peer=x")
	assert.Contains(t, got[0], "certified=true")
	assert.Contains(t, got[0], "its oldest is closed")
}

// A node that reconnects while this node has not yet found its last connection dead has both
// of its streams served: its new session is not refused or held up by the old one.
func TestACertifiedPeersNewStreamIsServedWhileItsOldOneLingers(t *testing.T) {
	b, x, _ := certified(t, handler{}, nil)
	old := rawStreamWith(t, b.Addr(), "x", rawConn{tls: x})
	sendRequests(t, old, &wire.Request{CallId: 1, Payload: []byte("old")})
	assert.Equal(t, "old", string(recvReply(t, old, 1).Payload))

	renewed := rawStreamWith(t, b.Addr(), "x", rawConn{tls: x})
	sendRequests(t, renewed, &wire.Request{CallId: 1, Payload: []byte("new")})
	assert.Equal(t, "new", string(recvReply(t, renewed, 1).Payload))
	sendRequests(t, old, &wire.Request{CallId: 2, Payload: []byte("old")})
	assert.Equal(t, "old", string(recvReply(t, old, 2).Payload), "two streams of one peer are both served")
}

// Under mutual TLS a peer is the node its certificate names, wherever it connects from: its
// streams count together.
func TestACertifiedPeersStreamsCountTogetherFromAnyHost(t *testing.T) {
	b, x, _ := certified(t, handler{}, nil)
	var streams []grpc.ClientStream
	for i, local := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		s := rawStreamWith(t, b.Addr(), "x", rawConn{local: local, tls: x})
		sendRequests(t, s, &wire.Request{CallId: 1, Payload: []byte("x")})
		assert.Equal(t, "x", string(recvReply(t, s, 1).Payload), "stream %d", i)
		streams = append(streams, s)
	}
	err := streams[0].RecvMsg(&wire.Batch{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the oldest of three is closed: %v", err)
}

// Without mutual TLS a peer's name is its own word: a client that claims a node's name, from
// wherever (a proxy that the node's connections come through too), ends none of its streams.
func TestStreamsThatClaimANodesNameWithoutMutualTLSEndNoneOfItsStreams(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	own := rawStream(t, b.Addr(), "x")
	sendRequests(t, own, &wire.Request{CallId: 1, Payload: []byte("own")})
	assert.Equal(t, "own", string(recvReply(t, own, 1).Payload))

	for i := range 3 {
		s := rawStream(t, b.Addr(), "x")
		sendRequests(t, s, &wire.Request{CallId: 1, Payload: []byte("claimed")})
		assert.Equal(t, "claimed", string(recvReply(t, s, 1).Payload), "stream %d", i)
	}
	sendRequests(t, own, &wire.Request{CallId: 2, Payload: []byte("own")})
	assert.Equal(t, "own", string(recvReply(t, own, 2).Payload), "the node's stream is served still")
}
