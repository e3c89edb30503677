package rt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/zlink-go/zlink/rt/exec"
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
	// NodeID is the node's identity in the mesh (RID). Default: the host name and a random
	// suffix.
	NodeID sdk.NodeID
	// MeshName is the RouteMesh the node joins (default "default").
	MeshName string
	// Roles is what the node does (default: Object Server and Object Client).
	Roles Role
	// ApplicationVersion is the version of the application this node runs.
	ApplicationVersion int64
	// Weight is this Object Server's share of new Spots, relative to the others' (default 1).
	Weight uint32

	// ListenAddr is where peers connect (default 127.0.0.1:0, a free loopback port; set a
	// reachable address for a real mesh).
	ListenAddr string
	// ServerTLS, when set, makes the node's listener speak TLS (set ClientAuth and ClientCAs
	// for mutual TLS); ClientTLS makes its connections to peers speak TLS.
	ServerTLS, ClientTLS *tls.Config
	// MaxMessageSize is the largest request or reply payload between nodes, enforced on send
	// and receive (default 4 MiB); two nodes use the smaller of their limits.
	MaxMessageSize int
	// Dialer, when set, makes the node's connections to its peers instead of net.Dialer: to
	// go through a proxy or a tunnel. It gets the endpoint the peer published.
	Dialer func(ctx context.Context, endpoint string) (net.Conn, error)

	// EtcdEndpoints are the Location Store's etcd endpoints. Empty: the node starts an embedded
	// etcd of its own (the development default) and others may join it (Host.EtcdEndpoints).
	EtcdEndpoints []string
	// EtcdDialTimeout bounds connecting to etcd (default 5 s).
	EtcdDialTimeout time.Duration
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

	// Exec bounds every Spot's two lanes (E2 defaults; both axes must be positive: E4).
	Exec exec.Config
	// InstanceSpotIdleTimeout evicts an Instance Spot after this long without application work
	// (D1; default 10 minutes). Negative: no idle eviction unless a type sets its own.
	InstanceSpotIdleTimeout time.Duration
	// MaxActiveObjects caps the User and Instance Spots active on this node (D6). Zero: no cap.
	MaxActiveObjects int
	// OperationTimeout bounds a creation or a close once started (default 30 s).
	OperationTimeout time.Duration
	// StopTimeout bounds Close: Spots not closed by then keep their records, which turn
	// Unavailable with the node's lease (default 30 s, F8).
	StopTimeout time.Duration

	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger
	// Register registers the node's Spot types before it serves, typically by calling the
	// generated RegisterX functions.
	Register func(sdk.Registrar) error
}

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
		InstanceSpotIdleTimeout: 10 * time.Minute,
		OperationTimeout:        30 * time.Second,
		StopTimeout:             sdk.DefaultShutdownDeadline,
	}
}

func defaultNodeID() sdk.NodeID {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
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
	c = c.withDefaults()
	var errs []error
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
	if c.MaxMessageSize < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxMessageSize must be positive, got %d", sdk.ErrConfig, c.MaxMessageSize))
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
	return errors.Join(errs...)
}
