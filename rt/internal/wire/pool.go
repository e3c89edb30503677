package wire

import "sync"

// replies holds Replies given back once their last reader is done, so that the replies of a
// busy stream are made again without an allocation each.
var replies = sync.Pool{New: func() any { return new(Reply) }}

// NewReply returns an empty Reply: one given back to RecycleReply, or a new one.
func NewReply() *Reply { return replies.Get().(*Reply) }

// RecycleReply empties r and keeps it for NewReply. Whoever calls it must hold the only
// reference to r that anyone still reads or writes: r may belong to another call at once.
func RecycleReply(r *Reply) {
	r.Reset()
	replies.Put(r)
}
