package wire

import "sync"

// requests and replies hold messages given back once their last reader is done, so that a
// busy stream reads its messages without an allocation each. inboundRequests and
// inboundReplies hold the messages read from streams apart, with their payloads' arrays;
// replies keeps the arrays of the replies sent. A request built to be sent takes its payload
// from its caller, which may send it again elsewhere, so requests keeps none.
var (
	requests        = sync.Pool{New: func() any { return new(Request) }}
	replies         = sync.Pool{New: func() any { return new(Reply) }}
	inboundRequests = sync.Pool{New: func() any { return new(Request) }}
	inboundReplies  = sync.Pool{New: func() any { return new(Reply) }}
)

// NewRequest returns an empty Request: one given back to RecycleRequest, or a new one.
func NewRequest() *Request { return requests.Get().(*Request) }

// RecycleRequest empties r and keeps it for NewRequest. Whoever calls it must hold the only
// reference to r that anyone still reads or writes: r may belong to another call at once.
func RecycleRequest(r *Request) {
	// Zeroed rather than Reset, which also stores the message's type information with an
	// atomic write that every recycled message would pay for: the stream encodes and decodes
	// it without reflection, and reflection finds the type information again when it needs it.
	*r = Request{}
	requests.Put(r)
}

// NewInboundRequest returns an empty Request to read a request from a stream into: one given
// back to RecycleInboundRequest, whose payload's array the request's payload is read into.
func NewInboundRequest() *Request { return inboundRequests.Get().(*Request) }

// RecycleInboundRequest empties r, which NewInboundRequest returned and a stream's request was
// read into, and keeps it for NewInboundRequest with its payload's array, when that is at most
// keptPayloadBytes. Whoever calls it must hold the only reference to r and to its payload that
// anyone still reads or writes.
func RecycleInboundRequest(r *Request) {
	p := r.Payload
	*r = Request{} // zeroed, as in RecycleRequest
	r.Payload = kept(p)
	inboundRequests.Put(r)
}

// emptied empties r but for its payload's array, if it keeps it (kept), and returns it.
func emptied(r *Reply) *Reply {
	p := r.Payload
	*r = Reply{} // zeroed, as in RecycleRequest
	r.Payload = kept(p)
	return r
}

// NewReply returns an empty Reply: one given back to RecycleReply, or a new one. Its Payload,
// empty, may hold the array of the payload of the reply given back, for the reply's payload to
// be encoded into (proto.MarshalOptions.MarshalAppend).
func NewReply() *Reply { return replies.Get().(*Reply) }

// RecycleReply empties r and keeps it for NewReply, with its payload's array when that is at
// most keptPayloadBytes. Whoever calls it must hold the only reference to r and to its payload
// that anyone still reads or writes: r may belong to another call at once.
func RecycleReply(r *Reply) { replies.Put(emptied(r)) }

// NewInboundReply is NewInboundRequest for a reply.
func NewInboundReply() *Reply { return inboundReplies.Get().(*Reply) }

// RecycleInboundReply is RecycleInboundRequest for a reply that NewInboundReply returned.
func RecycleInboundReply(r *Reply) { inboundReplies.Put(emptied(r)) }

// PayloadArray returns an empty slice to encode or read a payload of n bytes into: of kept, the
// array a recycled message kept, when it holds n bytes and at most twice as many, else of a new
// array of n bytes. A payload so holds at most twice the bytes that its message is charged and
// queued for, whatever arrays the pool holds.
func PayloadArray(kept []byte, n int) []byte {
	if c := cap(kept); c >= n && c <= 2*n {
		return kept[:0]
	}
	return make([]byte, 0, n)
}

// keptPayloadBytes is the largest payload array that a recycled message keeps: the arrays of
// a burst of large messages go to the collector.
const keptPayloadBytes = 1 << 10

// kept is what a recycled message keeps of its payload p: an empty slice of its array, or nil.
func kept(p []byte) []byte {
	if cap(p) > keptPayloadBytes {
		return nil
	}
	return p[:0]
}

// DropUnknown lets go of the fields of r that this version does not know, which a newer peer
// may send: a node holds nothing of a peer's request that it does not charge to its budget.
func DropUnknown(r *Request) { r.unknownFields = nil }
