package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// TestACallersPayloadIsGivenBackOnlyOnceNothingReadsIt: a remote call that returns while its
// caller's context is live gives its encoded message back for the next one to be encoded into;
// one whose context ended while it waited does not, since its request may still be queued.
// Every message runs as it was sent, whatever arrays were reused.
func TestACallersPayloadIsGivenBackOnlyOnceNothingReadsIt(t *testing.T) {
	var mu sync.Mutex
	var back []string // what each payload held as it was given back
	defer func(f func(*wire.Payload)) { recyclePayload = f }(recyclePayload)
	recyclePayload = func(p *wire.Payload) {
		var m wrapperspb.StringValue
		if proto.Unmarshal(p.Bytes(), &m) == nil {
			mu.Lock()
			back = append(back, m.GetValue())
			mu.Unlock()
		}
		p.Recycle()
	}
	given := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(back)
	}

	endpoints, ctx := startEtcd(t)
	_, caller := startPair(t, ctx, endpoints, testNodeOpts{}, testNodeOpts{})
	ledger := sdk.InstanceTarget(rttest.LedgerType, "far").WithDesc(&rttest.LedgerDesc)
	_, err := caller.m.Call(ctx, sdk.InstanceIntent(rttest.LedgerType, "far"), rttest.LedgerRecord, wrapperspb.String("created"), sdk.CallOptions{Node: "owner"})
	require.NoError(t, err)
	assert.Equal(t, []string{"created"}, given(), "the creating call's payload went back once it was answered")

	// Messages of growing and shrinking sizes, so that arrays given back are encoded into.
	var sent []string
	for i := range 40 {
		msg := strings.Repeat("m", (i*37)%300) + fmt.Sprint(i)
		out, err := caller.m.Call(ctx, ledger, rttest.LedgerRecord, wrapperspb.String(msg), sdk.CallOptions{})
		require.NoError(t, err)
		assert.Equal(t, msg, out.(*wrapperspb.StringValue).GetValue(), "the message ran as it was sent")
		sent = append(sent, msg)
	}
	assert.Equal(t, append([]string{"created"}, sent...), given(), "each payload went back once, after its call")

	// The caller gives up before the answer: its context ends first, since the owner's
	// handler ends only with the cancel that follows.
	cancelled, cancel := context.WithCancel(ctx)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = caller.m.Call(cancelled, ledger, rttest.LedgerSleep, wrapperspb.Int64(10_000), sdk.CallOptions{})
	require.ErrorIs(t, err, context.Canceled)
	assert.Len(t, given(), 1+len(sent), "a call whose context ended keeps its payload from reuse")
}
