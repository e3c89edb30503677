// Package rt is the ZLink runtime: Start a node, and it serves the Spot types it registered
// and calls any object of its mesh through the [sdk.Client] it is.
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/admin"
	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/channel"
	"github.com/zlink-go/zlink/rt/internal/mesh"
	"github.com/zlink-go/zlink/rt/internal/observe"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/sdk"
)

// Host is a running node. It is an sdk.Client. Only Start makes a Host: the zero value is not
// a node, and its methods must not be called.
type Host struct {
	cfg     Config
	log     *slog.Logger
	etcd    *devetcd.Server // the embedded etcd, when this node started one
	client  *clientv3.Client
	store   *store.Etcd
	mesh    *mesh.Mesh
	reg     atomic.Pointer[store.Registration] // the current registration
	catalog *catalog.Catalog
	state   atomic.Uint32 // sdk.RuntimeState; changed through setState, which publishes it
	lc      lifecycle
	tel     *telemetry.Telemetry
	meter   *capacity.Meter
	// spots is the catalog once it exists, for the capacity figures, which a failure may read
	// while Start still runs.
	spots atomic.Pointer[catalog.Catalog]
	// stopGauges ends the capacity gauges at the shutdown.
	stopGauges func()
	// reregistrations counts the times the node registered again after its owner lease ended.
	reregistrations atomic.Int64

	stop chan struct{} // closed when the shutdown begins: ends the watchers
	// stopCtx ends with stop: what the watchers do against etcd does not hold up a shutdown.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	watchers   sync.WaitGroup
	// relocations is the relocation running, and the timer its end sets for SafeToShutdown; a
	// shutdown waits for them after the catalog's close, which waits for each Spot's unit under
	// way.
	relocations sync.WaitGroup
	// channels are the node's channel servers and subscribers; chans the hubs of the channels
	// observed.
	channels *channel.Registry
	chans    channelHubs
	// admin is the admin server, when Config.AdminAddr is set.
	admin *admin.Server
	// betweenReads, when set, runs between the two reads of each round of a relocation
	// (relocateAll): tests hold a round there.
	betweenReads atomic.Pointer[func()]
}

var _ sdk.Client = (*Host)(nil)

// Start starts a node: it connects to etcd (or starts an embedded one when no endpoints are
// configured), listens for peers, registers the node on an owner lease, registers the Spot
// types, makes the Entry Spots, joins the mesh and begins serving. Cancelling ctx aborts the
// start; everything started so far is stopped, within StopTimeout. A nil ctx is refused with
// an error wrapping sdk.ErrInvalidArgument, and nothing starts.
func Start(ctx context.Context, cfg Config) (_ *Host, err error) {
	if ctx == nil {
		return nil, errNilContext("Start")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	settings, err := capacity.Resolve(cfg.Inbound, cfg.MaxMessageSize)
	if err != nil {
		return nil, err // Validate has seen it
	}
	h := &Host{cfg: cfg, log: cfg.Logger.With("node", string(cfg.NodeID)), stop: make(chan struct{}), meter: capacity.New(settings)}
	h.stopCtx, h.stopCancel = context.WithCancel(context.Background())
	if cfg.ServerTLS == nil && !loopback(cfg.ListenAddr) {
		h.log.Warn("the node listens without TLS on a network address (InsecurePlaintext): anyone who reaches it can call, create and close any Spot",
			"listen", cfg.ListenAddr)
	}
	h.initLifecycle()
	defer func() {
		if err != nil {
			// Bounded as a shutdown is: a closing callback of a Spot that Start made, which does
			// not return, holds the failed start no longer than StopTimeout.
			tctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
			_, _ = h.teardown(tctx)
			cancel()
			h.state.Store(uint32(sdk.RuntimeStateStopped))
			h.closeAdmin(time.Time{})
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
		// Probe the connection so that a silently dead one (a blackholed endpoint) is noticed
		// and another endpoint dialled, instead of requests waiting on it.
		DialKeepAliveTime:    etcdKeepAliveTime,
		DialKeepAliveTimeout: etcdKeepAliveTimeout,
		TLS:                  withTLS13(cfg.EtcdTLS),
		Username:             cfg.EtcdUsername,
		Password:             cfg.EtcdPassword,
		Context:              context.WithoutCancel(ctx),
		Logger:               zap.NewNop(),
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
	h.channels = &types.Registry
	for _, sub := range h.channels.Subscribers() {
		sub.SetLogger(h.log)
	}
	server := cfg.Roles.Has(RoleObjectServer)
	h.tel, err = cfg.newTelemetry(ctx)
	if err != nil {
		return nil, err
	}
	h.mesh, err = mesh.Listen(mesh.Config{
		Node:         cfg.NodeID,
		ObjectServer: server,
		Transport: transport.Config{
			ListenAddr: cfg.ListenAddr, ServerTLS: withTLS13(cfg.ServerTLS), ClientTLS: withTLS13(cfg.ClientTLS),
			MaxMessageSize: cfg.MaxMessageSize, Dialer: cfg.Dialer, Logger: cfg.Logger, Meter: h.meter,
			OnServeFailure: func(err error) { h.fail(fmt.Errorf("peers can no longer reach the node: %w", err)) },
		},
		ReclaimInterval: cfg.LeaseTTL * 3,
		Logger:          cfg.Logger,
		Unhandled:       cfg.Unhandled,
		UnhandledHold:   cfg.OperationTimeout,
		Telemetry:       h.tel,
		Channels:        h.channels,
	})
	if err != nil {
		return nil, fmt.Errorf("rt: %w", err)
	}
	if err := h.listenAdmin(); err != nil {
		return nil, fmt.Errorf("rt: %w", err)
	}
	var hosted []string
	if server {
		hosted = types.Names()
	}
	// The first write to etcd is where an unreachable or misconfigured etcd (wrong TLS, wrong
	// credentials) shows: it gets EtcdDialTimeout twice over, not for ever.
	rctx, cancel := context.WithTimeout(ctx, 2*cfg.EtcdDialTimeout)
	defer cancel()
	reg, err := h.store.Register(rctx, &storepb.NodeDescriptor{
		NodeId:             string(cfg.NodeID),
		Roles:              uint32(cfg.Roles),
		ApplicationVersion: cfg.ApplicationVersion,
		State:              uint32(sdk.RuntimeStatePreparing),
		Weight:             cfg.Weight,
		MaxActive:          int64(cfg.MaxActiveObjects),
		SpotTypes:          hosted,
		MaintenanceWave:    cfg.MaintenanceWave,
		Endpoint:           h.mesh.Endpoint(),
		AdminUrl:           h.AdminURL(),
	}, h.leaseOptions(), mesh.Memberships(h.channels)...)
	if err != nil {
		return nil, fmt.Errorf("rt: etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	h.reg.Store(reg)
	h.catalog, err = catalog.New(catalog.Config{
		Node:                     cfg.NodeID,
		Exec:                     cfg.Exec,
		InstanceSpotIdleTimeout:  cfg.InstanceSpotIdleTimeout,
		MaxActive:                cfg.MaxActiveObjects,
		MaxActiveActors:          cfg.MaxActiveActors,
		MaxConcurrentActivations: cfg.MaxConcurrentActivations,
		OperationTimeout:         cfg.OperationTimeout,
		Logger:                   cfg.Logger,
		ClientOnly:               !server,
		Telemetry:                h.tel,
		Meter:                    h.meter,
	}, h.store, reg, types, spotClient{h})
	if err != nil {
		return nil, err
	}
	h.spots.Store(h.catalog)
	if err := h.catalog.Start(ctx); err != nil {
		return nil, err
	}
	if err := h.mesh.Start(ctx, h.store, reg, h.catalog, h.runtimeState); err != nil {
		return nil, fmt.Errorf("rt: join the mesh: %w", err)
	}
	if err := h.startServing(); err != nil {
		return nil, err
	}
	h.lc.mesh = observe.NewHub(h.mesh.Status(cfg.MeshName), lostMesh)
	h.watchers.Go(h.watchLease)
	h.watchers.Go(h.watchMeshStatus)
	h.watchers.Go(h.watchRuntimeStatus)
	h.watchers.Go(h.watchCapacity)
	h.stopGauges = h.tel.ObserveCapacity(func() telemetry.CapacityFigures {
		c := h.CapacityStatus()
		return telemetry.CapacityFigures{
			InboundBytes:  int64(c.CoreHwm.TotalMessagingAccountedBytes),
			InboundBudget: int64(c.CoreHwm.EffectiveBudgetBytes),
			JobPermits:    int64(c.ApplicationJobQueue.PermitsInUse),
		}
	})
	h.serveAdmin()
	return h, nil
}

// The etcd client's keep-alive probes (gRPC clamps the time to at least 10 s).
const (
	etcdKeepAliveTime    = 10 * time.Second
	etcdKeepAliveTimeout = 5 * time.Second
)

// drainPublishTimeout bounds the write that tells the peers the node is draining.
const drainPublishTimeout = time.Second

// revokeGrace bounds the lease revoke that Close makes after its deadline passed.
const revokeGrace = time.Second

func (h *Host) leaseOptions() store.LeaseOptions { return store.LeaseOptions{TTL: h.cfg.LeaseTTL} }

// watchLease keeps the node owning objects across the end of its owner lease (C1; DESIGN §4).
// When a lease ends — etcd says it is gone, or its guard ran out during a partition or a pause
// of the process — the catalog closes the Spots it owned with CloseOwnerLost, and this loop
// registers the node again on a new lease and returns it to creating and owning objects; the
// ended lease's records are reclaimed like those of any ended owner. Meanwhile the node keeps
// calling other nodes' objects, and its mesh status shows placement unavailable.
func (h *Host) watchLease() {
	for {
		reg := h.reg.Load()
		select {
		case <-h.stop:
			return
		case <-reg.Lost():
		}
		h.log.Error("the node's owner lease ended; it gives up the objects it owned and registers again", "cause", reg.Cause())
		next, ok := h.register(reg)
		if !ok {
			return
		}
		h.reg.Store(next)
		if err := h.catalog.Rebind(next); err != nil {
			h.fail(fmt.Errorf("the catalog did not take the node's new registration: %w", err))
			return
		}
		h.mesh.Rebind(next)
		h.reregistrations.Add(1)
		h.log.Info("the node registered again on a new owner lease and owns objects again")
	}
}

// register registers the node again after old's lease ended, retrying until it succeeds or
// the host closes. The old lease is revoked first, so that the node's ID is free at once when
// etcd still held it (the guard ran out before the server's lease did). A node ID that another
// process registered meanwhile is waited for only until that process has shown itself alive,
// its lease holding the ID through tries that etcd answered for twice its TTL: that process is the node now, and this one fails
// (an Orleans silo declared dead stops too); it keeps calling other nodes' objects until it is
// shut down. A process that ends sooner, or never kept its lease alive, leaves the ID to this
// one.
func (h *Host) register(old *store.Registration) (*store.Registration, bool) {
	backoff := 100 * time.Millisecond
	var heldBy int64 // the other process's lease that holds the node ID, since heldSince
	var heldSince time.Time
	for {
		rctx, cancel := context.WithTimeout(h.stopCtx, h.cfg.EtcdDialTimeout)
		_ = old.Close(rctx)
		_ = old.Revoke(rctx) // every try: the first one usually met the outage that ended the lease
		desc := old.Descriptor()
		desc.State = uint32(h.runtimeState())
		desc.Active = 0
		next, err := h.store.Register(rctx, desc, h.leaseOptions(), old.Channels()...)
		cancel()
		if err == nil {
			return next, true
		}
		if taken := (*store.NodeIDInUseError)(nil); !errors.As(err, &taken) {
			// An outage in between proves nothing: a new etcd leader renews every lease once.
			heldBy = 0
		} else if taken.Lease != heldBy {
			heldBy, heldSince = taken.Lease, time.Now()
		} else if time.Since(heldSince) > 2*max(taken.TTL, h.cfg.LeaseTTL) {
			h.fail(fmt.Errorf("its owner lease ended, and another live process registered its node ID meanwhile; it cannot own objects again: %w", err))
			return nil, false
		}
		h.log.Warn("registering the node again failed; it is tried again", "err", err)
		select {
		case <-h.stop:
			return nil, false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, h.cfg.LeaseTTL)
	}
}

func (h *Host) runtimeState() sdk.RuntimeState { return sdk.RuntimeState(h.state.Load()) }

// LocalNode implements sdk.Client.
func (h *Host) LocalNode() sdk.NodeID { return h.cfg.NodeID }

// EtcdEndpoints returns the etcd endpoints the node uses; with the embedded default, other
// nodes can join the mesh by using them.
func (h *Host) EtcdEndpoints() []string { return h.client.Endpoints() }

// endpoint is the address peers dial to reach this node: internal (F13), tests reach it.
func (h *Host) endpoint() string { return h.mesh.Endpoint() }

// errNilContext refuses call, made with a nil context, before it does anything: never a panic
// on a caller's input.
func errNilContext(call string) error {
	return fmt.Errorf("%w: %s needs a context, got nil (context.Background() when there is none)", sdk.ErrInvalidArgument, call)
}

func (h *Host) serving() error {
	if s := h.runtimeState(); s != sdk.RuntimeStateServing {
		return fmt.Errorf("%w: node %s is %s", sdk.ErrNotServing, h.cfg.NodeID, s)
	}
	return nil
}

// Call implements sdk.Client.
func (h *Host) Call(ctx context.Context, t sdk.Target, method string, req proto.Message, opts ...sdk.CallOption) (proto.Message, error) {
	if ctx == nil {
		return nil, errNilContext("Call")
	}
	if err := h.serving(); err != nil {
		return nil, err
	}
	return h.mesh.Call(ctx, t, method, req, sdk.ApplyCallOptions(opts))
}

// Send implements sdk.Client.
func (h *Host) Send(ctx context.Context, t sdk.Target, method string, msg proto.Message, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("Send")
	}
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.Send(ctx, t, method, msg, sdk.ApplyCallOptions(opts))
}

// Create implements sdk.Client.
func (h *Host) Create(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("Create")
	}
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.Create(ctx, t, sdk.ApplyCallOptions(opts))
}

// CloseSpot implements sdk.Client.
func (h *Host) CloseSpot(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("CloseSpot")
	}
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.CloseSpot(ctx, t, sdk.ApplyCallOptions(opts))
}

// MoveActor implements sdk.Client.
func (h *Host) MoveActor(ctx context.Context, actor, to sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("MoveActor")
	}
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.MoveActor(ctx, actor, to, sdk.ApplyCallOptions(opts))
}

// spotClient is the Client that Spots get: the node's own traffic, which keeps flowing while
// the node drains (a closing callback may still call its node's Entry Spot), where the Host
// refuses new operations from outside.
type spotClient struct{ h *Host }

func (c spotClient) Call(ctx context.Context, t sdk.Target, method string, req proto.Message, opts ...sdk.CallOption) (proto.Message, error) {
	if ctx == nil {
		return nil, errNilContext("Call")
	}
	return c.h.mesh.Call(ctx, t, method, req, sdk.ApplyCallOptions(opts))
}

func (c spotClient) Send(ctx context.Context, t sdk.Target, method string, msg proto.Message, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("Send")
	}
	return c.h.mesh.Send(ctx, t, method, msg, sdk.ApplyCallOptions(opts))
}

func (c spotClient) Create(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("Create")
	}
	return c.h.mesh.Create(ctx, t, sdk.ApplyCallOptions(opts))
}

func (c spotClient) CloseSpot(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("CloseSpot")
	}
	return c.h.mesh.CloseSpot(ctx, t, sdk.ApplyCallOptions(opts))
}

func (c spotClient) MoveActor(ctx context.Context, actor, to sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("MoveActor")
	}
	return c.h.mesh.MoveActor(ctx, actor, to, sdk.ApplyCallOptions(opts))
}

func (c spotClient) LocalNode() sdk.NodeID { return c.h.cfg.NodeID }

// MeshStatus returns the RouteMesh status of the node's mesh. The status is the caller's own:
// writing to its slices or to what its pointers point to changes what no other caller or
// observer sees, nor the status's next Sequence.
func (h *Host) MeshStatus() sdk.RouteMeshStatus { return ownMeshStatus(h.mesh.Status(h.cfg.MeshName)) }

// catalogStats and transportStats are the runtime's internal counters (F13); tests reach them
// through export_test.go.
func (h *Host) catalogStats() catalog.Stats { return h.catalog.Stats() }

func (h *Host) transportStats() transport.Stats { return h.mesh.Transport().Stats() }

// teardown stops, in reverse order, whatever Start got to. It reports whether ctx had
// ended by the end of the last step that ctx bounds (expired): the steps after it (the mesh's
// close, the lease's revoke) may outlast ctx by design.
func (h *Host) teardown(ctx context.Context) (expired bool, err error) {
	h.setState(sdk.RuntimeStateDraining)
	if h.lc.mesh != nil {
		// F8: peers see the node draining and place nothing more on it, before its Spots close.
		pctx, cancel := context.WithTimeout(ctx, drainPublishTimeout)
		if err := h.mesh.Publish(pctx); err != nil {
			h.log.Warn("could not tell the peers that the node is draining; they learn it when it leaves", "err", err)
		}
		cancel()
		h.publishMesh()
	}
	close(h.stop)
	h.stopCancel()
	h.watchers.Wait()
	if h.stopGauges != nil {
		h.stopGauges()
	}
	// F9: a Spot whose relocation unit is under way closes once the unit decided (the close
	// waits for it, the other Spots close meanwhile); the relocation starts no other unit.
	var errs []error
	if h.catalog != nil {
		errs = append(errs, h.catalog.Close(ctx))
	}
	h.relocations.Wait()
	if h.channels != nil {
		// Channel handlers under way finish within the deadline; publications still queued are
		// dropped (at most once).
		errs = append(errs, h.channels.Close(ctx))
	}
	expired = ctx.Err() != nil
	if h.mesh != nil {
		errs = append(errs, h.mesh.Close())
	}
	if reg := h.reg.Load(); reg != nil {
		// Revoked even after the deadline, for a second at most: the records left behind are
		// reclaimed as soon as the lease is gone, rather than a TTL later.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(h.cfg.EtcdDialTimeout, revokeGrace))
		errs = append(errs, reg.Close(rctx))
		cancel()
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
	return expired, errors.Join(errs...)
}
