package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// BenchmarkCall is the transport alone: request/reply between two transports of this process
// over loopback gRPC, with 1 and 64 callers.
//
//	go test -run '^$' -bench . -benchmem ./rt/internal/transport/
func BenchmarkCall(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			srv := start(b, "b", handler{}, nil)
			cli := start(b, "a", handler{}, nil)
			cli.Connect("b", srv.Addr())
			for cli.PeerState("b") != sdk.PeerStateReady {
				time.Sleep(time.Millisecond)
			}
			payload := []byte("a message of some thirty-two bytes")
			b.ReportAllocs()
			b.SetParallelism(callers / 2)
			b.ResetTimer()
			if callers == 1 {
				for range b.N {
					if _, err := cli.Call(ctx, "b", &wire.Request{Payload: payload}); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cli.Call(ctx, "b", &wire.Request{Payload: payload}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
