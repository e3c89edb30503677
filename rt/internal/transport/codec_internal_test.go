package transport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// codecSamples are batches with every kind of envelope and every field of a request and a
// reply set, one payload beyond gRPC's pooling threshold.
func codecSamples() []*wire.Batch {
	req := &wire.Request{
		CallId: 7, Op: wire.Op_OP_CALL, Kind: 3, Type: "Room", Id: "r-1", Node: "n1", Intent: true,
		Method: "Join", Payload: []byte("hello"), TimeoutNanos: 5e9, DeadlineUnixNanos: 1_700_000_000_000_000_000,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Tracestate: "k=v",
		Follow: true, Generation: 9,
	}
	reply := &wire.Reply{
		CallId: 7, Payload: []byte{0, 1, 2}, Owner: "n2", Redirect: "n3", Refused: true, Generation: 4, Held: true,
		Error: &wire.Error{Code: wire.Code_CODE_QUEUE_FULL, Message: "full", AppCode: "x", Lane: 1, Axis: 2, Limit: 10, Queued: 9, Requested: 3, Where: 1, QueueWhere: "Room.Join"},
	}
	large := &wire.Request{CallId: 8, Op: wire.Op_OP_SEND, Payload: bytes.Repeat([]byte{0xab}, 64<<10)}
	return []*wire.Batch{
		{},
		{Envelopes: []*wire.Envelope{{}}},
		{Envelopes: []*wire.Envelope{
			{Body: &wire.Envelope_Request{Request: req}},
			{Body: &wire.Envelope_Reply{Reply: reply}},
			{Body: &wire.Envelope_Cancel{Cancel: &wire.Cancel{CallId: 3}}},
		}},
		{Envelopes: []*wire.Envelope{{Body: &wire.Envelope_Request{Request: large}}}},
	}
}

// TestWireCodecIsProtobufsEncoding: the codec writes what protobuf writes, and each reads
// what the other wrote, so nodes of either codec understand each other.
func TestWireCodecIsProtobufsEncoding(t *testing.T) {
	c := newWireCodec()
	for i, b := range codecSamples() {
		want, err := proto.Marshal(b)
		require.NoError(t, err)
		got, err := c.Marshal(b)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got.Materialize()), "sample %d", i)
		got.Free()

		var decoded wire.Batch
		require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &decoded))
		assert.True(t, proto.Equal(b, &decoded), "sample %d: %v", i, &decoded)
	}
}

// TestWireCodecRefusesARequestThatIsNotUTF8: protobuf refuses a string field that is not
// UTF-8; the codec refuses such a request too, naming the field.
func TestWireCodecRefusesARequestThatIsNotUTF8(t *testing.T) {
	c := newWireCodec()
	b := &wire.Batch{Envelopes: []*wire.Envelope{{Body: &wire.Envelope_Request{Request: &wire.Request{CallId: 5, Method: "J\xffoin"}}}}}
	data, err := c.Marshal(b)
	require.NoError(t, err)
	var decoded wire.Batch
	err = c.Unmarshal(data, &decoded)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "request 5: field method is not valid UTF-8")
}

// TestWireCodecFallsBackToProtobuf: a message without generated code is encoded by protobuf.
func TestWireCodecFallsBackToProtobuf(t *testing.T) {
	c := newWireCodec()
	m := &wire.SpotOwner{Node: "n1", Lease: 3}
	data, err := c.Marshal(m)
	require.NoError(t, err)
	var decoded wire.SpotOwner
	require.NoError(t, c.Unmarshal(data, &decoded))
	assert.True(t, proto.Equal(m, &decoded))
}

// FuzzWireCodecReadsAsProtobufReads: bytes that both the codec and protobuf decode as a batch
// are the same message to both, and nothing panics. The codec is stricter: a known field with
// the wrong wire type, which protobuf keeps as an unknown field, is an error to it.
func FuzzWireCodecReadsAsProtobufReads(f *testing.F) {
	for _, b := range codecSamples() {
		data, err := proto.Marshal(b)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	c := newWireCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var viaCodec, viaProto wire.Batch
		if c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaCodec) != nil || proto.Unmarshal(data, &viaProto) != nil {
			return
		}
		require.True(t, proto.Equal(&viaProto, &viaCodec), "protobuf read %v, the codec %v", &viaProto, &viaCodec)
	})
}
