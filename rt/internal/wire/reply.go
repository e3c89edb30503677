package wire

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/sdk"
)

// MessageReply is the reply to a message that was admitted: the handler's reply out, or the
// error err the message ended with, which is never a refusal. The reply's payload is encoded
// into the array of a reply sent before (NewReply) when it fits.
func MessageReply(out proto.Message, err error) *Reply {
	if err != nil {
		return &Reply{Error: EncodeError(err)}
	}
	if out == nil || !out.ProtoReflect().IsValid() {
		return NewReply()
	}
	r := NewReply()
	// The size taken here is the one the encoding then uses.
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(PayloadArray(r.Payload, proto.Size(out)), out)
	if err != nil {
		return &Reply{Error: EncodeError(fmt.Errorf("%w: cannot encode the reply: %v", sdk.ErrInvalidArgument, err))}
	}
	r.Payload = b
	return r
}
