package wire

import "sync"

// requests and replies hold messages given back once their last reader is done, so that a
// busy stream reads its messages without an allocation each.
var (
	requests = sync.Pool{New: func() any { return new(Request) }}
	replies  = sync.Pool{New: func() any { return new(Reply) }}
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

// NewReply returns an empty Reply: one given back to RecycleReply, or a new one.
func NewReply() *Reply { return replies.Get().(*Reply) }

// RecycleReply empties r and keeps it for NewReply. Whoever calls it must hold the only
// reference to r that anyone still reads or writes: r may belong to another call at once.
func RecycleReply(r *Reply) {
	*r = Reply{} // zeroed, as in RecycleRequest
	replies.Put(r)
}
