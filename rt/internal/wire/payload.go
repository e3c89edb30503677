package wire

import (
	"sync"

	"google.golang.org/protobuf/proto"
)

// A Payload is an application message encoded to be sent in requests, in an array that its
// sender gives back (Recycle) once nothing reads it, for the next message to be encoded into.
type Payload struct {
	b []byte
}

// payloads holds the Payloads given back, with their arrays when they keep them.
var payloads = sync.Pool{New: func() any { return new(Payload) }}

// EncodePayload encodes m into a Payload: into the array of one given back, when it holds m's
// bytes and at most twice as many, else into a new one. A message protobuf cannot encode is an
// error, and nothing is taken.
func EncodePayload(m proto.Message) (*Payload, error) {
	p := payloads.Get().(*Payload)
	// The size taken here is the one the encoding then uses.
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(PayloadArray(p.b, proto.Size(m)), m)
	if err != nil {
		payloads.Put(p)
		return nil, err
	}
	p.b = b
	return p, nil
}

// Bytes returns the encoded message. It is read until p is recycled.
func (p *Payload) Bytes() []byte { return p.b }

// Recycle gives p and its array back for another message. Whoever calls it must know that
// nothing reads p's bytes any more: every request that carried them was written to its stream
// or never queued.
func (p *Payload) Recycle() {
	p.b = kept(p.b)
	payloads.Put(p)
}
