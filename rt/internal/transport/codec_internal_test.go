package transport

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
			{Request: req},
			{Reply: reply},
			{Cancel: &wire.Cancel{CallId: 3}},
		}},
		{Envelopes: []*wire.Envelope{{Request: large}}},
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

// TestCheckUTF8CoversEveryStringField: protobuf refuses a string field that is not UTF-8; the
// codec refuses a batch with one in any string field of a request, a reply or its error, both
// ways, naming the field. The fields are found by reflection, so a string field added to
// wire.proto and not to checkBatch fails here.
func TestCheckUTF8CoversEveryStringField(t *testing.T) {
	c := newWireCodec()
	cases := 0
	for _, body := range []proto.Message{&wire.Request{CallId: 5}, &wire.Reply{CallId: 5, Error: &wire.Error{}}} {
		for _, path := range stringFieldPaths(body.ProtoReflect().Descriptor(), nil) {
			m := proto.Clone(body)
			setPath(m.ProtoReflect(), path, protoreflect.ValueOfString("J\xffoin"))
			b := &wire.Batch{}
			switch m := m.(type) {
			case *wire.Request:
				b.Envelopes = append(b.Envelopes, &wire.Envelope{Request: m})
			case *wire.Reply:
				b.Envelopes = append(b.Envelopes, &wire.Envelope{Reply: m})
			}
			name := pathName(path)
			_, err := c.Marshal(b)
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), "call 5: field "+name+" is not valid UTF-8")

			data := protowire.AppendTag(nil, 1, protowire.BytesType) // what a careless peer sends
			env := mustMarshalUnchecked(t, b.Envelopes[0])
			data = protowire.AppendBytes(data, env)
			var decoded wire.Batch
			err = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &decoded)
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), "field "+name+" is not valid UTF-8")

			// A stream's reader, which has read valid names before and keeps them, checks as much.
			in := &inBatch{}
			valid := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
				mustMarshalUnchecked(t, &wire.Envelope{Request: &wire.Request{Type: "t", Method: "m", Node: "n", Id: "i"}}))
			require.NoError(t, in.decode(valid))
			err = in.decode(data)
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), "field "+name+" is not valid UTF-8")
			cases++
		}
	}
	assert.Equal(t, 11, cases, "the string fields of a request, a reply and its error")

	// Every string field that a batch can hold is one of those.
	var reachable []string
	for _, path := range stringFieldPaths((&wire.Batch{}).ProtoReflect().Descriptor(), nil) {
		reachable = append(reachable, pathName(path))
	}
	assert.ElementsMatch(t, []string{
		"envelopes.request.type", "envelopes.request.id", "envelopes.request.node", "envelopes.request.method",
		"envelopes.request.traceparent", "envelopes.request.tracestate",
		"envelopes.reply.owner", "envelopes.reply.redirect", "envelopes.reply.error.message",
		"envelopes.reply.error.app_code", "envelopes.reply.error.queue_where",
	}, reachable, "a string field that checkBatch does not check")
}

// TestAnEnvelopeHoldsOneMessage: an envelope with more than one message is refused both ways,
// so that a peer cannot have a request read as a cancel or the reverse; one with none is
// encoded as protobuf encodes it, and read.
func TestAnEnvelopeHoldsOneMessage(t *testing.T) {
	c := newWireCodec()
	for _, env := range []*wire.Envelope{
		{Request: &wire.Request{CallId: 1}, Cancel: &wire.Cancel{CallId: 1}},
		{Request: &wire.Request{CallId: 1}, Reply: &wire.Reply{CallId: 1}},
		{Reply: &wire.Reply{CallId: 1}, Cancel: &wire.Cancel{CallId: 1}},
	} {
		b := &wire.Batch{Envelopes: []*wire.Envelope{{Cancel: &wire.Cancel{CallId: 2}}, env}}
		_, err := c.Marshal(b)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "envelope 1 of the batch holds 2 messages")

		data, err := proto.Marshal(b)
		require.NoError(t, err)
		var decoded wire.Batch
		err = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &decoded)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "envelope 1 of the batch holds 2 messages")
	}

	b := &wire.Batch{Envelopes: []*wire.Envelope{{}, {Cancel: &wire.Cancel{CallId: 2}}}}
	want, err := proto.Marshal(b)
	require.NoError(t, err)
	got, err := c.Marshal(b)
	require.NoError(t, err)
	assert.Equal(t, want, got.Materialize())
	var decoded wire.Batch
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &decoded))
	assert.True(t, proto.Equal(b, &decoded))
}

// stringFieldPaths lists the paths to the string fields of messages of md, nested messages
// included.
func stringFieldPaths(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		path := append(append([]protoreflect.FieldDescriptor(nil), prefix...), fd)
		switch fd.Kind() {
		case protoreflect.StringKind:
			out = append(out, path)
		case protoreflect.MessageKind:
			out = append(out, stringFieldPaths(fd.Message(), path)...)
		}
	}
	return out
}

func setPath(m protoreflect.Message, path []protoreflect.FieldDescriptor, v protoreflect.Value) {
	for _, fd := range path[:len(path)-1] {
		m = m.Mutable(fd).Message()
	}
	m.Set(path[len(path)-1], v)
}

func pathName(path []protoreflect.FieldDescriptor) string {
	var parts []string
	for _, fd := range path {
		parts = append(parts, string(fd.Name()))
	}
	return strings.Join(parts, ".")
}

// mustMarshalUnchecked encodes m without protobuf's UTF-8 check, as a peer that does not
// check would.
func mustMarshalUnchecked(t *testing.T, m *wire.Envelope) []byte {
	t.Helper()
	data, err := m.MarshalVT()
	require.NoError(t, err)
	return data
}

// TestWireCodecWritesEveryFieldAsProtobufDoes sets every field of every message of wire.proto
// by reflection and compares the codec's bytes with protobuf's: a field that the generated code
// does not know (wire.proto changed, make proto not run) fails here.
func TestWireCodecWritesEveryFieldAsProtobufDoes(t *testing.T) {
	files := []protoreflect.FileDescriptor{wire.File_wire_proto}
	msgs := files[0].Messages()
	require.Positive(t, msgs.Len())
	for i := range msgs.Len() {
		md := msgs.Get(i)
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		require.NoError(t, err)
		m := mt.New()
		fillAll(m, 1)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Interface())
		require.NoError(t, err)
		vt, ok := m.Interface().(vtMessage)
		require.True(t, ok, "%s has no generated encoding code: run make proto", md.FullName())
		got := make([]byte, vt.SizeVT())
		require.True(t, encodeSized(vt, got), "%s: the generated code's size is wrong", md.FullName())
		assert.True(t, bytes.Equal(want, got), "%s: the codec writes %x, protobuf %x", md.FullName(), got, want)

		back := mt.New().Interface()
		require.NoError(t, back.(vtMessage).UnmarshalVT(want))
		assert.True(t, proto.Equal(m.Interface(), back), "%s reads back as %v", md.FullName(), back)
	}
}

// fillAll sets every field of m to a value that is not zero, nested messages too (to depth 3).
func fillAll(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					if depth < 3 {
						fillAll(e.Message(), depth+1)
					}
					l.Append(e)
				} else {
					l.Append(scalar(fd, i))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth < 3 {
				fillAll(m.Mutable(fd).Message(), depth+1)
			} else {
				m.Mutable(fd)
			}
		default:
			m.Set(fd, scalar(fd, i))
		}
	}
}

// scalar is a value of fd's kind that is not zero.
func scalar(fd protoreflect.FieldDescriptor, i int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("s%d-\u00e9", i))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(i), 0, 0xff})
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-int64(i+1) << 40)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(i+1) << 40)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(-int32(i + 1))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(i+1) << 20)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(2.5)
	}
	panic(fmt.Sprintf("no sample for %v", fd.Kind()))
}

// TestWireCodecFallsBackToProtobuf: a message without generated code is encoded by protobuf.
func TestWireCodecFallsBackToProtobuf(t *testing.T) {
	c := newWireCodec()
	m := wrapperspb.String("not one of the mesh's messages")
	data, err := c.Marshal(m)
	require.NoError(t, err)
	var decoded wrapperspb.StringValue
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
		if c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaCodec) != nil {
			return
		}
		// What the codec accepts it can send on to a peer that decodes with protobuf.
		_, err := proto.Marshal(&viaCodec)
		require.NoError(t, err, "the codec accepted %v", &viaCodec)
		if proto.Unmarshal(data, &viaProto) != nil {
			return
		}
		require.True(t, proto.Equal(&viaProto, &viaCodec), "protobuf read %v, the codec %v", &viaProto, &viaCodec)
	})
}

// TestQueuedSizeIsTheEnvelopesSize: a queued message is accounted at the size of the envelope
// it is sent in, for messages whose length takes one, two and three bytes.
func TestQueuedSizeIsTheEnvelopesSize(t *testing.T) {
	for _, n := range []int{0, 10, 200, 20_000} {
		payload := bytes.Repeat([]byte{1}, n)
		req := &wire.Request{CallId: 1, Method: "M", Payload: payload}
		rep := &wire.Reply{CallId: 1, Payload: payload}
		var e wire.Envelope // one slot wraps each kind in turn, as a reused one does
		for _, c := range []struct {
			q   queued
			env *wire.Envelope
		}{
			{queuedRequest(req), &wire.Envelope{Request: req}},
			{queuedReply(rep), &wire.Envelope{Reply: rep}},
			{queuedCancel(&wire.Cancel{CallId: 9}), &wire.Envelope{Cancel: &wire.Cancel{CallId: 9}}},
		} {
			assert.Equal(t, proto.Size(c.env), c.q.size, "%v of %d bytes", c.env, n)
			assert.True(t, proto.Equal(c.env, wrap(&e, c.q)), "%v of %d bytes", c.env, n)
		}
	}
}

// TestABatchStaysWithinItsBudget: a batch of many small envelopes encodes to no more than the
// sender's byte budget, counting each envelope's tag and length in the batch, so that gRPC's
// send limit never refuses it (which would end the stream and every call on it).
func TestABatchStaysWithinItsBudget(t *testing.T) {
	const maxMessage = 64 << 10
	s := newSender(nil, maxMessage, nil, true)
	for i := range 40_000 {
		require.Positive(t, s.push(queuedReply(&wire.Reply{CallId: uint64(i), Payload: bytes.Repeat([]byte{1}, 100)})))
	}
	taken := 0
	for len(s.queue) > 0 {
		var b wire.Batch
		s.take(&b)
		require.NotEmpty(t, b.Envelopes)
		assert.LessOrEqual(t, proto.Size(&b), s.maxBytes, "a batch of %d envelopes", len(b.Envelopes))
		taken += len(b.Envelopes)
		s.releaseEnvelopes(len(b.Envelopes))
	}
	assert.Equal(t, 40_000, taken)
}
