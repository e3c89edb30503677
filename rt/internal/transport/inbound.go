package transport

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// inBatch is what a stream reads into: the envelopes of one batch, in envelopes reused from
// batch to batch, so that reading a request or a reply allocates no envelope for it. The
// requests and replies they hold are taken for every batch from those given back
// (wire.NewInboundRequest, wire.NewInboundReply), and read into their payloads' arrays; once
// read, they are their calls', and a reset lets go of them.
type inBatch struct {
	envs  []*wire.Envelope // envs[:n] are the batch's
	n     int
	names names
	// max is the most messages a batch may hold: the bound the peer announced
	// (maxBatchHeader); 0 is maxSentEnvelopes, so that no batch is read without a bound.
	max int
	// size is the bytes of the batch read last, as it came.
	size int
}

// keptInEnvelopes is the most envelopes an inBatch keeps for the next batch: a burst's larger
// batch is left to the collector.
const keptInEnvelopes = 256

// envelopes returns the envelopes of the batch read last, in order.
func (b *inBatch) envelopes() []*wire.Envelope { return b.envs[:b.n] }

// reset empties b for the next batch, and lets go of the messages it held. Of a burst's
// larger batch it keeps keptInEnvelopes envelopes.
func (b *inBatch) reset() {
	for _, env := range b.envs[:b.n] {
		*env = wire.Envelope{} // zeroed, not Reset: see wire.RecycleRequest
	}
	b.n = 0
	if len(b.envs) > keptInEnvelopes {
		kept := make([]*wire.Envelope, keptInEnvelopes)
		copy(kept, b.envs)
		b.envs = kept
	}
}

// next returns an empty envelope for the batch's next.
func (b *inBatch) next() *wire.Envelope {
	if b.n == len(b.envs) {
		b.envs = append(b.envs, &wire.Envelope{})
	}
	env := b.envs[b.n]
	b.n++
	return env
}

// decode reads the encoded batch data in place of the batch read before, with the checks the
// codec makes of every batch (see checkEnvelope). Unknown fields of the batch are skipped, as
// protobuf skips them, and so are envelopes that hold no message: a flood of empty envelopes
// takes one. A batch of more than b.max messages is refused: what it decodes to stays bounded
// before any of it is charged (E1).
func (b *inBatch) decode(data []byte) error {
	b.reset()
	b.size = len(data)
	bound := cmp.Or(b.max, maxSentEnvelopes)
	for i := 0; len(data) > 0; {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("transport: a batch: %w", protowire.ParseError(n))
		}
		data = data[n:]
		if num != 1 {
			if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
				return fmt.Errorf("transport: a batch: field %d: %w", num, protowire.ParseError(n))
			}
			data = data[n:]
			continue
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("transport: envelope %d of the batch has wire type %d", i, typ)
		}
		v, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return fmt.Errorf("transport: envelope %d of the batch: %w", i, protowire.ParseError(n))
		}
		data = data[n:]
		if b.n == bound {
			return fmt.Errorf("transport: the batch holds more than %d messages, the most its sender may put in one", bound)
		}
		env := b.next()
		checked, err := b.readEnvelope(env, v)
		if err != nil {
			return fmt.Errorf("transport: envelope %d of the batch: %w", i, err)
		}
		if !checked {
			if err := checkEnvelope(i, env); err != nil {
				return err
			}
		}
		if envelopeHolds(env) == 0 {
			*env = wire.Envelope{}
			b.n--
		}
		i++
	}
	return nil
}

// readEnvelope reads the encoded envelope v into env, empty, and its message into one given
// back by an earlier call, rather than a new one. It reports whether it has made checkEnvelope's
// checks of env, which passed.
func (b *inBatch) readEnvelope(env *wire.Envelope, v []byte) (checked bool, err error) {
	if body, ok := onlyRequest(v); ok {
		// As every request's envelope is: read without a copy of the names it repeats.
		r, valid, err := b.readRequest(body)
		env.Request = r
		return valid, err
	}
	switch first(v) {
	case 1:
		env.Request = wire.NewInboundRequest()
	case 2:
		env.Reply = wire.NewInboundReply()
	}
	if err := env.UnmarshalVT(v); err != nil {
		return false, err
	}
	if env.Request != nil {
		wire.DropUnknown(env.Request)
	}
	return false, nil
}

// onlyRequest returns the encoded request that the encoded envelope env holds, if env is that
// request's field alone.
func onlyRequest(env []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(env)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, false
	}
	body, m := protowire.ConsumeBytes(env[n:])
	if m < 0 || n+m != len(env) {
		return nil, false
	}
	return body, true
}

// readRequest reads the encoded request body into a request given back by an earlier call,
// and its payload into that request's array, and reports whether its strings are valid UTF-8.
// Its type, method and node names are the stream's copies of names it read before (names),
// which are not checked again; its other strings are copies of their own: nothing of it refers
// to body, which gRPC reuses.
func (b *inBatch) readRequest(body []byte) (r *wire.Request, valid bool, err error) {
	r = wire.NewInboundRequest()
	payload := r.Payload
	// Its strings and payload point into body until they are copied below.
	if err := r.UnmarshalVTUnsafe(body); err != nil {
		*r = wire.Request{}
		return nil, false, err
	}
	wire.DropUnknown(r)
	var typeValid, methodValid, nodeValid bool
	r.Type, typeValid = b.names.of(r.Type)
	r.Method, methodValid = b.names.of(r.Method)
	r.Node, nodeValid = b.names.of(r.Node)
	r.Id, r.Traceparent, r.Tracestate = strings.Clone(r.Id), strings.Clone(r.Traceparent), strings.Clone(r.Tracestate)
	r.Payload = append(wire.PayloadArray(payload, len(r.Payload)), r.Payload...)
	return r, typeValid && methodValid && nodeValid && requestTextValid(r, true), nil
}

// names holds copies of the names that a stream's requests repeat, each its own key: a name
// read again is not copied again. It keeps at most maxNames names of at most maxNameBytes each,
// so that a peer that sends a new name with every request costs the node no more than a copy
// of each.
type names map[string]string

// Bounds of a stream's names: far more than the types, methods and nodes of a mesh.
const (
	maxNames     = 256
	maxNameBytes = 128
)

// of returns a copy of s that refers to no bytes of the caller's, and reports whether s is
// valid UTF-8: the names kept are, so that a name read again is not checked again.
func (n *names) of(s string) (string, bool) {
	if s == "" {
		return "", true
	}
	if kept, ok := (*n)[s]; ok {
		return kept, true
	}
	kept := strings.Clone(s)
	valid := utf8.ValidString(kept)
	if valid && len(kept) <= maxNameBytes && len(*n) < maxNames {
		if *n == nil {
			*n = make(names)
		}
		(*n)[kept] = kept
	}
	return kept, valid
}

// first is the field that the encoded envelope env begins with, if it is a message (1: a
// request, 2: a reply), else 0. An envelope holds one message; should it hold more,
// checkEnvelope refuses it.
func first(env []byte) protowire.Number {
	num, typ, n := protowire.ConsumeTag(env)
	if n < 0 || typ != protowire.BytesType {
		return 0
	}
	return num
}
