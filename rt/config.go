package rt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/zlink-go/zlink/rt/internal/admin"
	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/sdk"
)

// Role is a node's part in a mesh: it hosts objects, calls them, or both (digest glossary).
type Role uint8

const (
	// RoleObjectServer hosts Spots.
	RoleObjectServer Role = 1 << iota
	// RoleObjectClient calls objects. Every node can call; a node with only this role hosts
	// nothing.
	RoleObjectClient
)

// Has reports whether r includes role.
func (r Role) Has(role Role) bool { return r&role != 0 }

// Config configures a node. Start from DefaultConfig; the zero value of each field means what
// its comment says.
type Config struct {
	// NodeID is the node's identity in the mesh (RID): printable ASCII without spaces. Default:
	// the host name (with any other byte as '-') and a random suffix.
	NodeID sdk.NodeID
	// MeshName is the RouteMesh the node joins (default "default").
	MeshName string
	// Roles is what the node does (default: Object Server and Object Client).
	Roles Role
	// ApplicationVersion is the version of the application this node runs.
	ApplicationVersion int64
	// Weight is this Object Server's share of new Spots, relative to the others' (default 1).
	Weight uint32
	// MaintenanceWave names the group of nodes taken down together for maintenance: a
	// relocation never moves objects to a node of its own source's wave (empty: none).
	MaintenanceWave string
	// RelocationParallelism is how many relocation units a relocation runs at once (default
	// 64: on 2 cores, 10,000 Spots moved at 2.3 k/s with 64, 1.2 k/s with 16, 0.5 k/s with 4,
	// the calls to moving Spots waiting longer the more run at once).
	RelocationParallelism int
	// RelocationDeadline bounds a relocation whose caller gives no deadline (default 5 min).
	RelocationDeadline time.Duration
	// RelocationResendWindow is how long after its last unit committed a relocating node still
	// redirects messages sent along old routes before it reports SafeToShutdown (default 2 s).
	RelocationResendWindow time.Duration

	// ListenAddr is where peers connect (default 127.0.0.1:0, a free loopback port; set a
	// reachable address for a real mesh).
	ListenAddr string
	// ServerTLS and ClientTLS make the node speak TLS with its peers: ServerTLS on its listener,
	// ClientTLS on its connections to them. Set both or neither. For mutual TLS, which a mesh on a
	// shared network needs, set ClientAuth to tls.RequireAndVerifyClientCert and ClientCAs in
	// ServerTLS, and a certificate and RootCAs in ClientTLS; each node's certificate then names
	// the node in a URI SAN zlink://node/<node ID> (see docs/SECURITY.md), and a peer is known by
	// its certificate, not by what it says. A configuration without MinVersion gets TLS 1.3.
	ServerTLS, ClientTLS *tls.Config
	// InsecurePlaintext lets a node listen on an address other than loopback without TLS, for a
	// network the operator trusts: any client that reaches the port can then call, create and
	// close any Spot. Without it such a configuration is refused at Start; on loopback plaintext
	// is the development default.
	InsecurePlaintext bool
	// MaxMessageSize is the largest request or reply payload between nodes, enforced on send
	// and receive (default 4 MiB); two nodes use the smaller of their limits.
	MaxMessageSize int
	// Dialer, when set, makes the node's connections to its peers instead of net.Dialer: to
	// go through a proxy or a tunnel. It gets the endpoint the peer published.
	Dialer func(ctx context.Context, endpoint string) (net.Conn, error)

	// AdminAddr, when set, makes the node serve its admin pages over HTTP at this address
	// (host:port; port 0 takes a free one, which Host.AdminURL tells): a live dashboard at /,
	// the node's statuses as JSON at /status and as server-sent events at /events, every node
	// of the mesh at /mesh, POST /relocate and POST /shutdown for an operator's tools (the
	// zlink command), and /debug/pprof/. On a loopback address it speaks plain HTTP and takes
	// POST requests from anyone who reaches it. On any other address it follows the node's
	// TLS, as the mesh listener does: HTTPS with ServerTLS, client-certificate settings
	// included, and POST requests only from callers whose client certificate ServerTLS
	// verified; without ServerTLS it needs InsecurePlaintext, and then refuses every POST,
	// serves only requests that name it by IP address, as localhost (a tunnel) or by this
	// address's host, and serves /debug/pprof/ only through a tunnel that ends on the node
	// (a connection from its loopback interface naming a loopback host).
	// The URL goes into the node's registration, where other nodes' pages and the zlink
	// command find it. docs/ADMIN.md describes the pages and the JSON. Empty (the default):
	// no admin server.
	AdminAddr string
	// AdminHandlers are the application's own handlers on the admin server, by
	// http.ServeMux pattern: an OpenTelemetry Prometheus exporter's at "GET /metrics", say.
	// A pattern must not overlap the server's own nor name a host (ServeMux would put it
	// before the server's own); AdminHandlers need AdminAddr.
	AdminHandlers map[string]http.Handler

	// EtcdEndpoints are the Location Store's etcd endpoints. Empty: the node starts an embedded
	// etcd of its own (the development default) and others may join it (Host.EtcdEndpoints).
	EtcdEndpoints []string
	// EtcdDialTimeout bounds connecting to etcd (default 5 s).
	EtcdDialTimeout time.Duration
	// EtcdTLS, when set, makes the connection to etcd speak TLS: RootCAs to trust the etcd
	// servers, and a client certificate for etcd's client-certificate authentication.
	EtcdTLS *tls.Config
	// EtcdUsername and EtcdPassword authenticate the node to an etcd with authentication on;
	// the user needs read and write permission on the key prefix /zlink/<MeshName>/.
	EtcdUsername, EtcdPassword string
	// EmbeddedEtcdDir keeps the embedded etcd's data across restarts. Empty: a temporary
	// directory removed at Close.
	EmbeddedEtcdDir string
	// EtcdMaxTxnOps is the etcd server's --max-txn-ops: the group commit puts up to this many
	// record writes in one transaction (default 128, etcd's own default; the embedded etcd is
	// started with this value).
	EtcdMaxTxnOps int
	// LeaseTTL is the node's owner lease TTL (default 10 s): a dead node's objects answer
	// ErrOwnerUnavailable for about this long before they are reclaimed.
	LeaseTTL time.Duration

	// Exec bounds every Spot's two lanes, the application lane and the lifecycle lane, each by an
	// item count and a byte size. Both limits of both lanes must be positive: no lane is
	// unbounded. DefaultConfig sets 1,024 items and 64 MiB for the application lane, 128 items
	// and 4 MiB for the lifecycle lane.
	Exec exec.Config
	// InstanceSpotIdleTimeout evicts an Instance Spot after this long without application work
	// (default 10 minutes). Negative: no idle eviction unless a type sets its own.
	InstanceSpotIdleTimeout time.Duration
	// MaxActiveObjects caps the User and Instance Spots active on this node, so that no
	// flood of creations exhausts its memory. DefaultConfig sets DefaultMaxActiveObjects; zero
	// set explicitly means no cap.
	MaxActiveObjects int
	// MaxActiveActors caps the Actors active on this node, those that arrive by a move
	// included: a spawn or a move into a Spot here beyond it fails with an error matching
	// sdk.ErrCapacityExceeded. It is separate from MaxActiveObjects. DefaultConfig sets
	// DefaultMaxActiveActors; zero set explicitly means no cap.
	MaxActiveActors int
	// MaxConcurrentActivations bounds the creations that run on this node at once; more wait
	// their turn, within OperationTimeout (default 64).
	MaxConcurrentActivations int
	// OperationTimeout bounds a creation or a close once started (default 30 s).
	OperationTimeout time.Duration
	// StopTimeout bounds Close: Spots not closed by then keep their records, which turn
	// Unavailable with the node's lease (default 30 s).
	StopTimeout time.Duration

	// Inbound bounds what the node takes in at once, across all its Spots. The Core HWM is a
	// byte budget for the requests its peers sent that it still holds, from their arrival until
	// their reply is queued (a one-way message: until its handler returns); a request that does
	// not fit is refused with sdk.ErrInboundBudget, and its peer's stream is not read until
	// bytes return. The budget is CoreHwmBudgetBytes, else the memory limit
	// (CoreHwmMemoryLimitBytes, else GOMEMLIMIT when set) divided by 4 (Balanced profile), 2
	// (Throughput) or 8 (LowMemory), else 256 MiB, 1 GiB or 64 MiB by profile, and at least two
	// messages of MaxMessageSize. The application job queue bounds the messages queued or
	// running in the node's Spots at once (a request from this node that finds its Spot idle
	// runs at once on its caller's goroutine and is not counted): MaxQueuedApplicationJobs under the Manual profile,
	// else 1,024 per GOMAXPROCS and at least 4,096. A caller that finds it full waits for room
	// until its context ends, then gets sdk.ErrCapacityExceeded (Where: scheduler); a message
	// that a handler sends or calls while the queue is full is taken beyond its size instead of
	// waiting for the permits its caller holds. Above the pause threshold (default 90% of the
	// queue) the node stops reading its peers' streams, and starts again at the resume threshold
	// (default seven ninths of the pause threshold, 70%). The zero value is every default.
	Inbound sdk.InboundDispatchOptions

	// Unhandled is what the node does with a message it knows no handler for: its Spot type is
	// not registered here, or the type has no such method. One action per family: Request for
	// calls, Send for one-way messages, Publish for channel publishes (which come with
	// channels). The zero value refuses such a message with an error wrapping
	// sdk.ErrUnhandled, for calls and sends alike. LogAndDrop and Drop drop it: a Send then
	// returns nil, and a Call gets no reply, so it ends with its context's error, or after
	// OperationTimeout at most. Throw makes this node refuse to send a message that the
	// target's descriptor or the membership shows no node can handle. See
	// sdk.UnhandledDispatchAction for the details. Messages found unhandled here, as a caller
	// of a local Spot or a receiver from a peer, follow this node's policy.
	Unhandled sdk.UnhandledDispatchOptions

	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger
	// Diagnostics, when set, configures the node's telemetry. Start sets the process's
	// diagnostics level to its Level, as sdk.SetDiagnosticsLevel does: the level is one for the
	// whole process, so the node started last sets it, and sdk.SetDiagnosticsLevel changes it at
	// any time. SampleRate is the fraction of the traces started on this node that are recorded
	// (a trace that arrives from a caller keeps the caller's decision), and IncludeMessageSizes
	// records the size distribution of requests and replies at the Normal level too. Nil leaves
	// the process's level as it is (sdk.DefaultDiagnosticsLevel unless changed), records every
	// trace, and records message sizes only at the Detailed level.
	Diagnostics *sdk.DiagnosticsOptions
	// TracerProvider makes the node's spans. Nil: the global provider (otel.GetTracerProvider),
	// also one the application installs after Start; until it installs one no span is made.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the node's metrics. Nil: the global provider (otel.GetMeterProvider)
	// at Start, which forwards to a provider the application installs later.
	MeterProvider metric.MeterProvider
	// Register registers the node's Spot types before it serves, typically by calling the
	// generated RegisterX functions.
	Register func(sdk.Registrar) error
}

// DefaultMaxActiveObjects is the active-object cap of DefaultConfig: an idle Spot holds about a
// kilobyte of heap, so the cap keeps a node's Spots to a few gigabytes at most.
const DefaultMaxActiveObjects = 1_000_000

// DefaultMaxActiveActors is the Actor cap of DefaultConfig.
const DefaultMaxActiveActors = 1_000_000

// DefaultConfig returns a configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		NodeID:                  defaultNodeID(),
		MeshName:                "default",
		Roles:                   RoleObjectServer | RoleObjectClient,
		Weight:                  1,
		ListenAddr:              "127.0.0.1:0",
		MaxMessageSize:          4 << 20,
		EtcdDialTimeout:         5 * time.Second,
		EtcdMaxTxnOps:           128,
		LeaseTTL:                10 * time.Second,
		Exec:                    exec.DefaultConfig(),
		MaxActiveObjects:        DefaultMaxActiveObjects,
		MaxActiveActors:         DefaultMaxActiveActors,
		InstanceSpotIdleTimeout: catalog.DefaultInstanceSpotIdleTimeout,
		OperationTimeout:        30 * time.Second,
		StopTimeout:             sdk.DefaultShutdownDeadline,
	}
}

func defaultNodeID() sdk.NodeID {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	host = strings.Map(func(r rune) rune {
		if r < '!' || r > '~' {
			return '-'
		}
		return r
	}, host)
	var b [3]byte
	_, _ = rand.Read(b[:])
	return sdk.NodeID(host + "-" + hex.EncodeToString(b[:]))
}

// withDefaults fills the zero fields that have a default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.NodeID == "" {
		c.NodeID = d.NodeID
	}
	if c.MeshName == "" {
		c.MeshName = d.MeshName
	}
	if c.Roles == 0 {
		c.Roles = d.Roles
	}
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.Weight == 0 {
		c.Weight = d.Weight
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = d.MaxMessageSize
	}
	if c.EtcdDialTimeout <= 0 {
		c.EtcdDialTimeout = d.EtcdDialTimeout
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.EtcdMaxTxnOps == 0 {
		c.EtcdMaxTxnOps = d.EtcdMaxTxnOps
	}
	if c.Exec == (exec.Config{}) {
		c.Exec = d.Exec
	}
	if c.InstanceSpotIdleTimeout == 0 {
		c.InstanceSpotIdleTimeout = d.InstanceSpotIdleTimeout
	}
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = d.OperationTimeout
	}
	if c.RelocationParallelism <= 0 {
		c.RelocationParallelism = DefaultRelocationParallelism
	}
	if c.RelocationDeadline <= 0 {
		c.RelocationDeadline = DefaultRelocationDeadline
	}
	if c.RelocationResendWindow <= 0 {
		c.RelocationResendWindow = DefaultRelocationResendWindow
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = d.StopTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem of the configuration at once. Unset fields that have
// defaults are not problems.
func (c Config) Validate() error {
	errs := c.negatives()
	c = c.withDefaults()
	if err := c.NodeID.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := sdk.ValidateID("mesh name", c.MeshName); err != nil {
		errs = append(errs, err)
	}
	if c.Roles&^(RoleObjectServer|RoleObjectClient) != 0 {
		errs = append(errs, fmt.Errorf("%w: unknown roles %b", sdk.ErrConfig, c.Roles))
	}
	if err := c.Exec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxActiveObjects < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxActiveObjects must not be negative, got %d", sdk.ErrConfig, c.MaxActiveObjects))
	}
	if c.MaxActiveActors < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxActiveActors must not be negative, got %d", sdk.ErrConfig, c.MaxActiveActors))
	}
	if c.MaxMessageSize < 0 || c.MaxMessageSize > MaxMessageSizeLimit {
		errs = append(errs, fmt.Errorf("%w: MaxMessageSize must be 1..%d bytes, got %d", sdk.ErrConfig, MaxMessageSizeLimit, c.MaxMessageSize))
	}
	if len(c.MaintenanceWave) > maxMaintenanceWave || !utf8.ValidString(c.MaintenanceWave) {
		errs = append(errs, fmt.Errorf("%w: MaintenanceWave must be valid UTF-8 of at most %d bytes, got %d bytes", sdk.ErrConfig, maxMaintenanceWave, len(c.MaintenanceWave)))
	}
	if c.EtcdMaxTxnOps < 4 {
		errs = append(errs, fmt.Errorf("%w: EtcdMaxTxnOps must be at least 4, got %d", sdk.ErrConfig, c.EtcdMaxTxnOps))
	}
	if c.LeaseTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("%w: LeaseTTL must be at least 2s (etcd's minimum), got %v", sdk.ErrConfig, c.LeaseTTL))
	}
	for _, ep := range c.EtcdEndpoints {
		if ep == "" {
			errs = append(errs, fmt.Errorf("%w: empty etcd endpoint", sdk.ErrConfig))
		}
	}
	if len(c.EtcdEndpoints) > 0 && c.EmbeddedEtcdDir != "" {
		errs = append(errs, fmt.Errorf("%w: EmbeddedEtcdDir is set but etcd endpoints are given", sdk.ErrConfig))
	}
	if (c.ServerTLS == nil) != (c.ClientTLS == nil) {
		errs = append(errs, fmt.Errorf("%w: set both ServerTLS and ClientTLS or neither: nodes speak TLS both ways or not at all", sdk.ErrConfig))
	}
	if err := checkHostPort(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("%w: ListenAddr %q %v", sdk.ErrConfig, c.ListenAddr, err))
	} else if c.ServerTLS == nil && !c.InsecurePlaintext && !loopback(c.ListenAddr) {
		errs = append(errs, fmt.Errorf("%w: the node listens on %s without TLS, so anyone who reaches that port can call, create and close any Spot: "+
			"set ServerTLS and ClientTLS (mutual TLS), or InsecurePlaintext on a network you trust", sdk.ErrConfig, c.ListenAddr))
	}
	errs = append(errs, c.validateAdmin()...)
	if _, err := capacity.Resolve(c.Inbound, c.MaxMessageSize); err != nil {
		errs = append(errs, fmt.Errorf("Config.Inbound: %w", err))
	}
	if err := c.Unhandled.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Config.Unhandled: %w", err))
	}
	if c.Diagnostics != nil {
		if err := c.Diagnostics.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%w: Diagnostics: %w", sdk.ErrConfig, err))
		}
	}
	if (c.EtcdUsername == "") != (c.EtcdPassword == "") {
		errs = append(errs, fmt.Errorf("%w: set both EtcdUsername and EtcdPassword or neither", sdk.ErrConfig))
	}
	return errors.Join(errs...)
}

// MaxMessageSizeLimit is the largest MaxMessageSize a node takes: gRPC frames a message with a
// 32-bit length, a request's envelope must fit beside its payload, and a send queue holds four
// of the largest messages.
const MaxMessageSizeLimit = min(1<<32-1, math.MaxInt/4) - 64<<10

// maxMaintenanceWave bounds MaintenanceWave, which every node descriptor in etcd carries.
const maxMaintenanceWave = 256

// negatives reports the fields, as configured, that must not be negative: zero means the
// default, and a negative value is a mistake rather than another way to say it.
func (c Config) negatives() []error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"EtcdDialTimeout", c.EtcdDialTimeout}, {"LeaseTTL", c.LeaseTTL}, {"OperationTimeout", c.OperationTimeout},
		{"StopTimeout", c.StopTimeout}, {"RelocationDeadline", c.RelocationDeadline}, {"RelocationResendWindow", c.RelocationResendWindow},
	} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("%w: %s must not be negative (0 means the default), got %v", sdk.ErrConfig, f.name, f.d))
		}
	}
	for _, f := range []struct {
		name string
		n    int
	}{
		{"MaxConcurrentActivations", c.MaxConcurrentActivations}, {"RelocationParallelism", c.RelocationParallelism},
	} {
		if f.n < 0 {
			errs = append(errs, fmt.Errorf("%w: %s must not be negative (0 means the default), got %d", sdk.ErrConfig, f.name, f.n))
		}
	}
	return errs
}

// checkHostPort reports why addr is not host:port with a port in 0..65535.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("is not host:port: %v", err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("has port %q, which is not a number in 0..65535 nor a service name", port)
	}
	return nil
}

// validateAdmin reports the problems of the admin server's settings.
func (c Config) validateAdmin() []error {
	var errs []error
	if c.AdminAddr == "" {
		if len(c.AdminHandlers) > 0 {
			errs = append(errs, fmt.Errorf("%w: AdminHandlers are set but AdminAddr is not: no admin server would serve them", sdk.ErrConfig))
		}
		return errs
	}
	if err := checkHostPort(c.AdminAddr); err != nil {
		errs = append(errs, fmt.Errorf("%w: AdminAddr %q %v", sdk.ErrConfig, c.AdminAddr, err))
	} else if c.ServerTLS == nil && !c.InsecurePlaintext && !loopback(c.AdminAddr) {
		errs = append(errs, fmt.Errorf("%w: the admin server listens on %s without TLS, so anyone who reaches that port can read the node's status and profiles: "+
			"set ServerTLS and ClientTLS, use a loopback AdminAddr, or set InsecurePlaintext on a network you trust", sdk.ErrConfig, c.AdminAddr))
	}
	if err := admin.CheckHandlers(c.AdminHandlers); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// newTelemetry makes the node's instrumentation and, when Diagnostics is set, sets the
// process's diagnostics level to its Level.
func (c Config) newTelemetry(ctx context.Context) (*telemetry.Telemetry, error) {
	tc := telemetry.Config{Node: c.NodeID, TracerProvider: c.TracerProvider, MeterProvider: c.MeterProvider, SampleRate: 1}
	if d := c.Diagnostics; d != nil {
		if err := sdk.SetDiagnosticsLevel(ctx, d.Level); err != nil {
			return nil, err
		}
		tc.SampleRate, tc.MessageSizes = d.SampleRate, d.IncludeMessageSizes
	}
	tel, err := telemetry.New(tc)
	if err != nil {
		return nil, fmt.Errorf("rt: telemetry: %w", err)
	}
	return tel, nil
}

// loopback reports whether addr (host:port) listens on the loopback interface only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") { // not "localhost.", which DNS may answer
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withTLS13 returns cfg, or a copy of it that requires TLS 1.3 when it sets no minimum.
func withTLS13(cfg *tls.Config) *tls.Config {
	if cfg == nil || cfg.MinVersion != 0 {
		return cfg
	}
	cfg = cfg.Clone()
	cfg.MinVersion = tls.VersionTLS13
	return cfg
}

// Relocation defaults (see Config).
const (
	DefaultRelocationParallelism  = 64
	DefaultRelocationDeadline     = 5 * time.Minute
	DefaultRelocationResendWindow = 2 * time.Second
)
