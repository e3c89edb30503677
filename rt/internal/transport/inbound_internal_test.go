package transport

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/zlink-go/zlink/internal/proctest"
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
	holding := slices.DeleteFunc(slices.Clone(sent.Envelopes), func(env *wire.Envelope) bool { return envelopeHolds(env) == 0 })
	require.Len(t, first, len(holding), "the empty envelope is passed over")
	var held []proto.Message
	for i, env := range first {
		assert.True(t, proto.Equal(holding[i], env), "envelope %d: %v", i, env)
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

	// A batch read without a reset in between replaces the one before.
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(next)}, &b))
	assert.Len(t, b.envelopes(), 1)
}

// TestAnInBatchSkipsWhatItDoesNotKnow: fields of a batch other than its envelopes (of a later
// version, or a careless peer's) are skipped whatever their wire type, as protobuf skips them.
func TestAnInBatchSkipsWhatItDoesNotKnow(t *testing.T) {
	env := mustMarshalUnchecked(t, &wire.Envelope{Cancel: &wire.Cancel{CallId: 7}})
	unknown := map[string][]byte{
		"a varint":         protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 300),
		"a fixed64":        protowire.AppendFixed64(protowire.AppendTag(nil, 6, protowire.Fixed64Type), 1),
		"a fixed32":        protowire.AppendFixed32(protowire.AppendTag(nil, 7, protowire.Fixed32Type), 1),
		"bytes":            protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), []byte("later")),
		"a message as 2":   protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), env),
		"a group":          protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(protowire.AppendTag(nil, 9, protowire.StartGroupType), 1, protowire.VarintType), 4), 9, protowire.EndGroupType),
		"an empty message": protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil),
	}
	for name, field := range unknown {
		data := slices.Concat(field, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), env), field)
		require.NoError(t, proto.Unmarshal(data, &wire.Batch{}), "%s: protobuf reads it", name)
		var b inBatch
		require.NoError(t, newWireCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b), name)
		require.Len(t, b.envelopes(), 1, name)
		assert.Equal(t, uint64(7), b.envelopes()[0].GetCancel().GetCallId(), name)
	}
}

// TestAnInBatchKeepsAtMostItsShareOfEnvelopes: empty envelopes take no room, and after a burst's
// larger batch an inBatch keeps keptInEnvelopes envelopes for the next.
func TestAnInBatchKeepsAtMostItsShareOfEnvelopes(t *testing.T) {
	var data []byte
	for range 100_000 {
		data = protowire.AppendBytes(protowire.AppendTag(data, 1, protowire.BytesType), nil)
	}
	var b inBatch
	c := newWireCodec()
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b))
	assert.Empty(t, b.envelopes())
	assert.LessOrEqual(t, len(b.envs), 1, "a flood of empty envelopes takes one")

	burst := &wire.Batch{}
	for i := range 1000 {
		burst.Envelopes = append(burst.Envelopes, &wire.Envelope{Cancel: &wire.Cancel{CallId: uint64(i + 1)}})
	}
	data, err := proto.Marshal(burst)
	require.NoError(t, err)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b))
	require.Len(t, b.envelopes(), 1000)
	b.reset()
	assert.Len(t, b.envs, keptInEnvelopes)
	assert.Equal(t, keptInEnvelopes, cap(b.envs))
	for _, env := range b.envs {
		assert.Zero(t, envelopeHolds(env))
	}
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

// FuzzInBatchReadsAsTheCodecReads: of bytes that protobuf reads as a batch, a stream's inBatch
// refuses what the codec refuses and reads the rest as the same envelopes (less the empty
// ones), and nothing panics.
func FuzzInBatchReadsAsTheCodecReads(f *testing.F) {
	for _, b := range codecSamples() {
		data, err := proto.Marshal(b)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte{0x0a, 0x04, 0x12, 0x02, 0x08, 0x01})
	f.Add([]byte{0x28, 0x01, 0x0a, 0x04, 0x1a, 0x02, 0x08, 0x07, 0x12, 0x00, 0x4b, 0x08, 0x01, 0x4c})
	c := newWireCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		viaStream := inBatch{max: math.MaxInt} // the codec has no count bound either
		// Read from a copy that is overwritten once read, as gRPC reuses what it read into.
		read := slices.Clone(data)
		streamErr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(read)}, &viaStream)
		clear(read)
		if proto.Unmarshal(data, &wire.Batch{}) != nil {
			return
		}
		var viaCodec wire.Batch
		codecErr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &viaCodec)
		require.Equal(t, codecErr == nil, streamErr == nil, "the codec: %v; an inBatch: %v; of %x", codecErr, streamErr, data)
		if codecErr != nil {
			return
		}
		want := slices.DeleteFunc(viaCodec.Envelopes, func(env *wire.Envelope) bool { return envelopeHolds(env) == 0 })
		got := viaStream.envelopes()
		require.Len(t, got, len(want))
		for i := range want {
			if want[i].Request != nil {
				wire.DropUnknown(want[i].Request) // which a stream lets go of (readRequest)
			}
			require.True(t, proto.Equal(want[i], got[i]), "envelope %d of %x", i, data)
		}
	})
}

// TestRecycledMessagesCarryNothingIntoTheNextBatch: a request or a reply is read into one
// that an earlier call gave back; whatever that one held, the new one holds only what the
// batch says, and an envelope that begins with a message and holds another is refused as
// before.
func TestRecycledMessagesCarryNothingIntoTheNextBatch(t *testing.T) {
	fullReply := &wire.Reply{CallId: 1, Payload: []byte{1, 2}, Owner: "n1", Redirect: "n2", Refused: true, Generation: 4, Held: true,
		Error: &wire.Error{Code: wire.Code_CODE_QUEUE_FULL, Message: "full"}}
	bareReply := &wire.Reply{CallId: 2}
	fullRequest := &wire.Request{CallId: 3, Op: wire.Op_OP_SEND, Kind: 2, Type: "T", Id: "i", Node: "n", Intent: true, Method: "M",
		Payload: []byte{3}, TimeoutNanos: 5, DeadlineUnixNanos: 6, Traceparent: "tp", Tracestate: "ts", Follow: true, Generation: 7}
	bareRequest := &wire.Request{CallId: 4}
	sent := []*wire.Envelope{{Reply: fullReply}, {Request: fullRequest}, {Reply: bareReply}, {Request: bareRequest}, {Reply: fullReply}, {Request: fullRequest}}
	data, err := proto.Marshal(&wire.Batch{Envelopes: sent})
	require.NoError(t, err)
	c := newWireCodec()
	var b inBatch
	for round := range 50 { // the pool may drop what it is given: many rounds see a reuse
		require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b))
		got := b.envelopes()
		require.Len(t, got, len(sent))
		for i, want := range sent {
			assert.True(t, proto.Equal(want, got[i]), "round %d, envelope %d: %v", round, i, got[i])
			if got[i].Reply != nil { // given back as the call that read it does
				wire.RecycleInboundReply(got[i].Reply)
			} else {
				wire.RecycleInboundRequest(got[i].Request)
			}
		}
		b.reset()
	}

	for _, env := range []*wire.Envelope{{Reply: bareReply, Cancel: &wire.Cancel{CallId: 2}}, {Request: bareRequest, Reply: bareReply}} {
		two := mustMarshalUnchecked(t, env)
		require.NotZero(t, first(two))
		err = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), two))}, &b)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "holds 2 messages")
	}
}

// TestReadingGivenBackMessagesAllocatesNone: a stream that reads batches of requests and
// replies, whose calls give them back, reads them into those given back, and their payloads
// into the arrays of the payloads given back: a batch without strings is read without an
// allocation per message.
func TestReadingGivenBackMessagesAllocatesNone(t *testing.T) {
	if proctest.RaceEnabled {
		t.Skip("the race detector makes the pool drop what it is given at random")
	}
	var envs []*wire.Envelope
	payload := make([]byte, 100)
	for i := range 16 {
		envs = append(envs, &wire.Envelope{Reply: &wire.Reply{CallId: uint64(i), Payload: payload}},
			&wire.Envelope{Request: &wire.Request{CallId: uint64(i), Op: wire.Op_OP_CALL, Payload: payload}})
	}
	data, err := proto.Marshal(&wire.Batch{Envelopes: envs})
	require.NoError(t, err)
	var b inBatch
	read := func() {
		require.NoError(t, b.decode(data))
		for _, env := range b.envelopes() {
			if env.Reply != nil {
				wire.RecycleInboundReply(env.Reply)
			} else {
				wire.RecycleInboundRequest(env.Request)
			}
		}
		b.reset()
	}
	read()
	assert.Less(t, testing.AllocsPerRun(100, read), 4.0, "a batch of %d messages", len(envs))
}

// TestARequestReadKeepsNothingOfTheBatchBytes: a request is read from the batch's bytes without
// copying each name, yet once read nothing of it refers to those bytes, which gRPC reuses: every
// field of a request, whatever fields it gains, reads the same after the bytes are overwritten.
// Its names are the stream's copies, the same for every request that repeats them.
func TestARequestReadKeepsNothingOfTheBatchBytes(t *testing.T) {
	sent := &wire.Request{}
	fields := sent.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		var v protoreflect.Value
		switch fd.Kind() {
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString(fmt.Sprintf("%s of the request", fd.Name()))
		case protoreflect.BytesKind:
			v = protoreflect.ValueOfBytes([]byte(fmt.Sprintf("%s of the request", fd.Name())))
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.EnumKind:
			v = protoreflect.ValueOfEnum(1)
		case protoreflect.Uint32Kind:
			v = protoreflect.ValueOfUint32(uint32(fd.Number()))
		case protoreflect.Uint64Kind:
			v = protoreflect.ValueOfUint64(uint64(fd.Number()))
		case protoreflect.Int64Kind:
			v = protoreflect.ValueOfInt64(int64(fd.Number()))
		default:
			t.Fatalf("field %s of kind %v: give it a value here", fd.Name(), fd.Kind())
		}
		sent.ProtoReflect().Set(fd, v)
	}
	// A field of a later version is let go of: the node holds nothing of a request that it
	// does not charge.
	want := proto.Clone(sent).(*wire.Request)
	sent.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 999, protowire.BytesType), []byte("a field of a later version")))
	batch := &wire.Batch{Envelopes: []*wire.Envelope{{Request: sent}, {Request: sent}}}
	var b inBatch
	var read []*wire.Request
	for range 2 {
		data, err := proto.Marshal(batch)
		require.NoError(t, err)
		require.NoError(t, b.decode(data))
		for i := range data {
			data[i] = 0xA5
		}
		for _, env := range b.envelopes() {
			require.NotNil(t, env.Request)
			assert.True(t, proto.Equal(want, env.Request), "read %v, sent %v", env.Request, sent)
			read = append(read, env.Request)
		}
	}
	for _, r := range read[1:] {
		assert.Same(t, unsafe.StringData(read[0].Type), unsafe.StringData(r.Type), "a type read again is the stream's copy")
		assert.Same(t, unsafe.StringData(read[0].Method), unsafe.StringData(r.Method), "a method read again is the stream's copy")
		assert.Same(t, unsafe.StringData(read[0].Node), unsafe.StringData(r.Node), "a node read again is the stream's copy")
	}
}

// TestAStreamKeepsBoundedNames: a peer that sends a new name with every request, or names of
// any length, leaves the stream at most maxNames names of at most maxNameBytes each; every
// request still reads as it was sent.
func TestAStreamKeepsBoundedNames(t *testing.T) {
	var b inBatch
	long := strings.Repeat("n", maxNameBytes+1)
	for i := range 2 * maxNames {
		sent := &wire.Request{CallId: uint64(i), Type: fmt.Sprintf("type-%d", i), Method: long}
		data, err := proto.Marshal(&wire.Batch{Envelopes: []*wire.Envelope{{Request: sent}}})
		require.NoError(t, err)
		require.NoError(t, b.decode(data))
		require.True(t, proto.Equal(sent, b.envelopes()[0].Request))
	}
	assert.Len(t, b.names, maxNames)
	assert.NotContains(t, b.names, long)
}

// emptyRequests encodes a batch of n empty requests, 4 bytes each on the wire.
func emptyRequests(n int) []byte {
	data := make([]byte, 0, 4*n)
	for range n {
		data = append(data, 0x0a, 0x02, 0x0a, 0x00) // envelope{request{}}
	}
	return data
}

// TestE1_ABatchOfMoreMessagesThanASenderSendsIsRefused: a peer that announced this node's
// bound of a batch sends one of the largest size a stream accepts made of empty requests, 4
// bytes each on the wire and hundreds once decoded, none charged to the Core HWM until
// admitted. A batch of as many messages as it announced is read; one more fails the batch (and
// the stream), so what one batch decodes to stays a small multiple of its bytes.
func TestE1_ABatchOfMoreMessagesThanASenderSendsIsRefused(t *testing.T) {
	c := newWireCodec()
	b := inBatch{max: maxSentEnvelopes}
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(emptyRequests(maxSentEnvelopes))}, &b))
	require.Len(t, b.envelopes(), maxSentEnvelopes)
	b.reset()

	const limit = DefaultMaxMessageSize + envelopeOverhead // gRPC's MaxRecvMsgSize for the stream
	data := emptyRequests(limit / 4)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &b)
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "more than")
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	assert.LessOrEqual(t, b.n, maxSentEnvelopes)
	assert.LessOrEqual(t, held, int64(len(data)), "%d bytes of empty requests decoded to %d bytes", len(data), held)
	runtime.KeepAlive(&b)
}

// TestE1_APeersBatchBoundIsReadFromItsHeader: a peer's announced bound is taken as it is up to
// the one this node reads, the protocol's when it announces none; a larger one, or a header
// that names no positive count, is refused.
func TestE1_APeersBatchBoundIsReadFromItsHeader(t *testing.T) {
	for _, c := range []struct {
		header []string
		want   int
		err    string
	}{
		{nil, maxSentEnvelopes, ""},
		{[]string{"2"}, 2, ""},
		{[]string{strconv.Itoa(maxSentEnvelopes)}, maxSentEnvelopes, ""},
		{[]string{strconv.Itoa(maxSentEnvelopes + 1)}, 0, "more than the 4096 this node reads"},
		{[]string{"9223372036854775807"}, 0, "more than the 4096 this node reads"},
		{[]string{"0"}, 0, "invalid zlink-max-batch header"},
		{[]string{"-1"}, 0, "invalid zlink-max-batch header"},
		{[]string{"many"}, 0, "invalid zlink-max-batch header"},
		{[]string{"2", "3"}, 0, "invalid zlink-max-batch header"},
	} {
		md := metadata.MD{}
		if c.header != nil {
			md[maxBatchHeader] = c.header
		}
		n, err := peerBatchLimit(md)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, "%q", c.header)
			continue
		}
		require.NoError(t, err, "%q", c.header)
		assert.Equal(t, c.want, n, "%q", c.header)
	}
}

// TestE1_ABatchIsHeldToTheProtocolsBoundWhenNoneIsSet: a stream whose peer announced no bound
// holds its batches to the one every release announces: a batch of that many small messages
// is read, and one more fails it. No batch is read without a count bound.
func TestE1_ABatchIsHeldToTheProtocolsBoundWhenNoneIsSet(t *testing.T) {
	var b inBatch
	require.NoError(t, newWireCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(emptyRequests(maxSentEnvelopes))}, &b))
	assert.Len(t, b.envelopes(), maxSentEnvelopes)
	err := newWireCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(emptyRequests(maxSentEnvelopes + 1))}, &b)
	assert.ErrorContains(t, err, fmt.Sprintf("more than %d messages", maxSentEnvelopes))
}
