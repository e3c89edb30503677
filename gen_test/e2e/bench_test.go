package e2e_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/gen_test/e2e/sample"
	"github.com/zlink-go/zlink/sdk"
)

// The typed call's overhead over the untyped runtime call, on one host and one active Instance
// Spot. Run with:
//
//	go test ./gen_test/e2e -run '^$' -bench 'TypedCall|UntypedCall' -benchmem

func BenchmarkTypedCall(b *testing.B) {
	ctx := context.Background()
	h := start(b)
	ref := sample.OpenRoom(h, "bench")
	req := &sample.JoinRequest{Name: "bench"}
	_, err := ref.Join(ctx, req)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ref.Join(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUntypedCall(b *testing.B) {
	ctx := context.Background()
	h := start(b)
	target := sdk.InstanceIntent(sample.RoomTypeName, "bench")
	var req proto.Message = &sample.JoinRequest{Name: "bench"}
	_, err := h.Call(ctx, target, "Join", req)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Call(ctx, target, "Join", req); err != nil {
			b.Fatal(err)
		}
	}
}
