package wire_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"

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
