package transport_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// FuzzHandleBatch sends arbitrary bytes, as one message of a mesh stream, to a real transport:
// nothing panics, whatever decodes is handled or refused, the stream ends when the sender
// closes it, and the transport's memory stays bounded.
func FuzzHandleBatch(f *testing.F) {
	for _, b := range []*wire.Batch{
		rttest.Batch(&wire.Request{CallId: 1, Op: wire.Op_OP_CALL, Kind: 3, Type: "t", Id: "x", Method: "M", Payload: []byte("x")}),
		rttest.Batch(&wire.Request{CallId: 1}, &wire.Request{CallId: 1}), // a duplicate call ID
		rttest.Batch(&wire.Request{CallId: 2, TimeoutNanos: -1, DeadlineUnixNanos: 1}),
		{Envelopes: []*wire.Envelope{{Cancel: &wire.Cancel{CallId: 9}}}},
		{Envelopes: []*wire.Envelope{{Reply: &wire.Reply{CallId: 3}}}},
		{Envelopes: []*wire.Envelope{{}}},
	} {
		data, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	var handled atomic.Int64
	tr := start(f, "b", handler{fn: func(_ context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		handled.Add(1)
		reply(&wire.Reply{Payload: req.Payload})
	}}, nil)
	peer := rttest.DialRawPeer(f, tr.Addr())
	var heapAtStart uint64
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := peer.Stream(ctx, "fuzzer")
		if err != nil {
			t.Fatalf("the node refused a stream: %v", err)
		}
		_ = s.SendMsg(data)
		_ = s.CloseSend()
		for {
			var b wire.Batch
			if err := s.RecvMsg(&b); err != nil {
				break // the node ended the stream: the sender half-closed, or sent garbage
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the node did not end the stream after its peer closed it")
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if heapAtStart == 0 {
			heapAtStart = ms.HeapAlloc
		} else if ms.HeapAlloc > heapAtStart+256<<20 {
			t.Fatalf("heap grew from %d to %d bytes", heapAtStart, ms.HeapAlloc)
		}
	})
}
