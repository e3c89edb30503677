package telemetry_test

import (
	"context"
	"testing"

	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/sdk"
)

// BenchmarkNoopProviders measures what one call's telemetry costs at Normal with the global
// providers before an application installs any: the caller's side and the owner's turn.
func BenchmarkNoopProviders(b *testing.B) {
	tel, err := telemetry.New(telemetry.Config{Node: "n", SampleRate: 1})
	if err != nil {
		b.Fatal(err)
	}
	target := sdk.InstanceTarget("bench.Sink", "hot")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cctx, c := tel.StartClient(ctx, sdk.DiagnosticsLevelNormal, telemetry.OpCall, target, "Echo")
		tctx, s := tel.StartTurn(cctx, sdk.DiagnosticsLevelNormal, sdk.KindInstance, "bench.Sink", "hot", "Echo", false)
		_ = tctx
		s.EndTurn(nil, nil, nil)
		c.End(nil)
	}
}
