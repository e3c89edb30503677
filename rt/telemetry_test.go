package rt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/sdk"
)

// The diagnostics level is a process global: the tests here set it, restore it, and never run
// in parallel.

const probeType = "tel.Probe"

// probe is an Instance Spot for the telemetry tests. Relay calls Echo of the Spot its request
// names, with its own handler's context; Block waits until the test releases it.
type probe struct {
	sc   sdk.SpotContext
	gate *gate
}

type gate struct{ entered, release chan struct{} }

func newGate() *gate { return &gate{entered: make(chan struct{}, 1), release: make(chan struct{})} }

func probeMethod(name string, invoke func(p *probe, ctx context.Context, in string) (string, error)) sdk.MethodDesc {
	return sdk.MethodDesc{
		Name:       name,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			out, err := invoke(impl.(*probe), ctx, req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		},
	}
}

// probeKey is the key of a value a probe's handler puts in a context it derives.
type probeKey struct{}

var probeDesc = &sdk.SpotDesc{Name: probeType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
	probeMethod("Echo", func(_ *probe, _ context.Context, in string) (string, error) { return in, nil }),
	probeMethod("Fail", func(_ *probe, _ context.Context, _ string) (string, error) {
		return "", &sdk.AppError{Code: "nope", Message: "refused by the handler"}
	}),
	probeMethod("Relay", func(p *probe, ctx context.Context, id string) (string, error) {
		out, err := p.sc.Client().Call(ctx, sdk.InstanceTarget(probeType, id), "Echo", wrapperspb.String("relayed"))
		if err != nil {
			return "", err
		}
		return out.(*wrapperspb.StringValue).GetValue(), nil
	}),
	probeMethod("Self", func(p *probe, ctx context.Context, _ string) (string, error) {
		// With the turn's context, and with one derived from it.
		derived, cancel := context.WithTimeout(context.WithValue(ctx, probeKey{}, "derived"), 10*time.Second)
		defer cancel()
		for _, c := range []context.Context{ctx, derived} {
			_, err := p.sc.Client().Call(c, sdk.InstanceTarget(probeType, p.sc.ID()), "Echo", wrapperspb.String("me"))
			if !errors.Is(err, sdk.ErrInvalidArgument) {
				return "", fmt.Errorf("a request of the Spot to itself answered %v", err)
			}
		}
		return "refused", nil
	}),
	probeMethod("Block", func(p *probe, ctx context.Context, in string) (string, error) {
		p.gate.entered <- struct{}{}
		select {
		case <-p.gate.release:
			return in, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}),
}}

// observed is what a node's telemetry went to: an in-memory span recorder and a manual reader.
type observed struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
}

func newObserved(t *testing.T) *observed {
	o := &observed{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	o.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() {
		_ = o.tp.Shutdown(context.Background())
		_ = o.mp.Shutdown(context.Background())
	})
	return o
}

// etcdForTelemetry starts an embedded etcd for one test.
func etcdForTelemetry(t *testing.T) []string {
	t.Helper()
	srv, err := devetcd.Start(ctx, devetcd.WithoutFsync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Endpoints()
}

// startProbeNode starts a node that hosts tel.Probe and sends its telemetry to o.
func startProbeNode(t *testing.T, endpoints []string, node string, o *observed, g *gate, mutate func(*rt.Config)) *rt.Host {
	t.Helper()
	cfg := rt.DefaultConfig()
	cfg.NodeID = sdk.NodeID(node)
	cfg.EtcdEndpoints = endpoints
	cfg.LeaseTTL = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.StopTimeout = 20 * time.Second
	cfg.TracerProvider, cfg.MeterProvider = o.tp, o.mp
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(probeDesc, func(sc sdk.SpotContext) (any, error) { return &probe{sc: sc, gate: g}, nil })
	}
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// startProbePair starts probe nodes node-a and node-b on one etcd, both recording into o, and
// waits until each has the other as a Ready peer.
func startProbePair(t *testing.T, o *observed) (a, b *rt.Host) {
	t.Helper()
	eps := etcdForTelemetry(t)
	a = startProbeNode(t, eps, "node-a", o, newGate(), nil)
	b = startProbeNode(t, eps, "node-b", o, newGate(), nil)
	require.Eventually(t, func() bool {
		return a.MeshStatus().ReadyPeerCount == 1 && b.MeshStatus().ReadyPeerCount == 1
	}, 15*time.Second, 10*time.Millisecond)
	return a, b
}

func setLevel(t *testing.T, level sdk.DiagnosticsLevel) {
	t.Helper()
	was := sdk.CurrentDiagnosticsLevel()
	t.Cleanup(func() { require.NoError(t, sdk.SetDiagnosticsLevelSync(was)) })
	require.NoError(t, sdk.SetDiagnosticsLevel(ctx, level))
}

func call(c sdk.Client, t sdk.Target, method, in string, opts ...sdk.CallOption) (string, error) {
	out, err := c.Call(ctx, t, method, wrapperspb.String(in), opts...)
	if err != nil {
		return "", err
	}
	return out.(*wrapperspb.StringValue).GetValue(), nil
}

// collect reads every metric the node recorded, by name.
func (o *observed) collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum adds the counter's data points whose attributes include every one of want.
func sum(t *testing.T, data metricdata.Aggregation, want ...attribute.KeyValue) int64 {
	t.Helper()
	if data == nil {
		return 0
	}
	s, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "%T is not an int64 sum", data)
	var n int64
	for _, dp := range s.DataPoints {
		if hasAll(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

var (
	attrType    = attribute.String("zlink.spot.type", probeType)
	attrOK      = attribute.String("zlink.outcome", "ok")
	attrError   = attribute.String("zlink.outcome", "error")
	attrAppErr  = attribute.String("error.type", "application")
	attrMethod  = func(m string) attribute.KeyValue { return attribute.String("zlink.method", m) }
	attrRPC     = attribute.String("rpc.system", "zlink")
	attrRequest = attribute.String("zlink.message.direction", "request")
	attrReply   = attribute.String("zlink.message.direction", "reply")
)

func TestI2_SampleRateOutOfRangeIsRefused(t *testing.T) {
	for _, opts := range []sdk.DiagnosticsOptions{
		{Level: sdk.DiagnosticsLevelNormal, SampleRate: 1.01},
		{Level: sdk.DiagnosticsLevelNormal, SampleRate: -0.5},
		{Level: sdk.DiagnosticsLevelNormal, SampleRate: math.NaN()},
		{Level: sdk.DiagnosticsLevel(4), SampleRate: 1},
	} {
		cfg := rt.DefaultConfig()
		cfg.Diagnostics = &opts
		err := cfg.Validate()
		require.ErrorIs(t, err, sdk.ErrConfig, "%+v", opts)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, "%+v", opts)
		assert.Contains(t, err.Error(), "Diagnostics")
		_, err = rt.Start(ctx, cfg)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, "Start refuses it before it starts anything")
	}
	cfg := rt.DefaultConfig()
	cfg.Diagnostics = &sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelDetailed, SampleRate: 0}
	require.NoError(t, cfg.Validate(), "0 and 1 are in range")
	cfg.Diagnostics.SampleRate = 1
	require.NoError(t, cfg.Validate())
}

func TestI2_ConfigSetsTheProcessLevelAndNilLeavesIt(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelErrors)
	eps := etcdForTelemetry(t)
	o := newObserved(t)
	startProbeNode(t, eps, "node-nil", o, newGate(), nil)
	assert.Equal(t, sdk.DiagnosticsLevelErrors, sdk.CurrentDiagnosticsLevel(), "a nil Diagnostics leaves the level as it is")
	startProbeNode(t, eps, "node-set", o, newGate(), func(cfg *rt.Config) {
		cfg.Diagnostics = &sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelDetailed, SampleRate: 1}
	})
	assert.Equal(t, sdk.DiagnosticsLevelDetailed, sdk.CurrentDiagnosticsLevel(), "a set Diagnostics sets the process's level")
}

func TestI2_OffRecordsNothing(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelOff)
	o := newObserved(t)
	h := startProbeNode(t, etcdForTelemetry(t), "node-a", o, newGate(), nil)
	_, err := call(h, sdk.InstanceIntent(probeType, "p"), "Echo", "hello")
	require.NoError(t, err)
	_, err = call(h, sdk.InstanceTarget(probeType, "p"), "Fail", "x")
	require.Error(t, err)
	_, err = call(h, sdk.InstanceTarget(probeType, "missing"), "Echo", "x")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	require.NoError(t, h.CloseSpot(ctx, sdk.InstanceTarget(probeType, "p")))

	assert.Empty(t, o.spans.Started(), "no span at Off")
	for name, data := range o.collect(t) {
		if strings.HasPrefix(name, "zlink.") {
			assert.Zero(t, countPoints(data), "%s recorded at Off", name)
		}
	}
}

func countPoints(data metricdata.Aggregation) int {
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Histogram[float64]:
		return len(d.DataPoints)
	case metricdata.Histogram[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	}
	return -1
}

func TestI2_ErrorsLevelRecordsOnlyFailedCalls(t *testing.T) {
	o := newObserved(t)
	h := startProbeNode(t, etcdForTelemetry(t), "node-a", o, newGate(), nil)
	_, err := call(h, sdk.InstanceIntent(probeType, "p"), "Echo", "create") // made at Normal
	require.NoError(t, err)
	setLevel(t, sdk.DiagnosticsLevelErrors)
	before := len(o.spans.Ended())
	base := o.collect(t)
	baseOK := sum(t, base[telemetryClientCalls], attrOK)
	for range 3 {
		_, err := call(h, sdk.InstanceTarget(probeType, "p"), "Echo", "ok")
		require.NoError(t, err)
	}
	for range 2 {
		_, err := call(h, sdk.InstanceTarget(probeType, "p"), "Fail", "x")
		var ae *sdk.AppError
		require.ErrorAs(t, err, &ae)
	}

	spans := o.spans.Ended()[before:]
	require.Len(t, spans, 4, "a client and a server span for each of the two failed calls, nothing for the others")
	for _, s := range spans {
		assert.Equal(t, probeType+"/Fail", s.Name())
		assert.Equal(t, codes.Error, s.Status().Code)
		assert.Equal(t, "application", spanAttr(s, "error.type"))
		assert.False(t, s.StartTime().IsZero())
		assert.False(t, s.EndTime().Before(s.StartTime()))
	}
	m := o.collect(t)
	assert.Equal(t, baseOK, sum(t, m[telemetryClientCalls], attrOK), "no successful call counted at Errors")
	assert.Equal(t, int64(2), sum(t, m[telemetryClientCalls], attrError, attrAppErr, attrMethod("Fail")))
	assert.Equal(t, int64(2), sum(t, m[telemetryCalls], attrError, attrAppErr, attrMethod("Fail")))
	assert.Zero(t, sum(t, m[telemetryCalls], attrOK, attrMethod("Echo"))-sum(t, base[telemetryCalls], attrOK, attrMethod("Echo")))
}

const (
	telemetryClientCalls = "zlink.client.calls"
	telemetryCalls       = "zlink.calls"
)

func TestI2_DetailedRecordsMessageSizes(t *testing.T) {
	eps := etcdForTelemetry(t)
	msg := strings.Repeat("z", 100)
	size := int64(proto.Size(wrapperspb.String(msg)))
	sizes := func(o *observed) (req, reply metricdata.HistogramDataPoint[int64], ok bool) {
		data, found := o.collect(t)["zlink.message.size"]
		if !found {
			return req, reply, false
		}
		h := data.(metricdata.Histogram[int64])
		for _, dp := range h.DataPoints {
			if hasAll(dp.Attributes, []attribute.KeyValue{attrRPC, attrType, attrMethod("Echo"), attrRequest}) {
				req, ok = dp, true
			}
			if hasAll(dp.Attributes, []attribute.KeyValue{attrType, attrMethod("Echo"), attrReply}) {
				reply = dp
			}
		}
		return req, reply, ok
	}

	setLevel(t, sdk.DiagnosticsLevelDetailed)
	detailed := newObserved(t)
	h := startProbeNode(t, eps, "node-detailed", detailed, newGate(), nil)
	_, err := call(h, sdk.InstanceIntent(probeType, "d"), "Echo", msg)
	require.NoError(t, err)
	req, reply, ok := sizes(detailed)
	require.True(t, ok, "Detailed records message sizes")
	assert.Equal(t, uint64(1), req.Count)
	assert.Equal(t, size, req.Sum)
	assert.Equal(t, uint64(1), reply.Count)
	assert.Equal(t, size, reply.Sum)

	require.NoError(t, sdk.SetDiagnosticsLevel(ctx, sdk.DiagnosticsLevelNormal))
	normal := newObserved(t)
	h = startProbeNode(t, eps, "node-normal", normal, newGate(), nil)
	_, err = call(h, sdk.InstanceIntent(probeType, "n"), "Echo", msg, sdk.OnNode("node-normal"))
	require.NoError(t, err)
	_, _, ok = sizes(normal)
	assert.False(t, ok, "Normal records no sizes unless asked")

	withSizes := newObserved(t)
	h = startProbeNode(t, eps, "node-sizes", withSizes, newGate(), func(cfg *rt.Config) {
		cfg.Diagnostics = &sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelNormal, SampleRate: 1, IncludeMessageSizes: true}
	})
	_, err = call(h, sdk.InstanceIntent(probeType, "s"), "Echo", msg, sdk.OnNode("node-sizes"))
	require.NoError(t, err)
	req, _, ok = sizes(withSizes)
	require.True(t, ok, "IncludeMessageSizes records sizes at Normal")
	assert.Equal(t, size, req.Sum)
}

func TestI3_LevelChangeAppliesToNextMessage(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelNormal)
	o := newObserved(t)
	g := newGate()
	h := startProbeNode(t, etcdForTelemetry(t), "node-a", o, g, nil)
	target := sdk.InstanceTarget(probeType, "p")
	_, err := call(h, sdk.InstanceIntent(probeType, "p"), "Echo", "create")
	require.NoError(t, err)

	// blocked runs a Block call, changes the level to next while the handler is mid-turn, and
	// lets it finish.
	blocked := func(next sdk.DiagnosticsLevel) {
		done := make(chan error, 1)
		go func() {
			_, err := call(h, target, "Block", "b")
			done <- err
		}()
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler never started")
		}
		require.NoError(t, sdk.SetDiagnosticsLevel(ctx, next), "the change waits for no message")
		close(g.release)
		require.NoError(t, <-done)
		g.release = make(chan struct{})
	}
	countBlock := func() int {
		n := 0
		for _, s := range o.spans.Ended() {
			if s.Name() == probeType+"/Block" {
				n++
			}
		}
		return n
	}

	// Normal -> Off mid-turn: the turn (and its caller) started at Normal are recorded whole.
	blocked(sdk.DiagnosticsLevelOff)
	assert.Equal(t, 2, countBlock(), "the client and server spans of the message that started at Normal")
	m := o.collect(t)
	assert.Equal(t, int64(1), sum(t, m[telemetryClientCalls], attrMethod("Block")))
	assert.Equal(t, int64(1), sum(t, m[telemetryCalls], attrMethod("Block")))
	// The next message follows Off.
	ended := len(o.spans.Ended())
	echoes := sum(t, m[telemetryCalls], attrMethod("Echo"))
	_, err = call(h, target, "Echo", "next")
	require.NoError(t, err)
	assert.Len(t, o.spans.Ended(), ended)
	assert.Equal(t, echoes, sum(t, o.collect(t)[telemetryCalls], attrMethod("Echo")))

	// Off -> Normal mid-turn: nothing is recorded retroactively for the message that started at
	// Off; the next one is recorded.
	blocked(sdk.DiagnosticsLevelNormal)
	assert.Equal(t, 2, countBlock(), "no span for the message that started at Off")
	m = o.collect(t)
	assert.Equal(t, int64(1), sum(t, m[telemetryClientCalls], attrMethod("Block")))
	_, err = call(h, target, "Echo", "next")
	require.NoError(t, err)
	assert.Len(t, o.spans.Ended(), ended+2)
	assert.Equal(t, echoes+1, sum(t, o.collect(t)[telemetryCalls], attrMethod("Echo")))
}

func TestI5_OneTraceAcrossTwoNodes(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelNormal)
	o := newObserved(t) // both nodes record into it; zlink.node tells them apart
	a, _ := startProbePair(t, o)
	// x lives on b, y on a: a calls x.Relay, whose handler calls y.Echo back on a.
	_, err := call(a, sdk.InstanceIntent(probeType, "x"), "Echo", "create", sdk.OnNode("node-b"))
	require.NoError(t, err)
	_, err = call(a, sdk.InstanceIntent(probeType, "y"), "Echo", "create", sdk.OnNode("node-a"))
	require.NoError(t, err)
	before := len(o.spans.Ended())

	out, err := call(a, sdk.InstanceTarget(probeType, "x"), "Relay", "y")
	require.NoError(t, err)
	require.Equal(t, "relayed", out)

	find := func(name string, kind trace.SpanKind, node string) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, s := range o.spans.Ended()[before:] {
			if s.Name() == name && s.SpanKind() == kind && spanAttr(s, "zlink.node") == node {
				return s
			}
		}
		t.Fatalf("no %v span %s on %s", kind, name, node)
		return nil
	}
	client := find(probeType+"/Relay", trace.SpanKindClient, "node-a")
	server := find(probeType+"/Relay", trace.SpanKindServer, "node-b")
	nested := find(probeType+"/Echo", trace.SpanKindClient, "node-b")
	nestedServer := find(probeType+"/Echo", trace.SpanKindServer, "node-a")

	tid := client.SpanContext().TraceID()
	require.True(t, tid.IsValid())
	for _, s := range []sdktrace.ReadOnlySpan{server, nested, nestedServer} {
		assert.Equal(t, tid, s.SpanContext().TraceID(), "%s on %s is in the caller's trace", s.Name(), spanAttr(s, "zlink.node"))
	}
	assert.False(t, client.Parent().IsValid(), "the caller's span is the root")
	assert.Equal(t, client.SpanContext().SpanID(), server.Parent().SpanID(), "the owner's server span is a child of the caller's client span")
	assert.True(t, server.Parent().IsRemote(), "its parent came over the wire")
	assert.Equal(t, server.SpanContext().SpanID(), nested.Parent().SpanID(), "the handler's call is a child of the server span")
	assert.Equal(t, nested.SpanContext().SpanID(), nestedServer.Parent().SpanID())
	assert.Equal(t, "x", spanAttr(server, "zlink.spot.id"))
	assert.Equal(t, "zlink", spanAttr(server, "rpc.system"))
	assert.Equal(t, "Relay", spanAttr(server, "zlink.method"))
	assert.Equal(t, "ok", spanAttr(client, "zlink.outcome"))
}

func TestI5_MetricsCountCalls(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelNormal)
	o := newObserved(t)
	h := startProbeNode(t, etcdForTelemetry(t), "node-a", o, newGate(), nil)
	_, err := call(h, sdk.InstanceIntent(probeType, "p"), "Echo", "create")
	require.NoError(t, err)
	for range 3 {
		_, err := call(h, sdk.InstanceTarget(probeType, "p"), "Echo", "ok")
		require.NoError(t, err)
	}
	for range 2 {
		_, err := call(h, sdk.InstanceTarget(probeType, "p"), "Fail", "x")
		require.Error(t, err)
	}
	_, err = call(h, sdk.InstanceTarget(probeType, "missing"), "Echo", "x")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	_, err = h.Call(ctx, sdk.InstanceTarget(probeType, "p"), "NoSuchMethod", wrapperspb.String("x"))
	require.ErrorIs(t, err, sdk.ErrUnhandled)

	m := o.collect(t)
	assert.Equal(t, int64(1), sum(t, m[telemetryClientCalls], attrMethod("_OTHER"), attribute.String("error.type", "unhandled")),
		"a method the Spot does not have is counted as _OTHER, not as a series of its own")
	assert.Zero(t, sum(t, m[telemetryClientCalls], attrMethod("NoSuchMethod")))
	echo := []attribute.KeyValue{attrRPC, attrType, attrMethod("Echo"), attrOK}
	fail := []attribute.KeyValue{attrRPC, attrType, attrMethod("Fail"), attrError, attrAppErr}
	assert.Equal(t, int64(4), sum(t, m[telemetryClientCalls], echo...))
	assert.Equal(t, int64(2), sum(t, m[telemetryClientCalls], fail...))
	assert.Equal(t, int64(1), sum(t, m[telemetryClientCalls], attrMethod("Echo"), attribute.String("error.type", "not_found")),
		"a call refused before any handler ran counts for its caller")
	assert.Equal(t, int64(4), sum(t, m[telemetryCalls], echo...), "turns on the owner")
	assert.Equal(t, int64(2), sum(t, m[telemetryCalls], fail...))
	assert.Equal(t, int64(1), sum(t, m["zlink.activations"], attrType, attrOK))

	dur, ok := m["zlink.call.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
	var n uint64
	for _, dp := range dur.DataPoints {
		if hasAll(dp.Attributes, echo) {
			n += dp.Count
		}
	}
	assert.Equal(t, uint64(4), n)

	gauge, ok := m["zlink.spots.active"].(metricdata.Gauge[int64])
	require.True(t, ok)
	require.Len(t, gauge.DataPoints, 1)
	assert.Equal(t, int64(1), gauge.DataPoints[0].Value)
	// The capacity gauges: the budget in force, nothing held and no job running between calls.
	for name, want := range map[string]int64{
		"zlink.inbound.budget": int64(h.CapacityStatus().CoreHwm.EffectiveBudgetBytes),
		"zlink.inbound.bytes":  0,
		"zlink.jobs.permits":   0,
	} {
		g, ok := m[name].(metricdata.Gauge[int64])
		require.True(t, ok, name)
		require.Len(t, g.DataPoints, 1, name)
		assert.Equal(t, want, g.DataPoints[0].Value, name)
	}
	assert.Positive(t, h.CapacityStatus().CoreHwm.EffectiveBudgetBytes)

	require.NoError(t, h.CloseSpot(ctx, sdk.InstanceTarget(probeType, "p")))
	// CloseSpot returns once the close is decided; the activation ends right after.
	require.Eventually(t, func() bool {
		return sum(t, o.collect(t)["zlink.closes"], attrType, attribute.String("zlink.close.reason", sdk.CloseExplicit.String())) == 1
	}, 5*time.Second, 10*time.Millisecond)
	m = o.collect(t)
	assert.Equal(t, int64(1), sum(t, m[telemetryClientCalls], attribute.String("zlink.operation", "close"), attrOK))
}

func TestI5_TracedTurnStillRecognisesARequestOfTheSpotToItself(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelNormal)
	o := newObserved(t)
	h := startProbeNode(t, etcdForTelemetry(t), "node-a", o, newGate(), nil)
	_, err := call(h, sdk.InstanceIntent(probeType, "p"), "Echo", "create")
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := h.Call(cctx, sdk.InstanceTarget(probeType, "p"), "Self", wrapperspb.String(""))
	require.NoError(t, err, "the handler's own request is refused at once, not left waiting for its turn")
	assert.Equal(t, "refused", out.(*wrapperspb.StringValue).GetValue())
}

// F8: the turn of a request from another node recognises a request of its Spot to itself, made
// with the turn's context, whether the request came untraced (the turn runs with the
// request's own context) or traced (its context carries the caller's span).
func TestF8_ARemoteRequestsTurnRecognisesARequestOfTheSpotToItself(t *testing.T) {
	a, _ := startProbePair(t, newObserved(t))
	_, err := call(a, sdk.InstanceIntent(probeType, "p"), "Echo", "create", sdk.OnNode("node-b"))
	require.NoError(t, err)
	for _, level := range []sdk.DiagnosticsLevel{sdk.DiagnosticsLevelOff, sdk.DiagnosticsLevelNormal} {
		t.Run(level.String(), func(t *testing.T) {
			setLevel(t, level)
			for range 3 {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				out, err := a.Call(cctx, sdk.InstanceTarget(probeType, "p"), "Self", wrapperspb.String(""))
				cancel()
				require.NoError(t, err, "the handler's own request is refused at once, not left waiting for its turn")
				assert.Equal(t, "refused", out.(*wrapperspb.StringValue).GetValue())
			}
			out, err := call(a, sdk.InstanceTarget(probeType, "p"), "Echo", "after")
			require.NoError(t, err)
			assert.Equal(t, "after", out, "the Spot serves on")
		})
	}
}

func TestI2_SampleRateAppliesToTracesNotMetrics(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelNormal)
	o := newObserved(t)
	h := startProbeNode(t, etcdForTelemetry(t), "node-a", o, newGate(), func(cfg *rt.Config) {
		cfg.Diagnostics = &sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelNormal, SampleRate: 0}
	})
	_, err := call(h, sdk.InstanceIntent(probeType, "y"), "Echo", "create")
	require.NoError(t, err)
	_, err = call(h, sdk.InstanceIntent(probeType, "x"), "Relay", "y")
	require.NoError(t, err)
	assert.Empty(t, o.spans.Started(), "a rate of 0 records no trace, nor the owner's or nested spans of one")
	m := o.collect(t)
	assert.Equal(t, int64(1), sum(t, m[telemetryClientCalls], attrMethod("Relay"), attrOK))
	assert.Equal(t, int64(2), sum(t, m[telemetryCalls], attrMethod("Echo"), attrOK), "metrics are not sampled")
}

// I5: a shutdown is one span, with its outcome; the Spots' closes it makes are its children.
func TestI5_ShutdownIsOneSpanOverItsCloses(t *testing.T) {
	setLevel(t, sdk.DiagnosticsLevelNormal)
	eps := etcdForTelemetry(t)
	o := newObserved(t)
	h := startProbeNode(t, eps, "node-a", o, newGate(), nil)
	_, err := call(h, sdk.InstanceIntent(probeType, "p"), "Echo", "x")
	require.NoError(t, err)
	res, err := h.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, sdk.TerminationOutcomeStopped, res.Outcome)

	var shutdown, closed sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		switch s.Name() {
		case "zlink.shutdown":
			shutdown = s
		case "zlink.close " + probeType:
			closed = s
		}
	}
	require.NotNil(t, shutdown, "a zlink.shutdown span")
	assert.Equal(t, "Stopped", spanAttr(shutdown, "zlink.shutdown.outcome"))
	assert.Equal(t, "None", spanAttr(shutdown, "zlink.shutdown.reason"))
	assert.Equal(t, "node-a", spanAttr(shutdown, "zlink.node"))
	require.NotNil(t, closed, "the Spot's close span")
	assert.Equal(t, shutdown.SpanContext().SpanID(), closed.Parent().SpanID(), "the close is part of the shutdown")
	assert.Equal(t, "Shutdown", spanAttr(closed, "zlink.close.reason"))
}
