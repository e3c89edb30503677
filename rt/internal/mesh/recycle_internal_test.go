package mesh

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// TestAPeersMessageIsGivenBackOnceDecoded: the node that runs a peer's message gives the
// request back for reuse once it has decoded it, on the path that admits it at once as on the
// one that waits off the stream; the message runs as it was sent either way. A request refused
// before it is decoded is not given back.
func TestAPeersMessageIsGivenBackOnceDecoded(t *testing.T) {
	var mu sync.Mutex
	var back []*wire.Request
	defer func(f func(*wire.Request)) { recycleRequest = f }(recycleRequest)
	recycleRequest = func(r *wire.Request) { mu.Lock(); back = append(back, r); mu.Unlock() }
	given := func(req *wire.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(back, req)
	}

	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	_, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, "hot"), rttest.LedgerRecord, wrapperspb.String("m0"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	handle := func(req *wire.Request) *wire.Reply {
		t.Helper()
		replies := make(chan *wire.Reply, 1)
		owner.m.Handle(ctx, "caller", req, transport.ReplyFunc(func(r *wire.Reply) { replies <- proto.CloneOf(r) }))
		select {
		case r := <-replies:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
			return nil
		}
	}
	for name, c := range map[string]struct {
		id     string
		intent bool
	}{
		"admitted at once":   {id: "hot"},
		"created off stream": {id: "cold", intent: true},
	} {
		payload, err := proto.Marshal(wrapperspb.String("sent to " + c.id))
		require.NoError(t, err)
		req := &wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType, Id: c.id,
			Intent: c.intent, Method: rttest.LedgerRecord, Payload: payload}
		r := handle(req)
		require.Nil(t, r.Error, "%s: %v", name, wire.DecodeError(r.Error))
		var out wrapperspb.StringValue
		require.NoError(t, proto.Unmarshal(r.Payload, &out))
		assert.Equal(t, "sent to "+c.id, out.GetValue(), "%s: the Ledger ran the message as it was sent", name)
		assert.True(t, given(req), "%s: the request was given back", name)
	}
	for id, want := range map[string]int64{"hot": 2, "cold": 1} {
		assert.Equal(t, want, ledgerCount(t, ctx, caller.m, sdk.InstanceTarget(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)), "the messages %s ran", id)
	}

	unknown := &wire.Request{CallId: 3, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType, Id: "hot", Method: "NoSuchMethod"}
	r := handle(unknown)
	require.NotNil(t, r.Error)
	assert.False(t, given(unknown), "a request refused before it is decoded is not given back")
}
