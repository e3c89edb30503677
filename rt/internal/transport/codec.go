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
// pooling; gRPC frees it once written.
func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v. The generated code copies every bytes field, so the buffer
// goes back to the pool at once. Protobuf refuses a string field that is not UTF-8 and the
// generated code does not, so a batch's requests are checked here: a peer that sends such a
// request has its stream ended, as before.
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

// checkUTF8 refuses a batch whose requests carry a string field that is not valid UTF-8.
func checkUTF8(b *wire.Batch) error {
	for _, env := range b.Envelopes {
		r := env.GetRequest()
		if r == nil {
			continue
		}
		for _, f := range [...]struct{ name, v string }{
			{"type", r.Type}, {"id", r.Id}, {"node", r.Node}, {"method", r.Method},
			{"traceparent", r.Traceparent}, {"tracestate", r.Tracestate},
		} {
			if !utf8.ValidString(f.v) {
				return fmt.Errorf("transport: request %d: field %s is not valid UTF-8", r.CallId, f.name)
			}
		}
	}
	return nil
}
