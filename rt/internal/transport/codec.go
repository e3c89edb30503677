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
// messages that is not UTF-8.
func (c wireCodec) Marshal(v any) (out mem.BufferSlice, err error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	if b, ok := v.(*wire.Batch); ok {
		if err := checkUTF8(b); err != nil {
			return nil, err
		}
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if err := encodeSized(m, buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if err := encodeSized(m, (*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// encodeSized encodes m into buf, which its size was taken for. A message that changed size
// meanwhile is an error, not a panic (the generated code writes from the end of buf backwards).
func encodeSized(m vtMessage, buf []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("transport: encoding a %T failed (it changed while it was encoded?): %v", m, p)
		}
	}()
	n, err := m.MarshalToSizedBufferVT(buf)
	if err == nil && n != len(buf) {
		err = fmt.Errorf("transport: a %T encoded to %d bytes, its size said %d (it changed while it was encoded?)", m, n, len(buf))
	}
	return err
}

// Unmarshal decodes data into v. The generated code copies every bytes field, so the buffer
// goes back to the pool at once. Protobuf refuses a string field that is not UTF-8 and the
// generated code does not, so a batch is checked here: a peer that sends such a string has its
// stream ended, as before.
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
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
		return checkUTF8(b)
	}
	return nil
}

// checkUTF8 refuses a batch with a string field that is not valid UTF-8. The string fields of
// every message a batch holds are listed here; TestCheckUTF8CoversEveryStringField fails when
// wire.proto gains one that is not.
func checkUTF8(b *wire.Batch) error {
	for _, env := range b.Envelopes {
		var kind string
		var id uint64
		var f stringFields
		switch body := env.Body.(type) {
		case *wire.Envelope_Request:
			r := body.Request
			kind, id, f = "request", r.GetCallId(), stringFields{
				{"type", r.GetType()}, {"id", r.GetId()}, {"node", r.GetNode()}, {"method", r.GetMethod()},
				{"traceparent", r.GetTraceparent()}, {"tracestate", r.GetTracestate()},
			}
		case *wire.Envelope_Reply:
			r := body.Reply
			e := r.GetError()
			kind, id, f = "reply", r.GetCallId(), stringFields{
				{"owner", r.GetOwner()}, {"redirect", r.GetRedirect()}, {"error.message", e.GetMessage()},
				{"error.app_code", e.GetAppCode()}, {"error.queue_where", e.GetQueueWhere()},
			}
		default:
			continue
		}
		for _, s := range f {
			if s.v != "" && !utf8.ValidString(s.v) {
				return fmt.Errorf("transport: the %s of call %d: field %s is not valid UTF-8", kind, id, s.name)
			}
		}
	}
	return nil
}

// stringFields names string fields and their values; it has room for the most a message has.
type stringFields [6]struct{ name, v string }
