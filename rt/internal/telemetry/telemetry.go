// Package telemetry is the runtime's OpenTelemetry instrumentation (DESIGN §6 "Telemetry"; I2,
// I3, I5): the tracer, the meter and its instruments, the level and sampling decisions, and the
// W3C trace context that crosses the wire in a request.
//
// Every message's telemetry is decided once, when its processing starts, from the process's
// diagnostics level in force then (I3): a caller's operation in StartClient, a turn on the owner
// in StartTurn. The level Off is checked by the callers themselves, before any call here, so
// that Off costs one atomic load. Payloads are never recorded, only their sizes.
package telemetry

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// ScopeName is the instrumentation scope of the runtime's tracer and meter.
const ScopeName = "github.com/zlink-go/zlink/rt"

// Metric names (DESIGN §6).
const (
	MetricClientCalls    = "zlink.client.calls"
	MetricClientDuration = "zlink.client.call.duration"
	MetricCalls          = "zlink.calls"
	MetricCallDuration   = "zlink.call.duration"
	MetricMessageSize    = "zlink.message.size"
	MetricActivations    = "zlink.activations"
	MetricCloses         = "zlink.closes"
	MetricActiveSpots    = "zlink.spots.active"
	MetricInboundBytes   = "zlink.inbound.bytes"
	MetricInboundBudget  = "zlink.inbound.budget"
	MetricJobPermits     = "zlink.jobs.permits"
)

// Attribute keys, in the OpenTelemetry semantic conventions' style.
const (
	KeyRPCSystem   = attribute.Key("rpc.system")
	KeySpotType    = attribute.Key("zlink.spot.type")
	KeySpotKind    = attribute.Key("zlink.spot.kind")
	KeySpotID      = attribute.Key("zlink.spot.id")
	KeyMethod      = attribute.Key("zlink.method")
	KeyOperation   = attribute.Key("zlink.operation")
	KeyOutcome     = attribute.Key("zlink.outcome")
	KeyErrorType   = attribute.Key("error.type")
	KeyCloseReason = attribute.Key("zlink.close.reason")
	KeyDirection   = attribute.Key("zlink.message.direction")
	KeyNode        = attribute.Key("zlink.node")
	// KeyShutdownOutcome and KeyShutdownReason are a shutdown's result (Stopped, ForceStopped;
	// None, DeadlineExceeded, TeardownFailed).
	KeyShutdownOutcome = attribute.Key("zlink.shutdown.outcome")
	KeyShutdownReason  = attribute.Key("zlink.shutdown.reason")
)

var rpcSystem = KeyRPCSystem.String("zlink")

// Op is what one recorded operation is: the zlink.operation attribute.
type Op uint8

// The operations: a request/reply call, a one-way message, an explicit creation, a close (a
// caller's CloseSpot, or the end of an activation on the owner) and an activation.
const (
	OpCall Op = iota
	OpSend
	OpCreate
	OpClose
	OpActivate
)

var opNames = [...]string{"call", "send", "create", "close", "activate"}

// String returns the operation's attribute value.
func (o Op) String() string { return opNames[o] }

// Config configures a node's telemetry.
type Config struct {
	// Node is the node's ID, set on its spans.
	Node sdk.NodeID
	// TracerProvider makes the spans; nil follows the global provider, also when the application
	// installs one after the node started.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments; nil: the global provider (which forwards to a
	// provider the application installs later).
	MeterProvider metric.MeterProvider
	// SampleRate is the fraction of traces started here that are recorded, in [0, 1]. A trace
	// that arrives from a caller keeps the caller's decision.
	SampleRate float64
	// MessageSizes records the size distribution of requests and replies at the Normal level too
	// (Detailed always does).
	MessageSizes bool
}

// Telemetry is a node's instrumentation. A nil *Telemetry records nothing.
type Telemetry struct {
	node      attribute.KeyValue
	fixed     trace.TracerProvider // nil: follow the global provider
	tracer    atomic.Pointer[tracerState]
	sampleAll bool
	sampleMax uint64 // a root trace is recorded when a random uint64 is below it
	sizes     bool

	clientCalls    metric.Int64Counter
	clientDuration metric.Float64Histogram
	calls          metric.Int64Counter
	callDuration   metric.Float64Histogram
	messageSize    metric.Int64Histogram
	activations    metric.Int64Counter
	closes         metric.Int64Counter
	meter          metric.Meter

	attrs     sync.Map // attrKey -> metric.MeasurementOption
	attrCount atomic.Int32
}

// tracerState is the tracer of one provider, and whether that provider records anything.
type tracerState struct {
	provider   trace.TracerProvider
	typ        reflect.Type
	comparable bool
	tracer     trace.Tracer
	live       bool
}

// New makes a node's instruments from cfg's providers.
func New(cfg Config) (*Telemetry, error) {
	t := &Telemetry{
		node:      KeyNode.String(string(cfg.Node)),
		fixed:     cfg.TracerProvider,
		sampleAll: cfg.SampleRate >= 1,
		sizes:     cfg.MessageSizes,
	}
	if !t.sampleAll && cfg.SampleRate > 0 {
		t.sampleMax = uint64(cfg.SampleRate * math.MaxUint64)
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t.meter = m
	var errs [7]error
	t.clientCalls, errs[0] = m.Int64Counter(MetricClientCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Operations this node's callers made of Spots: calls, one-way messages, creations and closes."))
	t.clientDuration, errs[1] = m.Float64Histogram(MetricClientDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a caller's operation to its answer, routing and queueing included."))
	t.calls, errs[2] = m.Int64Counter(MetricCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Messages whose handler ran on this node."))
	t.callDuration, errs[3] = m.Float64Histogram(MetricCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a handler's turn took on this node."))
	t.messageSize, errs[4] = m.Int64Histogram(MetricMessageSize, metric.WithUnit("By"),
		metric.WithDescription("Encoded size of the requests and replies of the turns run on this node (sizes only, never content)."))
	t.activations, errs[5] = m.Int64Counter(MetricActivations, metric.WithUnit("{activation}"),
		metric.WithDescription("Spot activations run on this node: factory and OnActivate."))
	t.closes, errs[6] = m.Int64Counter(MetricCloses, metric.WithUnit("{close}"),
		metric.WithDescription("Spots closed on this node, by reason (IdleEvicted counts evictions)."))
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// ObserveActiveSpots reports active() as the gauge of active Spots whenever the meter collects,
// until the returned function is called.
func (t *Telemetry) ObserveActiveSpots(active func() int64) (stop func()) {
	if t == nil {
		return func() {}
	}
	g, err := t.meter.Int64ObservableGauge(MetricActiveSpots, metric.WithUnit("{spot}"),
		metric.WithDescription("User and Instance Spots active on this node."))
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	attrs := metric.WithAttributes(rpcSystem, t.node)
	reg, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		// I2: the gauge follows the level in force when it is collected.
		if sdk.CurrentDiagnosticsLevel() >= sdk.DiagnosticsLevelNormal {
			o.ObserveInt64(g, active(), attrs)
		}
		return nil
	}, g)
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// CapacityFigures are the capacity gauges' values at one collection.
type CapacityFigures struct {
	// InboundBytes is what the Core HWM holds, InboundBudget its budget, JobPermits the
	// application job queue's permits in use.
	InboundBytes, InboundBudget, JobPermits int64
}

// ObserveCapacity reports read()'s figures as the capacity gauges whenever the meter collects,
// until the returned function is called.
func (t *Telemetry) ObserveCapacity(read func() CapacityFigures) (stop func()) {
	if t == nil {
		return func() {}
	}
	held, err1 := t.meter.Int64ObservableGauge(MetricInboundBytes, metric.WithUnit("By"),
		metric.WithDescription("Bytes of peers' requests and of the replies to them that the node holds (the Core HWM)."))
	budget, err2 := t.meter.Int64ObservableGauge(MetricInboundBudget, metric.WithUnit("By"),
		metric.WithDescription("The Core HWM budget in force."))
	permits, err3 := t.meter.Int64ObservableGauge(MetricJobPermits, metric.WithUnit("{job}"),
		metric.WithDescription("Application jobs queued or running in the node's Spots: the job queue's permits in use."))
	if err := errors.Join(err1, err2, err3); err != nil {
		otel.Handle(err)
		return func() {}
	}
	attrs := metric.WithAttributes(rpcSystem, t.node)
	reg, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if sdk.CurrentDiagnosticsLevel() >= sdk.DiagnosticsLevelNormal {
			f := read()
			o.ObserveInt64(held, f.InboundBytes, attrs)
			o.ObserveInt64(budget, f.InboundBudget, attrs)
			o.ObserveInt64(permits, f.JobPermits, attrs)
		}
		return nil
	}, held, budget, permits)
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// currentTracer returns the tracer of the provider in force and whether it records anything:
// with the global provider before the application installs one, or a no-op provider, no span
// is started at all, which keeps the default level free of allocations.
func (t *Telemetry) currentTracer() *tracerState {
	tp := t.fixed
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	st := t.tracer.Load()
	// A comparable provider is compared directly (an interface comparison cannot panic when one
	// side's type is comparable); another is known by its type.
	if st != nil && st.comparable && st.provider == tp {
		return st
	}
	typ := reflect.TypeOf(tp)
	if st != nil && !st.comparable && st.typ == typ {
		return st
	}
	st = &tracerState{provider: tp, typ: typ, comparable: typ.Comparable(), tracer: tp.Tracer(ScopeName), live: !recordsNothing(tp)}
	t.tracer.Store(st)
	return st
}

// recordsNothing recognises the providers that make no spans: the API's no-op ones and the
// global provider while the application has installed none.
func recordsNothing(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return true
	}
	name := reflect.TypeOf(tp).String()
	return name == "*global.tracerProvider" || name == "trace.noopTracerProvider"
}

// sampled decides whether a trace started or continued with ctx is recorded: a caller's
// decision is kept, so a trace is recorded whole or not at all.
func (t *Telemetry) sampled(ctx context.Context) (parent trace.SpanContext, ok bool) {
	parent = trace.SpanContextFromContext(ctx)
	if parent.IsValid() {
		return parent, parent.IsSampled()
	}
	return parent, t.sampleAll || (t.sampleMax > 0 && rand.Uint64() < t.sampleMax)
}

// unsampled marks ctx as the root of a trace that is not recorded, so that the owner and the
// nested calls follow the decision instead of sampling on their own.
func unsampled(ctx context.Context) context.Context {
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range 2 {
		v := rand.Uint64()
		for j := range 8 {
			tid[i*8+j] = byte(v >> (8 * j))
		}
	}
	v := rand.Uint64() | 1
	for j := range 8 {
		sid[j] = byte(v >> (8 * j))
	}
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
}

// Span is one recorded operation: a caller's operation, a turn, an activation or a close. A nil
// *Span records nothing: the Start functions return nil when nothing would be recorded, so that
// the default (Normal, with providers that record nothing) costs a few loads and no allocation.
// End it once.
type Span struct {
	t       *Telemetry
	level   sdk.DiagnosticsLevel
	op      Op
	server  bool
	typ     string
	method  string
	span    trace.Span      // the live span, or nil
	parent  context.Context // for a span made at the end (Errors): where it hangs
	tracer  trace.Tracer    // set when a span may be made at the end
	kind    trace.SpanKind
	start   time.Time
	metrics bool
	sizes   bool
	reason  string
	spotID  string
	spotKnd sdk.SpotKind
}

// StartClient begins the caller's side of op on target (method for a call or a one-way
// message) at level, which the caller read once at the operation's start and is not Off. The
// returned context carries the client span, if any, to be sent with the request.
func (t *Telemetry) StartClient(ctx context.Context, level sdk.DiagnosticsLevel, op Op, target sdk.Target, method string) (context.Context, *Span) {
	if t == nil || level == sdk.DiagnosticsLevelOff {
		return ctx, nil
	}
	st := t.currentTracer()
	metrics := t.clientCalls.Enabled(ctx) || t.clientDuration.Enabled(ctx)
	if !st.live && !metrics {
		return ctx, nil
	}
	s := &Span{t: t, level: level, op: op, typ: target.Type(), method: method, kind: trace.SpanKindClient,
		spotID: target.ID(), spotKnd: target.Kind()}
	return t.begin(ctx, st, s, metrics)
}

// StartTurn begins a turn on the owner: the handler of method of the Spot typ/id runs with the
// returned context, whose server span is the parent of the calls the handler makes.
func (t *Telemetry) StartTurn(ctx context.Context, level sdk.DiagnosticsLevel, kind sdk.SpotKind, typ, id, method string, oneWay bool) (context.Context, *Span) {
	if t == nil || level == sdk.DiagnosticsLevelOff {
		return ctx, nil
	}
	st := t.currentTracer()
	metrics := t.calls.Enabled(ctx) || t.callDuration.Enabled(ctx)
	sizes := (level >= sdk.DiagnosticsLevelDetailed || (t.sizes && level >= sdk.DiagnosticsLevelNormal)) && t.messageSize.Enabled(ctx)
	if !st.live && !metrics && !sizes {
		return ctx, nil
	}
	op := OpCall
	if oneWay {
		op = OpSend
	}
	s := &Span{t: t, level: level, op: op, server: true, typ: typ, method: method, kind: trace.SpanKindServer,
		spotID: id, spotKnd: kind, sizes: sizes}
	return t.begin(ctx, st, s, metrics)
}

// StartActivation begins the activation of the Spot typ/id on this node: its factory and
// OnActivate run with the returned context.
func (t *Telemetry) StartActivation(ctx context.Context, level sdk.DiagnosticsLevel, kind sdk.SpotKind, typ, id string) (context.Context, *Span) {
	if t == nil || level == sdk.DiagnosticsLevelOff {
		return ctx, nil
	}
	s := &Span{t: t, level: level, op: OpActivate, server: true, typ: typ, kind: trace.SpanKindInternal,
		spotID: id, spotKnd: kind}
	return t.begin(ctx, t.currentTracer(), s, t.activations.Enabled(ctx))
}

// StartClose begins the end of the Spot typ/id's activation for reason: its closing callback
// runs with the returned context. A close is not a failure, so the Errors level records none.
func (t *Telemetry) StartClose(ctx context.Context, level sdk.DiagnosticsLevel, kind sdk.SpotKind, typ, id string, reason sdk.CloseReason) (context.Context, *Span) {
	if t == nil || level < sdk.DiagnosticsLevelNormal {
		return ctx, nil
	}
	s := &Span{t: t, level: level, op: OpClose, server: true, typ: typ, kind: trace.SpanKindInternal,
		spotID: id, spotKnd: kind, reason: reason.String()}
	return t.begin(ctx, t.currentTracer(), s, t.closes.Enabled(ctx))
}

// WithTraceOf returns ctx carrying the span of from, when from has one: work that runs on its
// own context (a close transaction) is recorded under the operation that asked for it.
func WithTraceOf(ctx, from context.Context) context.Context {
	if from == nil {
		return ctx
	}
	if sc := trace.SpanContextFromContext(from); sc.IsValid() {
		return trace.ContextWithSpanContext(ctx, sc)
	}
	return ctx
}

// StartShutdown begins the node's shutdown span, "zlink.shutdown", at level Normal and above:
// the closes it makes run under it. The returned end records the shutdown's outcome and reason.
func (t *Telemetry) StartShutdown(ctx context.Context, level sdk.DiagnosticsLevel) (context.Context, func(outcome, reason string)) {
	if t == nil || level < sdk.DiagnosticsLevelNormal {
		return ctx, func(string, string) {}
	}
	st := t.currentTracer()
	if !st.live {
		return ctx, func(string, string) {}
	}
	ctx, sp := st.tracer.Start(ctx, "zlink.shutdown", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(rpcSystem, t.node))
	return ctx, func(outcome, reason string) {
		sp.SetAttributes(KeyShutdownOutcome.String(outcome), KeyShutdownReason.String(reason))
		if reason != "None" {
			sp.SetStatus(codes.Error, reason)
		}
		sp.End()
	}
}

func (t *Telemetry) begin(ctx context.Context, st *tracerState, s *Span, metrics bool) (context.Context, *Span) {
	s.metrics = metrics
	switch {
	case !st.live:
	case s.level >= sdk.DiagnosticsLevelNormal:
		if parent, ok := t.sampled(ctx); !ok {
			if !parent.IsValid() {
				ctx = unsampled(ctx)
			}
			break
		}
		ctx, s.span = st.tracer.Start(ctx, s.name(), trace.WithSpanKind(s.kind), trace.WithAttributes(s.spanAttrs()...))
	default: // Errors: a span is made at the end, for a failure only, with the start time
		if _, ok := t.sampled(ctx); ok {
			s.parent, s.tracer = ctx, st.tracer
		}
	}
	if s.metrics || s.tracer != nil {
		s.start = time.Now()
	}
	return ctx, s
}

// name is the span's name, built only when a span is made: "<type>/<method>" for a call or a
// one-way message on either side, "zlink.create <type>" and "zlink.close_spot <type>" for a
// caller's Create and CloseSpot, "zlink.activate <type>" and "zlink.close <type>" on the owner.
func (s *Span) name() string {
	switch {
	case s.op == OpCreate:
		return "zlink.create " + s.typ
	case s.op == OpClose && !s.server:
		return "zlink.close_spot " + s.typ
	case s.op == OpClose:
		return "zlink.close " + s.typ
	case s.op == OpActivate:
		return "zlink.activate " + s.typ
	}
	return s.typ + "/" + s.method
}

func (s *Span) spanAttrs() []attribute.KeyValue {
	a := []attribute.KeyValue{rpcSystem, KeySpotType.String(s.typ), KeySpotKind.String(s.spotKnd.String()),
		KeyOperation.String(s.op.String()), s.t.node}
	if s.method != "" {
		a = append(a, KeyMethod.String(s.method))
	}
	if s.spotID != "" {
		a = append(a, KeySpotID.String(s.spotID))
	}
	if s.reason != "" {
		a = append(a, KeyCloseReason.String(s.reason))
	}
	return a
}

// End ends the operation with its outcome.
func (s *Span) End(err error) { s.EndTurn(err, nil, nil) }

// EndTurn ends a turn with its outcome and, when sizes are recorded, its request and reply.
func (s *Span) EndTurn(err error, req, reply proto.Message) {
	if s == nil {
		return
	}
	t := s.t
	failed := err != nil
	if s.level == sdk.DiagnosticsLevelErrors && !failed {
		return
	}
	var end time.Time
	if !s.start.IsZero() {
		end = time.Now()
	}
	code := wire.CodeOf(err)
	switch {
	case s.span != nil:
		if failed {
			s.span.SetStatus(codes.Error, errorType(code))
			s.span.SetAttributes(KeyOutcome.String("error"), KeyErrorType.String(errorType(code)))
		} else {
			s.span.SetAttributes(KeyOutcome.String("ok"))
		}
		s.span.End()
	case s.tracer != nil && failed:
		_, sp := s.tracer.Start(s.parent, s.name(), trace.WithSpanKind(s.kind), trace.WithTimestamp(s.start),
			trace.WithAttributes(s.spanAttrs()...))
		sp.SetStatus(codes.Error, errorType(code))
		sp.SetAttributes(KeyOutcome.String("error"), KeyErrorType.String(errorType(code)))
		sp.End(trace.WithTimestamp(end))
	}
	ctx := context.Background()
	if s.metrics {
		attrs := t.metricAttrs(s.op, s.typ, s.method, s.reason, code)
		switch {
		case !s.server:
			t.clientCalls.Add(ctx, 1, attrs)
			t.clientDuration.Record(ctx, end.Sub(s.start).Seconds(), attrs)
		case s.op == OpActivate:
			t.activations.Add(ctx, 1, attrs)
		case s.op == OpClose:
			t.closes.Add(ctx, 1, attrs)
		default:
			t.calls.Add(ctx, 1, attrs)
			t.callDuration.Record(ctx, end.Sub(s.start).Seconds(), attrs)
		}
	}
	if s.sizes {
		if req != nil {
			t.messageSize.Record(ctx, int64(proto.Size(req)), t.sizeAttrs(s.typ, s.method, "request"))
		}
		if reply != nil && reply.ProtoReflect().IsValid() {
			t.messageSize.Record(ctx, int64(proto.Size(reply)), t.sizeAttrs(s.typ, s.method, "reply"))
		}
	}
}

// errorType is the class of an error, for the error.type attribute: the wire code's name.
func errorType(c wire.Code) string {
	return strings.ToLower(strings.TrimPrefix(c.String(), "CODE_"))
}

type attrKey struct {
	op                  Op
	typ, method, reason string
	code                wire.Code
	direction           string
}

// maxAttrSets bounds the cache of attribute sets: method names come from callers, so an
// unbounded cache would grow with every misspelt one.
const maxAttrSets = 4096

func (t *Telemetry) cached(k attrKey, build func() []attribute.KeyValue) metric.MeasurementOption {
	if v, ok := t.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(build()...))
	if t.attrCount.Load() < maxAttrSets {
		if _, loaded := t.attrs.LoadOrStore(k, opt); !loaded {
			t.attrCount.Add(1)
		}
	}
	return opt
}

// otherMethod stands for a method the receiver does not know, as the semantic conventions'
// _OTHER does: callers choose method names, and each misspelt one would be a new series.
const otherMethod = "_OTHER"

func (t *Telemetry) metricAttrs(op Op, typ, method, reason string, code wire.Code) metric.MeasurementOption {
	if code == wire.Code_CODE_UNHANDLED && method != "" {
		method = otherMethod
	}
	return t.cached(attrKey{op: op, typ: typ, method: method, reason: reason, code: code}, func() []attribute.KeyValue {
		a := []attribute.KeyValue{rpcSystem, KeySpotType.String(typ), KeyOperation.String(op.String())}
		if method != "" {
			a = append(a, KeyMethod.String(method))
		}
		if reason != "" {
			a = append(a, KeyCloseReason.String(reason))
		}
		if code == wire.Code_CODE_UNSPECIFIED {
			a = append(a, KeyOutcome.String("ok"))
		} else {
			a = append(a, KeyOutcome.String("error"), KeyErrorType.String(errorType(code)))
		}
		return a
	})
}

func (t *Telemetry) sizeAttrs(typ, method, direction string) metric.MeasurementOption {
	return t.cached(attrKey{typ: typ, method: method, direction: direction}, func() []attribute.KeyValue {
		return []attribute.KeyValue{rpcSystem, KeySpotType.String(typ), KeyMethod.String(method), KeyDirection.String(direction)}
	})
}

// traceContext is the W3C trace context propagator: the wire carries its two headers.
var traceContext propagation.TraceContext

// requestCarrier carries the trace context in a request's two fields.
type requestCarrier struct{ r *wire.Request }

func (c requestCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.r.Traceparent
	case "tracestate":
		return c.r.Tracestate
	}
	return ""
}

func (c requestCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.r.Traceparent = value
	case "tracestate":
		c.r.Tracestate = value
	}
}

func (c requestCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// Inject puts ctx's span context, if any, into req, so that the receiver's work joins the trace.
func Inject(ctx context.Context, req *wire.Request) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	traceContext.Inject(ctx, requestCarrier{req})
}

// Extract returns ctx with the caller's span context from req, when req carries one.
func Extract(ctx context.Context, req *wire.Request) context.Context {
	if req.Traceparent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, requestCarrier{req})
}
