// Command chat is ZLink's example application: chat rooms (Instance Spots), people's sessions
// (User Spots) and a lobby on every node (Entry Spot), on a mesh of nodes.
//
// With no flags it starts a two-node mesh in this process on an embedded etcd and plays a
// scripted session:
//
//	go run ./examples/chat
//
// With -i it runs one node and reads commands from standard input, so that people on several
// nodes can chat. The first node serves an embedded etcd to the others:
//
//	go run ./examples/chat -i -node node-1
//	go run ./examples/chat -i -node node-2 -etcd <the address node-1 printed>
//
// With -otel stdout the nodes' OpenTelemetry spans and metrics are written to standard error.
// With -admin 127.0.0.1:8080 each node serves its admin pages (a live dashboard, /status,
// pprof; node-2 of the scripted run on the next port), and with -metrics also its
// OpenTelemetry metrics for Prometheus at /metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zlink-go/zlink/examples/chat/chat"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	interactive bool
	etcd        string
	listen      string
	insecure    bool
	node        string
	idle        time.Duration
	logLevel    slog.Level
	otel        string
	admin       string
	metrics     bool
	telemetry   *telemetry
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.interactive, "i", false, "interactive: run one node and read commands from standard input")
	fs.StringVar(&o.etcd, "etcd", "", "etcd endpoints host:port,... (default: start an embedded etcd)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "address other nodes reach this node at")
	fs.BoolVar(&o.insecure, "insecure", false, "accept a -listen address other than loopback without TLS (a trusted network only)")
	fs.StringVar(&o.node, "node", "", "this node's ID (default: the host name and a random suffix)")
	fs.DurationVar(&o.idle, "idle", 0, "evict a room after this long without activity (default 1s scripted, 5m interactive)")
	fs.TextVar(&o.logLevel, "log", slog.LevelError, "the least severe runtime log level written to standard error: DEBUG, INFO, WARN or ERROR")
	fs.StringVar(&o.otel, "otel", "", "export OpenTelemetry spans and metrics: stdout writes them to standard error (default: none)")
	fs.StringVar(&o.admin, "admin", "", "serve each node's admin pages (dashboard, /status, pprof) at host:port; the scripted run's node-2 takes the next port (default: none)")
	fs.BoolVar(&o.metrics, "metrics", false, "with -admin: serve the nodes' OpenTelemetry metrics for Prometheus at /metrics")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.metrics && o.admin == "" {
		return errors.New("-metrics needs -admin: the metrics are served on the admin server")
	}
	if o.admin != "" {
		if _, err := adminAddr(o.admin, 0); err != nil {
			return err
		}
	}
	tel, err := newTelemetry(o.otel, o.metrics, stderr)
	if err != nil {
		return err
	}
	o.telemetry = tel
	defer func() {
		// The nodes are closed by now: what they recorded last is flushed, within a bound.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err = errors.Join(err, tel.shutdown(sctx))
	}()
	if o.interactive {
		return interactive(ctx, o, stdin, stdout)
	}
	return scripted(ctx, o, stdout)
}

// config is the configuration of the i-th node of this process: the three chat types, logs
// at o.logLevel, the admin server on -admin's port plus i.
func config(o options, node string, i int, idle time.Duration) rt.Config {
	cfg := rt.DefaultConfig()
	if node != "" {
		cfg.NodeID = sdk.NodeID(node)
	}
	cfg.ListenAddr = o.listen
	cfg.InsecurePlaintext = o.insecure
	if o.etcd != "" {
		cfg.EtcdEndpoints = strings.Split(o.etcd, ",")
	}
	cfg.InstanceSpotIdleTimeout = idle
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
	cfg.StopTimeout = 10 * time.Second
	if o.telemetry != nil {
		cfg.TracerProvider, cfg.MeterProvider = o.telemetry.tracer, o.telemetry.meter
	}
	if o.admin != "" {
		cfg.AdminAddr, _ = adminAddr(o.admin, i) // checked when the flags were read
		if o.telemetry != nil && o.telemetry.metrics != nil {
			cfg.AdminHandlers = map[string]http.Handler{"GET /metrics": o.telemetry.metrics}
		}
	}
	cfg.Register = func(r sdk.Registrar) error {
		return errors.Join(
			chat.RegisterLobby(r, chat.NewLobby),
			chat.RegisterUser(r, chat.NewUser),
			chat.RegisterRoom(r, chat.NewRoom),
		)
	}
	return cfg
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
