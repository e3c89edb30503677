package transport

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// replyBatch is what a link reads from its stream: the replies of one batch, read straight
// from the batch's bytes without an envelope each, into a slice reused from batch to batch. A
// server sends a link nothing but replies; a request or cancel in a batch is passed over.
type replyBatch struct {
	replies []*wire.Reply
}

// keptReplies is the longest slice a replyBatch keeps for the next batch: a burst's larger one
// is left to the collector.
const keptReplies = 256

// reset empties b for the next batch, and lets go of the replies it held.
func (b *replyBatch) reset() {
	clear(b.replies)
	b.replies = b.replies[:0]
	if cap(b.replies) > keptReplies {
		b.replies = nil
	}
}

// decode reads the replies of the encoded batch data, with the checks the codec makes of every
// batch that concern replies: an envelope holds one message, and a reply's strings are UTF-8.
// Unknown fields are skipped, as protobuf skips them.
func (b *replyBatch) decode(data []byte) error {
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
			return fmt.Errorf("transport: a batch: its envelopes have wire type %d", typ)
		}
		env, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return fmt.Errorf("transport: envelope %d of the batch: %w", i, protowire.ParseError(n))
		}
		data = data[n:]
		if err := b.decodeEnvelope(i, env); err != nil {
			return err
		}
		i++
	}
	return nil
}

// decodeEnvelope reads envelope i of a batch, and keeps its reply if it holds one.
func (b *replyBatch) decodeEnvelope(i int, env []byte) error {
	var (
		reply *wire.Reply
		held  [3]bool // request, reply, cancel
	)
	for len(env) > 0 {
		num, typ, n := protowire.ConsumeTag(env)
		if n < 0 {
			return fmt.Errorf("transport: envelope %d of the batch: %w", i, protowire.ParseError(n))
		}
		env = env[n:]
		if num < 1 || num > 3 {
			if n = protowire.ConsumeFieldValue(num, typ, env); n < 0 {
				return fmt.Errorf("transport: envelope %d of the batch: field %d: %w", i, num, protowire.ParseError(n))
			}
			env = env[n:]
			continue
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("transport: envelope %d of the batch: field %d has wire type %d", i, num, typ)
		}
		v, n := protowire.ConsumeBytes(env)
		if n < 0 {
			return fmt.Errorf("transport: envelope %d of the batch: field %d: %w", i, num, protowire.ParseError(n))
		}
		env = env[n:]
		held[num-1] = true
		if num == 2 {
			if reply == nil {
				reply = &wire.Reply{}
			}
			// A message field that comes twice is merged, as protobuf merges it.
			if err := reply.UnmarshalVT(v); err != nil {
				return fmt.Errorf("transport: envelope %d of the batch: its reply: %w", i, err)
			}
		}
	}
	if n := heldCount(held); n > 1 {
		return fmt.Errorf("transport: envelope %d of the batch holds %d messages: an envelope holds one", i, n)
	}
	if reply == nil {
		return nil
	}
	if err := replyUTF8(reply); err != nil {
		return err
	}
	b.replies = append(b.replies, reply)
	return nil
}

// heldCount is how many of an envelope's messages are set.
func heldCount(held [3]bool) int {
	n := 0
	for _, set := range held {
		if set {
			n++
		}
	}
	return n
}
