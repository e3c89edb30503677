// Package rt is the ZLink runtime: Start a node, and it serves the Spot types it registered
// and calls any object of its mesh through the sdk.Client it is.
//
//	cfg := rt.DefaultConfig()
//	cfg.Register = func(r sdk.Registrar) error { return chat.RegisterRoom(r, newRoom) }
//	h, err := rt.Start(ctx, cfg)
//	...
//	defer h.Close()
//	reply, err := chat.OpenRoom(h, "lobby").Join(ctx, &chat.JoinRequest{...})
package rt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/catalog"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/mesh"
	"github.com/zlink-go/zlink/rt/store"
	"github.com/zlink-go/zlink/rt/store/storepb"
	"github.com/zlink-go/zlink/rt/transport"
	"github.com/zlink-go/zlink/sdk"
)

// Host is a running node. It is an sdk.Client.
type Host struct {
	cfg     Config
	log     *slog.Logger
	etcd    *devetcd.Server // the embedded etcd, when this node started one
	client  *clientv3.Client
	store   *store.Etcd
	mesh    *mesh.Mesh
	reg     *store.Registration
	catalog *catalog.Catalog
	state   atomic.Uint32 // sdk.RuntimeState

	stop      chan struct{} // closed at Close: ends the lease watch
	watchers  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ sdk.Client = (*Host)(nil)

// Start starts a node: it connects to etcd (or starts an embedded one when no endpoints are
// configured), listens for peers, registers the node on an owner lease, registers the Spot
// types, makes the Entry Spots, joins the mesh and begins serving. Cancelling ctx aborts the
// start; everything started so far is stopped.
func Start(ctx context.Context, cfg Config) (_ *Host, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Host{cfg: cfg, log: cfg.Logger.With("node", string(cfg.NodeID)), stop: make(chan struct{})}
	h.state.Store(uint32(sdk.RuntimeStatePreparing))
	defer func() {
		if err != nil {
			_ = h.teardown(context.Background())
		}
	}()

	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		opts := []devetcd.Option{devetcd.WithMaxTxnOps(uint(cfg.EtcdMaxTxnOps))}
		if cfg.EmbeddedEtcdDir != "" {
			opts = append(opts, devetcd.WithDir(cfg.EmbeddedEtcdDir))
		}
		h.etcd, err = devetcd.Start(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("rt: embedded etcd: %w", err)
		}
		endpoints = h.etcd.Endpoints()
	}
	h.client, err = clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: cfg.EtcdDialTimeout,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("rt: etcd client: %w", err)
	}
	h.store, err = store.New(h.client, cfg.MeshName, store.WithGroupCommit(cfg.EtcdMaxTxnOps))
	if err != nil {
		return nil, err
	}

	types := &catalog.Types{}
	if cfg.Register != nil {
		if err := cfg.Register(types); err != nil {
			return nil, fmt.Errorf("rt: register spot types: %w", err)
		}
	}
	server := cfg.Roles.Has(RoleObjectServer)
	h.mesh, err = mesh.Listen(mesh.Config{
		Node:         cfg.NodeID,
		ObjectServer: server,
		Transport: transport.Config{
			ListenAddr: cfg.ListenAddr, ServerTLS: cfg.ServerTLS, ClientTLS: cfg.ClientTLS,
			MaxMessageSize: cfg.MaxMessageSize, Logger: cfg.Logger,
		},
		ReclaimInterval: cfg.LeaseTTL * 3,
		Logger:          cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("rt: %w", err)
	}
	var hosted []string
	if server {
		hosted = types.Names()
	}
	h.reg, err = h.store.Register(ctx, &storepb.NodeDescriptor{
		NodeId:             string(cfg.NodeID),
		Roles:              uint32(cfg.Roles),
		ApplicationVersion: cfg.ApplicationVersion,
		State:              uint32(sdk.RuntimeStatePreparing),
		Weight:             cfg.Weight,
		MaxActive:          int64(cfg.MaxActiveObjects),
		SpotTypes:          hosted,
		Endpoint:           h.mesh.Endpoint(),
	}, store.LeaseOptions{TTL: cfg.LeaseTTL})
	if err != nil {
		return nil, fmt.Errorf("rt: %w", err)
	}
	h.catalog, err = catalog.New(catalog.Config{
		Node:                    cfg.NodeID,
		Exec:                    cfg.Exec,
		InstanceSpotIdleTimeout: cfg.InstanceSpotIdleTimeout,
		MaxActive:               cfg.MaxActiveObjects,
		OperationTimeout:        cfg.OperationTimeout,
		Logger:                  cfg.Logger,
		ClientOnly:              !server,
	}, h.store, h.reg, types, spotClient{h})
	if err != nil {
		return nil, err
	}
	if err := h.catalog.Start(ctx); err != nil {
		return nil, err
	}
	if err := h.mesh.Start(ctx, h.store, h.reg, h.catalog, h.runtimeState); err != nil {
		return nil, fmt.Errorf("rt: join the mesh: %w", err)
	}
	h.state.Store(uint32(sdk.RuntimeStateServing))
	h.watchers.Add(1)
	go h.watchLease()
	return h, nil
}

// watchLease puts the node in the Error state if its owner lease is lost: it owns nothing any
// more, so it admits no work for its objects (C1), creates nothing, and ends its activations
// with CloseOwnerLost; their records are reclaimed by the mesh's other Object Servers.
func (h *Host) watchLease() {
	defer h.watchers.Done()
	select {
	case <-h.stop:
	case <-h.reg.Lost():
		h.state.Store(uint32(sdk.RuntimeStateError))
		h.log.Error("the node's owner lease was lost; it no longer serves its objects")
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.StopTimeout)
		defer cancel()
		if err := h.catalog.CloseOwned(ctx, sdk.CloseOwnerLost); err != nil {
			h.log.Warn("closing the objects of a lost lease", "err", err)
		}
	}
}

func (h *Host) runtimeState() sdk.RuntimeState { return sdk.RuntimeState(h.state.Load()) }

// LocalNode implements sdk.Client.
func (h *Host) LocalNode() sdk.NodeID { return h.cfg.NodeID }

// EtcdEndpoints returns the etcd endpoints the node uses; with the embedded default, other
// nodes can join the mesh by using them.
func (h *Host) EtcdEndpoints() []string { return h.client.Endpoints() }

// Endpoint is the address peers dial to reach this node.
func (h *Host) Endpoint() string { return h.mesh.Endpoint() }

func (h *Host) serving() error {
	if s := h.runtimeState(); s != sdk.RuntimeStateServing {
		return fmt.Errorf("%w: node %s is %s", sdk.ErrNotServing, h.cfg.NodeID, s)
	}
	return nil
}

// Call implements sdk.Client.
func (h *Host) Call(ctx context.Context, t sdk.Target, method string, req proto.Message, opts ...sdk.CallOption) (proto.Message, error) {
	if err := h.serving(); err != nil {
		return nil, err
	}
	return h.mesh.Call(ctx, t, method, req, sdk.ApplyCallOptions(opts))
}

// Send implements sdk.Client.
func (h *Host) Send(ctx context.Context, t sdk.Target, method string, msg proto.Message, opts ...sdk.CallOption) error {
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.Send(ctx, t, method, msg, sdk.ApplyCallOptions(opts))
}

// Create implements sdk.Client.
func (h *Host) Create(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.Create(ctx, t, sdk.ApplyCallOptions(opts))
}

// CloseSpot implements sdk.Client.
func (h *Host) CloseSpot(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.CloseSpot(ctx, t, sdk.ApplyCallOptions(opts))
}

// spotClient is the Client that Spots get: the node's own traffic, which keeps flowing while
// the node drains (a closing callback may still call its node's Entry Spot), where the Host
// refuses new operations from outside.
type spotClient struct{ h *Host }

func (c spotClient) Call(ctx context.Context, t sdk.Target, method string, req proto.Message, opts ...sdk.CallOption) (proto.Message, error) {
	return c.h.mesh.Call(ctx, t, method, req, sdk.ApplyCallOptions(opts))
}

func (c spotClient) Send(ctx context.Context, t sdk.Target, method string, msg proto.Message, opts ...sdk.CallOption) error {
	return c.h.mesh.Send(ctx, t, method, msg, sdk.ApplyCallOptions(opts))
}

func (c spotClient) Create(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	return c.h.mesh.Create(ctx, t, sdk.ApplyCallOptions(opts))
}

func (c spotClient) CloseSpot(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	return c.h.mesh.CloseSpot(ctx, t, sdk.ApplyCallOptions(opts))
}

func (c spotClient) LocalNode() sdk.NodeID { return c.h.cfg.NodeID }

// MeshStatus returns the RouteMesh status of the node's mesh (G3–G5).
func (h *Host) MeshStatus() sdk.RouteMeshStatus { return h.mesh.Status(h.cfg.MeshName) }

// CatalogStats returns counters of the node's Spot catalog.
func (h *Host) CatalogStats() catalog.Stats { return h.catalog.Stats() }

// TransportStats returns counters of the node's connections to its peers.
func (h *Host) TransportStats() transport.Stats { return h.mesh.Transport().Stats() }

// Close stops the node: it stops taking work, every Spot closes with reason Shutdown and
// releases its location, the node leaves the mesh, its owner lease is revoked, and an
// embedded etcd is stopped. It is bounded by StopTimeout and safe to call more than once.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.StopTimeout)
		defer cancel()
		h.closeErr = h.teardown(ctx)
	})
	return h.closeErr
}

// teardown stops, in reverse order, whatever Start got to.
func (h *Host) teardown(ctx context.Context) error {
	h.state.Store(uint32(sdk.RuntimeStateDraining))
	close(h.stop)
	h.watchers.Wait()
	var errs []error
	if h.catalog != nil {
		errs = append(errs, h.catalog.Close(ctx))
	}
	if h.mesh != nil {
		errs = append(errs, h.mesh.Close())
	}
	if h.reg != nil {
		errs = append(errs, h.reg.Close(ctx))
	}
	if h.store != nil {
		errs = append(errs, h.store.Close())
	}
	if h.client != nil {
		if err := h.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if h.etcd != nil {
		errs = append(errs, h.etcd.Close())
	}
	h.state.Store(uint32(sdk.RuntimeStateStopped))
	err := errors.Join(errs...)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("rt: close within %v: %w", h.cfg.StopTimeout, err)
	}
	return err
}
