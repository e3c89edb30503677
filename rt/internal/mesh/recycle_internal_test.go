package mesh

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// TestAPeersMessageIsGivenBackOnceDecoded: the node that runs a peer's message gives the
// request back for reuse as soon as it has decoded it, on the path that admits it at once as
// on the one that waits off the stream; the message runs as it was sent either way. A request
// refused before it is decoded is left as it was.
func TestAPeersMessageIsGivenBackOnceDecoded(t *testing.T) {
	endpoints, ctx := startEtcd(t)
	owner, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	_, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, "hot"), rttest.LedgerRecord, wrapperspb.String("m0"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)

	handle := func(req *wire.Request) *wire.Reply {
		t.Helper()
		replies := make(chan *wire.Reply, 1)
		owner.m.Handle(ctx, "caller", req, func(r *wire.Reply) { replies <- proto.CloneOf(r) })
		select {
		case r := <-replies:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
			return nil
		}
	}
	payload, err := proto.Marshal(wrapperspb.String("m1"))
	require.NoError(t, err)
	for name, req := range map[string]*wire.Request{
		"admitted at once":   {CallId: 1, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType, Id: "hot", Method: rttest.LedgerRecord, Payload: payload},
		"created off stream": {CallId: 2, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType, Id: "cold", Intent: true, Method: rttest.LedgerRecord, Payload: payload},
	} {
		r := handle(req)
		assert.Nil(t, r.Error, "%s: %v", name, wire.DecodeError(r.Error))
		assert.True(t, proto.Equal(&wire.Request{}, req), "%s: the request was given back: %v", name, req)
	}
	for id, want := range map[string]int64{"hot": 2, "cold": 1} {
		assert.Equal(t, want, ledgerCount(t, ctx, caller.m, sdk.InstanceTarget(rttest.LedgerType, id).WithDesc(&rttest.LedgerDesc)), "the messages %s ran", id)
	}

	unknown := &wire.Request{CallId: 3, Op: wire.Op_OP_CALL, Kind: uint32(sdk.KindInstance), Type: rttest.LedgerType, Id: "hot", Method: "NoSuchMethod", Payload: payload}
	r := handle(unknown)
	require.NotNil(t, r.Error)
	assert.Equal(t, "NoSuchMethod", unknown.Method, "a refused request is left alone")
}
