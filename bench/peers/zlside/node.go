package zlside

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/bench/peers/zl"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// Node is a ZLink node of the benchmarks and the tick count of its Echo Spots.
type Node struct {
	*rt.Host
	Handled *atomic.Int64
}

// NodeOptions says what a node of the benchmarks does besides hosting Echo Spots.
type NodeOptions struct {
	// ClientOnly makes a node that only calls objects (the client of the remote workloads):
	// it hosts no Spot, so placement puts every Spot it calls on another node.
	ClientOnly bool
	// Actors adds the Board Entry Spot and the Token Actor type; the node's Board is then an
	// active Spot from its start.
	Actors bool
	// ChannelServer makes the node a server of the Service channel.
	ChannelServer bool
}

// StartNode starts a node on etcd that hosts Echo Spots (or, with opts.ClientOnly, only calls
// them), and what opts adds. Idle eviction is off, so that no Spot leaves during a run;
// everything else is the runtime's default.
func StartNode(ctx context.Context, etcd []string, id sdk.NodeID, opts NodeOptions) (*Node, error) {
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
	if opts.ClientOnly {
		cfg.Roles = rt.RoleObjectClient
	}
	cfg.Register = func(r sdk.Registrar) error {
		err := Register(r, n.Handled)
		if opts.Actors {
			err = errors.Join(err, RegisterActors(r))
		}
		if opts.ChannelServer {
			err = errors.Join(err, zl.RegisterServiceServer(r, service{}))
		}
		return err
	}
	h, err := rt.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n.Host = h
	return n, nil
}
