package transport

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// wireCodec encodes the mesh's messages with code generated for them (vtprotobuf) instead of
// protobuf's reflection, which cost a tenth of a node's CPU per remote call. The bytes are the
// same protobuf encoding, and the codec keeps the name "proto", so a peer that decodes with
// protobuf itself reads them alike.
type wireCodec struct{ fallback encoding.CodecV2 }

// vtMessage is a message with generated encoding code.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

func newWireCodec() wireCodec { return wireCodec{fallback: encoding.GetCodecV2(proto.Name)} }

// Name keeps the content subtype of protobuf: the encoding is the same.
func (wireCodec) Name() string { return proto.Name }

// Marshal encodes v into one buffer, taken from gRPC's pool when it is large enough to be worth
// pooling; gRPC frees it once written. Like protobuf, it refuses a string field of the mesh's
// messages that is not UTF-8 (the transport checks requests and replies before it queues
// them, so that one bad string fails its own call, not the stream), and it refuses an
// envelope that holds more than one message. Should the generated code ever get a message
// wrong (its size, or a panic), protobuf encodes it instead.
func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	if b, ok := v.(*wire.Batch); ok {
		if err := checkBatch(b); err != nil {
			return nil, err
		}
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if !encodeSized(m, buf) {
			return c.fallback.Marshal(v)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if !encodeSized(m, (*buf)[:size]) {
		pool.Put(buf)
		return c.fallback.Marshal(v)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// encodeSized encodes m into buf, which its size was taken for, and reports whether it filled
// buf exactly. The generated code writes from the end of buf backwards and panics when buf is
// short; a size it got wrong (the generator's does for a oneof case without its message, which
// wire.proto has none of) is a false here.
func encodeSized(m vtMessage, buf []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	n, err := m.MarshalToSizedBufferVT(buf)
	return err == nil && n == len(buf)
}

// Unmarshal decodes data into v. The generated code copies every bytes field, so the buffer
// goes back to the pool at once. Protobuf refuses a string field that is not UTF-8 and the
// generated code does not, so a batch is checked here: a peer that sends such a string, or an
// envelope that holds more than one message, has its stream ended. An inBatch is read with the
// same checks into the envelopes it reuses.
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if b, ok := v.(*inBatch); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		return b.decode(buf.ReadOnlyData())
	}
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if err := m.UnmarshalVT(buf.ReadOnlyData()); err != nil {
		return err
	}
	if b, ok := v.(*wire.Batch); ok {
		return checkBatch(b)
	}
	return nil
}

// checkBatch refuses a batch that checkEnvelope refuses an envelope of.
func checkBatch(b *wire.Batch) error {
	for i, env := range b.Envelopes {
		if err := checkEnvelope(i, env); err != nil {
			return err
		}
	}
	return nil
}

// checkEnvelope refuses envelope i of a batch if it holds more than one message, or a string
// field that is not valid UTF-8. The string fields of every message a batch holds are listed
// here; TestCheckUTF8CoversEveryStringField fails when wire.proto gains one that is not.
func checkEnvelope(i int, env *wire.Envelope) error {
	switch held := envelopeHolds(env); {
	case held > 1:
		return fmt.Errorf("transport: envelope %d of the batch holds %d messages: an envelope holds one", i, held)
	case env.GetRequest() != nil:
		return requestUTF8(env.GetRequest())
	case env.GetReply() != nil:
		return replyUTF8(env.GetReply())
	}
	return nil
}

// envelopeHolds is how many messages env holds (0 for a nil envelope).
func envelopeHolds(env *wire.Envelope) int {
	held := 0
	for _, set := range [...]bool{env.GetRequest() != nil, env.GetReply() != nil, env.GetCancel() != nil, env.GetReading() != nil, env.GetProbe() != nil} {
		if set {
			held++
		}
	}
	return held
}

// maxTextBytes bounds the string fields of one request or reply, all but its payload: gRPC
// refuses a batch beyond the payload limit and the room a batch keeps for its envelopes
// (envelopeOverhead), and that fails the stream and every call on it, so a message whose texts
// would not fit fails its own call instead. Every field the runtime writes is far shorter: IDs
// and names of 1 KiB at most, an error's texts of 18 KiB (wire.MaxErrorMessageBytes).
const maxTextBytes = envelopeOverhead / 2

// requestTextBytes is the length of r's string fields.
func requestTextBytes(r *wire.Request) int {
	return len(r.Type) + len(r.Id) + len(r.Node) + len(r.Method) + len(r.Traceparent) + len(r.Tracestate)
}

// replyTextBytes is the length of r's string fields, its error's included.
func replyTextBytes(r *wire.Reply) int {
	e := r.GetError()
	return len(r.Owner) + len(r.Redirect) + len(e.GetMessage()) + len(e.GetAppCode()) + len(e.GetQueueWhere())
}

// requestUTF8 refuses a request with a string field that is not valid UTF-8.
func requestUTF8(r *wire.Request) error {
	if requestTextValid(r, false) {
		return nil // every call's check, without naming the fields
	}
	return validUTF8("request", r.GetCallId(), stringFields{
		{"type", r.GetType()}, {"id", r.GetId()}, {"node", r.GetNode()}, {"method", r.GetMethod()},
		{"traceparent", r.GetTraceparent()}, {"tracestate", r.GetTracestate()},
	})
}

// requestTextValid reports whether the string fields of r are valid UTF-8; namesValid says
// that its type, method and node names are known to be.
func requestTextValid(r *wire.Request, namesValid bool) bool {
	return (namesValid || utf8.ValidString(r.Type) && utf8.ValidString(r.Node) && utf8.ValidString(r.Method)) &&
		utf8.ValidString(r.Id) && utf8.ValidString(r.Traceparent) && utf8.ValidString(r.Tracestate)
}

// replyUTF8 refuses a reply with a string field, its error's included, that is not valid UTF-8.
func replyUTF8(r *wire.Reply) error {
	e := r.GetError()
	if utf8.ValidString(r.Owner) && utf8.ValidString(r.Redirect) && utf8.ValidString(e.GetMessage()) &&
		utf8.ValidString(e.GetAppCode()) && utf8.ValidString(e.GetQueueWhere()) {
		return nil
	}
	return validUTF8("reply", r.GetCallId(), stringFields{
		{"owner", r.GetOwner()}, {"redirect", r.GetRedirect()}, {"error.message", e.GetMessage()},
		{"error.app_code", e.GetAppCode()}, {"error.queue_where", e.GetQueueWhere()},
	})
}

func validUTF8(kind string, id uint64, f stringFields) error {
	for _, s := range f {
		if s.v != "" && !utf8.ValidString(s.v) {
			return fmt.Errorf("transport: the %s of call %d: field %s is not valid UTF-8", kind, id, s.name)
		}
	}
	return nil
}

// stringFields names string fields and their values; it has room for the most a message has.
type stringFields [6]struct{ name, v string }
