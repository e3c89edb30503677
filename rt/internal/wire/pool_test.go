package wire_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt/internal/wire"
)

// TestARecycledMessageComesBackEmpty: whatever a request or a reply held, the one NewRequest or
// NewReply returns after it was given back holds nothing of it.
func TestARecycledMessageComesBackEmpty(t *testing.T) {
	for range 100 { // the pool may drop what it was given: many rounds see a reuse
		r := wire.NewRequest()
		assert.True(t, proto.Equal(&wire.Request{}, r), "%v", r)
		r.CallId, r.Op, r.Kind, r.Type, r.Id, r.Node, r.Intent, r.Method = 7, wire.Op_OP_SEND, 2, "T", "i", "n", true, "M"
		r.Payload, r.TimeoutNanos, r.DeadlineUnixNanos, r.Traceparent, r.Tracestate = []byte("x"), 1, 2, "tp", "ts"
		r.Follow, r.Generation = true, 3
		wire.RecycleRequest(r)
	}
	for range 100 { // the pool may drop what it was given: many rounds see a reuse
		r := wire.NewReply()
		assert.True(t, proto.Equal(&wire.Reply{}, r), "%v", r)
		r.CallId, r.Payload, r.Owner, r.Redirect, r.Refused, r.Generation, r.Held = 7, []byte("x"), "o", "n", true, 3, true
		r.Error = &wire.Error{Message: "m"}
		wire.RecycleReply(r)
	}
}

// TestARecycledMessageKeepsItsPayloadsArray: a reply sent and given back, and a request or
// reply read from a stream and given back, keep their payload's array for the next one to be
// encoded or read into, up to 1 KiB; a request built to be sent keeps none, as its caller may
// send its payload again elsewhere. Each comes back empty, from its own pool.
func TestARecycledMessageKeepsItsPayloadsArray(t *testing.T) {
	if proctest.RaceEnabled {
		t.Skip("the race detector makes the pool drop what it is given at random")
	}
	request := func(p []byte) *wire.Request {
		return &wire.Request{CallId: 1, Op: wire.Op_OP_SEND, Kind: 2, Type: "T", Id: "i", Node: "n", Intent: true, Method: "M",
			Payload: p, TimeoutNanos: 5, DeadlineUnixNanos: 6, Traceparent: "tp", Tracestate: "ts", Follow: true, Generation: 7}
	}
	reply := func(p []byte) *wire.Reply {
		return &wire.Reply{CallId: 1, Payload: p, Owner: "o", Redirect: "n", Refused: true, Generation: 3, Held: true, Error: &wire.Error{Message: "m"}}
	}
	for _, c := range []struct {
		name      string
		roundTrip func(payload []byte) (cap int, empty bool)
		keeps     bool
	}{
		{"reply", func(p []byte) (int, bool) { return giveAndTake(wire.RecycleReply, wire.NewReply, reply(p)) }, true},
		{"inbound request", func(p []byte) (int, bool) {
			return giveAndTake(wire.RecycleInboundRequest, wire.NewInboundRequest, request(p))
		}, true},
		{"inbound reply", func(p []byte) (int, bool) {
			return giveAndTake(wire.RecycleInboundReply, wire.NewInboundReply, reply(p))
		}, true},
		{"request", func(p []byte) (int, bool) { return giveAndTake(wire.RecycleRequest, wire.NewRequest, request(p)) }, false},
	} {
		small, large := make([]byte, 100), make([]byte, 1<<10+1)
		n, empty := c.roundTrip(small)
		assert.True(t, empty, c.name)
		if c.keeps {
			assert.Equal(t, cap(small), n, "%s: a small payload's array is kept", c.name)
		} else {
			assert.Zero(t, n, "%s: no array is kept", c.name)
		}
		n, empty = c.roundTrip(large)
		assert.True(t, empty, c.name)
		assert.Zero(t, n, "%s: a payload's array over 1 KiB is not kept", c.name)
	}
}

// giveAndTake gives m back to a pool and takes the message the pool then gives: the capacity
// of its payload, and whether it is empty.
func giveAndTake[M interface {
	proto.Message
	GetPayload() []byte
}](give func(M), take func() M, m M) (int, bool) {
	_ = take() // empties this processor's slot of the pool, for what is given next
	give(m)
	r := take()
	return cap(r.GetPayload()), proto.Size(r) == 0
}

// TestAPayloadHoldsAtMostTwiceItsBytes: a payload is encoded or read into the array a recycled
// message kept only when that array holds it and at most twice its bytes, so that a small
// payload does not hold a large array that its message is not charged for.
func TestAPayloadHoldsAtMostTwiceItsBytes(t *testing.T) {
	kept := make([]byte, 7, 100)
	for _, c := range []struct {
		n     int
		reuse bool
	}{{100, true}, {50, true}, {60, true}, {49, false}, {1, false}, {101, false}, {0, false}} {
		b := wire.PayloadArray(kept, c.n)
		assert.Zero(t, len(b), "n=%d", c.n)
		if c.reuse {
			assert.Same(t, &kept[:1][0], &b[:1][0], "n=%d: the kept array", c.n)
		} else {
			assert.Equal(t, c.n, cap(b), "n=%d: a new array of n bytes", c.n)
		}
	}
}
