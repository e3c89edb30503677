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

// TestAReplyBatchReadsTheRepliesOfABatch: a link reads the replies of a batch in order and
// passes over its requests and cancels; the slice is emptied for the next batch.
func TestAReplyBatchReadsTheRepliesOfABatch(t *testing.T) {
	first := &wire.Reply{CallId: 1, Payload: []byte{1, 2}, Owner: "n1"}
	second := &wire.Reply{CallId: 2, Error: &wire.Error{Code: wire.Code_CODE_QUEUE_FULL, Message: "full"}}
	data, err := proto.Marshal(&wire.Batch{Envelopes: []*wire.Envelope{
		{Reply: first}, {Request: &wire.Request{CallId: 9, Method: "M"}}, {}, {Cancel: &wire.Cancel{CallId: 9}}, {Reply: second},
	}})
	require.NoError(t, err)
	c := newWireCodec()
	var b replyBatch
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b))
	require.Len(t, b.replies, 2)
	assert.True(t, proto.Equal(first, b.replies[0]), "%v", b.replies[0])
	assert.True(t, proto.Equal(second, b.replies[1]), "%v", b.replies[1])

	b.reset()
	assert.Empty(t, b.replies)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b))
	assert.Len(t, b.replies, 2, "a reset batch reads the next one from the start")
}

// TestAReplyBatchRefusesWhatTheCodecRefuses: an envelope that holds more than one message, a
// reply string that is not UTF-8, and bytes that are not a batch are errors to a link, as to the
// codec.
func TestAReplyBatchRefusesWhatTheCodecRefuses(t *testing.T) {
	double, err := proto.Marshal(&wire.Batch{Envelopes: []*wire.Envelope{
		{Reply: &wire.Reply{CallId: 1}}, {Reply: &wire.Reply{CallId: 2}, Cancel: &wire.Cancel{CallId: 2}},
	}})
	require.NoError(t, err)
	notUTF8 := protowire.AppendTag(nil, 1, protowire.BytesType)
	notUTF8 = protowire.AppendBytes(notUTF8, mustMarshalUnchecked(t, &wire.Envelope{Reply: &wire.Reply{CallId: 3, Redirect: "n\xff"}}))
	wrongType := protowire.AppendTag(nil, 1, protowire.VarintType)
	wrongType = protowire.AppendVarint(wrongType, 5)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"two messages", double, "envelope 1 of the batch holds 2 messages"},
		{"not UTF-8", notUTF8, "call 3: field redirect is not valid UTF-8"},
		{"envelopes of the wrong wire type", wrongType, "its envelopes have wire type 0"},
		{"a truncated envelope", []byte{0x0a, 0x05, 0x12}, "envelope 0 of the batch"},
	} {
		var b replyBatch
		err := newWireCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(c.data)}, &b)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
	}
}

// FuzzReplyBatchReadsAsTheCodecReads: bytes that both the codec and protobuf read as a batch
// are read by a link as the same replies, in the same order, and nothing panics. (The
// generated code skips some malformed groups that protobuf and a link refuse.)
func FuzzReplyBatchReadsAsTheCodecReads(f *testing.F) {
	for _, b := range codecSamples() {
		data, err := proto.Marshal(b)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte{0x0a, 0x04, 0x12, 0x02, 0x08, 0x01})
	c := newWireCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var viaLink replyBatch
		linkErr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaLink)
		var viaCodec wire.Batch
		if c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaCodec) != nil || proto.Unmarshal(data, &wire.Batch{}) != nil {
			return
		}
		require.NoError(t, linkErr, "the codec read %x", data)
		var want []*wire.Reply
		for _, env := range viaCodec.Envelopes {
			if env.Reply != nil {
				want = append(want, env.Reply)
			}
		}
		require.Len(t, viaLink.replies, len(want))
		for i := range want {
			require.True(t, proto.Equal(want[i], viaLink.replies[i]), "reply %d: the codec read %v, a link %v", i, want[i], viaLink.replies[i])
		}
	})
}
