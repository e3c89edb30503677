package zlside

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// Node is a ZLink node of the benchmarks and the tick count of its Echo Spots.
type Node struct {
	*rt.Host
	Handled *atomic.Int64
}

// StartNode starts a node on etcd that hosts Echo Spots (or, with clientOnly, only calls
// them). Idle eviction is off, so that no Spot leaves during a run; everything else is the
// runtime's default.
func StartNode(ctx context.Context, etcd []string, id sdk.NodeID, clientOnly bool) (*Node, error) {
	if len(etcd) == 0 {
		return nil, fmt.Errorf("zlside: no etcd endpoints")
	}
	n := &Node{Handled: new(atomic.Int64)}
	cfg := rt.DefaultConfig()
	cfg.NodeID = id
	cfg.EtcdEndpoints = etcd
	cfg.InstanceSpotIdleTimeout = -1
	cfg.StopTimeout = 20 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if clientOnly {
		cfg.Roles = rt.RoleObjectClient
	}
	cfg.Register = func(r sdk.Registrar) error { return Register(r, n.Handled) }
	h, err := rt.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n.Host = h
	return n, nil
}
