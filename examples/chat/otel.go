package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// telemetry is where the nodes' traces and metrics go: the runtime records through the
// OpenTelemetry APIs and exports nothing itself, so the application chooses an exporter.
type telemetry struct {
	tracer trace.TracerProvider
	meter  metric.MeterProvider
	// shutdown flushes what is buffered and stops the exporters.
	shutdown func(context.Context) error
}

// newTelemetry makes the providers the -otel flag names: "" for none (the runtime then uses
// the global providers, which record nothing here), or "stdout" for spans and metrics written
// as JSON to w.
func newTelemetry(kind string, w io.Writer) (*telemetry, error) {
	switch kind {
	case "":
		return &telemetry{shutdown: func(context.Context) error { return nil }}, nil
	case "stdout":
	default:
		return nil, fmt.Errorf("unknown -otel exporter %q: use stdout", kind)
	}
	// The span and metric exporters write from goroutines of their own.
	w = &lockedWriter{w: w}
	spans, err := stdouttrace.New(stdouttrace.WithWriter(w), stdouttrace.WithPrettyPrint())
	if err != nil {
		return nil, err
	}
	metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(w), stdoutmetric.WithPrettyPrint())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(10*time.Second))))
	return &telemetry{tracer: tp, meter: mp, shutdown: func(ctx context.Context) error {
		return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	}}, nil
}

// lockedWriter serialises the writes of the two exporters.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
