package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
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
	// metrics serves the metrics in Prometheus's text format (-metrics), on the nodes' admin
	// servers at /metrics; nil without -metrics.
	metrics http.Handler
	// shutdown flushes what is buffered and stops the exporters.
	shutdown func(context.Context) error
}

// newTelemetry makes the providers the -otel flag names: "" for none (the runtime then uses
// the global providers, which record nothing here), or "stdout" for spans and metrics written
// as JSON to w. With prometheus, the metrics are also served for Prometheus to scrape
// (OpenTelemetry's Prometheus exporter, on a registry of the application's own).
func newTelemetry(kind string, prometheus bool, w io.Writer) (*telemetry, error) {
	switch kind {
	case "":
		if !prometheus {
			return &telemetry{shutdown: func(context.Context) error { return nil }}, nil
		}
		reader, handler, err := prometheusReader()
		if err != nil {
			return nil, err
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		return &telemetry{meter: mp, metrics: handler, shutdown: mp.Shutdown}, nil
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
	readers := []sdkmetric.Option{sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(10*time.Second)))}
	var handler http.Handler
	if prometheus {
		reader, h, err := prometheusReader()
		if err != nil {
			return nil, err
		}
		readers, handler = append(readers, sdkmetric.WithReader(reader)), h
	}
	mp := sdkmetric.NewMeterProvider(readers...)
	return &telemetry{tracer: tp, meter: mp, metrics: handler, shutdown: func(ctx context.Context) error {
		return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	}}, nil
}

// prometheusReader is OpenTelemetry's Prometheus exporter on a registry of its own, and the
// handler that serves that registry.
func prometheusReader() (sdkmetric.Reader, http.Handler, error) {
	reg := prom.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return exp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
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
