package wire_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// TestARecycledReplyComesBackEmpty: whatever a reply held, the reply NewReply returns after it
// was given back holds nothing of it.
func TestARecycledReplyComesBackEmpty(t *testing.T) {
	for range 100 { // the pool may drop what it was given: many rounds see a reuse
		r := wire.NewReply()
		assert.True(t, proto.Equal(&wire.Reply{}, r), "%v", r)
		r.CallId, r.Payload, r.Owner, r.Redirect, r.Refused, r.Generation, r.Held = 7, []byte("x"), "o", "n", true, 3, true
		r.Error = &wire.Error{Message: "m"}
		wire.RecycleReply(r)
	}
}
