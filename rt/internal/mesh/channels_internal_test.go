package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// G6: the handler of a one-way message to this node's own server runs under the sender's
// trace, as a peer's does, but with none of the sender's other values (the identity of the
// turn it sent from), deadline or cancellation; it ends when the mesh closes.
func TestG6_ALocalOneWayHandlersContextKeepsOnlyTheTrace(t *testing.T) {
	type senderKey struct{}
	mctx, closeMesh := context.WithCancel(context.Background())
	defer closeMesh()
	m := &Mesh{ctx: mctx}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	sender, cancelSender := context.WithTimeout(context.WithValue(trace.ContextWithSpanContext(context.Background(), sc), senderKey{}, "turn"), time.Minute)
	cancelSender()

	hctx, cancel := m.localOneWayContext(sender)
	defer cancel()
	assert.Equal(t, sc, trace.SpanContextFromContext(hctx), "the sender's trace")
	assert.Nil(t, hctx.Value(senderKey{}), "none of the sender's values")
	_, ok := hctx.Deadline()
	assert.False(t, ok, "no deadline of the sender's")
	require.NoError(t, hctx.Err(), "the sender's end is not the handler's")
	closeMesh()
	require.ErrorIs(t, hctx.Err(), context.Canceled, "the mesh closing ends it")
}

// G6: the servers that routing may choose are those that the ClientServer status counts as
// Ready targets: of positive weight, within the bound of a weight.
func TestG6_AServerIsChosableOnlyWithAWeightInRange(t *testing.T) {
	assert.False(t, chosable(0), "a member that is never chosen")
	assert.False(t, chosable(-1))
	assert.True(t, chosable(1))
	assert.True(t, chosable(1<<32-1))
	assert.False(t, chosable(1<<32), "a peer's record past the bound")
}
