package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/zlink-go/zlink/rt"
)

// operator is what -admin and -metrics give the nodes: an admin server each and, with
// -metrics, the runtime's OpenTelemetry metrics for Prometheus at /metrics on it (the runtime
// exports nothing itself: the exporter is the application's).
type operator struct {
	admin   string
	meter   *sdkmetric.MeterProvider
	metrics http.Handler
}

// newOperator checks the flags and makes the Prometheus exporter when -metrics asks for it.
func newOperator(admin string, metrics bool) (*operator, error) {
	op := &operator{admin: admin}
	if admin == "" {
		if metrics {
			return nil, fmt.Errorf("-metrics needs -admin: the metrics are served on the admin server")
		}
		return op, nil
	}
	if _, err := adminAddr(admin, 0); err != nil {
		return nil, err
	}
	if metrics {
		reg := prom.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		op.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
		op.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	return op, nil
}

// configure gives the i-th node of this process its admin server, on -admin's port plus i.
func (op *operator) configure(cfg *rt.Config, i int) {
	if op == nil || op.admin == "" {
		return
	}
	cfg.AdminAddr, _ = adminAddr(op.admin, i) // checked by newOperator
	if op.metrics != nil {
		cfg.MeterProvider = op.meter
		cfg.AdminHandlers = map[string]http.Handler{"GET /metrics": op.metrics}
	}
}

// adminAddr is the admin address of the i-th node of this process: -admin's host, and its port
// plus i (a port of 0 stays 0: each node gets a free one).
func adminAddr(base string, i int) (string, error) {
	host, port, err := net.SplitHostPort(base)
	if err != nil {
		return "", fmt.Errorf("-admin %q: %v: give host:port, such as 127.0.0.1:8080", base, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+i > 65535 {
		return "", fmt.Errorf("-admin %q: the port must be a number from 0 to 65535", base)
	}
	if p > 0 {
		p += i
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}
