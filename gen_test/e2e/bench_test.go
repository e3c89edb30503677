package e2e_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/gen_test/e2e/sample"
	"github.com/zlink-go/zlink/sdk"
)

// The typed call's overhead over the untyped runtime call, on one shared host and one active
// Instance Spot. Both go through the host as an sdk.Client and address the Spot with
// create-intent, built per call, as code written against the untyped API would. Run with:
//
//	go test ./gen_test/e2e -run '^$' -bench 'TypedCall|UntypedCall' -benchmem

// benchHost is the host both benchmarks share; TestMain closes it.
var benchHost struct {
	once sync.Once
	n    *node
	err  error
}

func sharedHost(b *testing.B) *node {
	benchHost.once.Do(func() {
		benchHost.n, benchHost.err = startNode()
	})
	if benchHost.err != nil {
		b.Fatal(benchHost.err)
	}
	return benchHost.n
}

func closeSharedHost() {
	if benchHost.n != nil {
		_ = benchHost.n.Close()
	}
}

func BenchmarkTypedCall(b *testing.B) {
	ctx := context.Background()
	var c sdk.Client = sharedHost(b)
	req := &sample.JoinRequest{Name: "bench"}
	if _, err := sample.OpenRoom(c, "bench").Join(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sample.OpenRoom(c, "bench").Join(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUntypedCall(b *testing.B) {
	ctx := context.Background()
	var c sdk.Client = sharedHost(b)
	var req proto.Message = &sample.JoinRequest{Name: "bench"}
	if _, err := c.Call(ctx, sdk.InstanceIntent(sample.RoomTypeName, "bench"), "Join", req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Call(ctx, sdk.InstanceIntent(sample.RoomTypeName, "bench"), "Join", req); err != nil {
			b.Fatal(err)
		}
	}
}

// stubClient answers every call at once with one reply: with it, the two benchmarks below
// measure the generated wrapper's own cost, without the runtime's.
type stubClient struct {
	sdk.Client
	reply proto.Message
}

func (s *stubClient) Call(context.Context, sdk.Target, string, proto.Message, ...sdk.CallOption) (proto.Message, error) {
	return s.reply, nil
}

// stub is held in a variable of interface type so that the compiler cannot see through it:
// both benchmarks pay the same dynamic call, as with a real host.
var stub sdk.Client = &stubClient{reply: &sample.JoinReply{}}

func BenchmarkTypedCallStub(b *testing.B) {
	ctx := context.Background()
	c := stub
	req := &sample.JoinRequest{Name: "bench"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sample.OpenRoom(c, "bench").Join(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUntypedCallStub(b *testing.B) {
	ctx := context.Background()
	c := stub
	var req proto.Message = &sample.JoinRequest{Name: "bench"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Call(ctx, sdk.InstanceIntent(sample.RoomTypeName, "bench"), "Join", req); err != nil {
			b.Fatal(err)
		}
	}
}
