package transport

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// TestAnInBatchReadsABatchInItsReusedEnvelopes: a stream reads a batch's envelopes in order
// into envelopes it reuses for the next batch; the messages they held stay as they were read.
func TestAnInBatchReadsABatchInItsReusedEnvelopes(t *testing.T) {
	sent := &wire.Batch{Envelopes: []*wire.Envelope{
		{Reply: &wire.Reply{CallId: 1, Payload: []byte{1, 2}, Owner: "n1"}},
		{Request: &wire.Request{CallId: 9, Method: "M", Payload: []byte{3}}},
		{},
		{Cancel: &wire.Cancel{CallId: 9}},
		{Reply: &wire.Reply{CallId: 2, Error: &wire.Error{Code: wire.Code_CODE_QUEUE_FULL, Message: "full"}}},
	}}
	data, err := proto.Marshal(sent)
	require.NoError(t, err)
	c := newWireCodec()
	var b inBatch
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b))
	first := b.envelopes()
	require.Len(t, first, len(sent.Envelopes))
	var held []proto.Message
	for i, env := range first {
		assert.True(t, proto.Equal(sent.Envelopes[i], env), "envelope %d: %v", i, env)
		if env.Request != nil {
			held = append(held, env.Request)
		}
		if env.Reply != nil {
			held = append(held, env.Reply)
		}
	}
	reused := first[0]

	b.reset()
	assert.Empty(t, b.envelopes())
	next, err := proto.Marshal(&wire.Batch{Envelopes: []*wire.Envelope{{Cancel: &wire.Cancel{CallId: 4}}}})
	require.NoError(t, err)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(next)}, &b))
	require.Len(t, b.envelopes(), 1)
	assert.Same(t, reused, b.envelopes()[0], "the envelope is reused")
	assert.True(t, proto.Equal(&wire.Envelope{Cancel: &wire.Cancel{CallId: 4}}, b.envelopes()[0]), "it holds only the new batch's message")
	assert.True(t, proto.Equal(sent.Envelopes[0].Reply, held[0]), "a message read before is not touched by the next batch")
	assert.True(t, proto.Equal(sent.Envelopes[1].Request, held[1]))
	assert.True(t, proto.Equal(sent.Envelopes[4].Reply, held[2]))
}

// TestAnInBatchRefusesWhatTheCodecRefuses: an envelope that holds more than one message, a
// string that is not UTF-8, and bytes that are not a batch are errors to a stream's inBatch, as
// to the codec.
func TestAnInBatchRefusesWhatTheCodecRefuses(t *testing.T) {
	double, err := proto.Marshal(&wire.Batch{Envelopes: []*wire.Envelope{
		{Reply: &wire.Reply{CallId: 1}}, {Request: &wire.Request{CallId: 2}, Cancel: &wire.Cancel{CallId: 2}},
	}})
	require.NoError(t, err)
	envelope := func(env *wire.Envelope) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), mustMarshalUnchecked(t, env))
	}
	wrongType := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"two messages", double, "envelope 1 of the batch holds 2 messages"},
		{"a reply not UTF-8", envelope(&wire.Envelope{Reply: &wire.Reply{CallId: 3, Redirect: "n\xff"}}), "call 3: field redirect is not valid UTF-8"},
		{"a request not UTF-8", envelope(&wire.Envelope{Request: &wire.Request{CallId: 4, Id: "\xff"}}), "call 4: field id is not valid UTF-8"},
		{"an envelope of the wrong wire type", wrongType, "envelope 0 of the batch has wire type 0"},
		{"a truncated envelope", []byte{0x0a, 0x05, 0x12}, "envelope 0 of the batch"},
		{"a truncated reply", []byte{0x0a, 0x02, 0x12, 0x05}, "envelope 0 of the batch"},
	} {
		var b inBatch
		err := newWireCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(c.data)}, &b)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
	}
}

// FuzzInBatchReadsAsTheCodecReads: bytes that both the codec and protobuf read as a batch are
// read by a stream's inBatch as the same envelopes, and nothing panics.
func FuzzInBatchReadsAsTheCodecReads(f *testing.F) {
	for _, b := range codecSamples() {
		data, err := proto.Marshal(b)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte{0x0a, 0x04, 0x12, 0x02, 0x08, 0x01})
	c := newWireCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var viaStream inBatch
		streamErr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaStream)
		var viaCodec wire.Batch
		if c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaCodec) != nil || proto.Unmarshal(data, &wire.Batch{}) != nil {
			return
		}
		require.NoError(t, streamErr, "the codec read %x", data)
		got := viaStream.envelopes()
		require.Len(t, got, len(viaCodec.Envelopes))
		for i, want := range viaCodec.Envelopes {
			require.True(t, proto.Equal(want, got[i]), "envelope %d of %x", i, data)
		}
	})
}
