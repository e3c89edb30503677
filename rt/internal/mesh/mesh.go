// Package mesh turns nodes into a system (digest B, C, D6, G2–G5; DESIGN §4 routing): it
// keeps the membership from the Location Store, connects to peers, places new Spots among the
// Object Servers by weight, routes every call to the Spot's owner through a Ready-only route
// cache, admits peers' requests only where this node owns the Spot, reclaims the objects of
// dead owners and reports the RouteMesh status.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/channel"
	"github.com/zlink-go/zlink/rt/internal/gopool"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Role bits of a node descriptor.
const (
	RoleObjectServer uint32 = 1
	RoleObjectClient uint32 = 2
)

// Config configures a node's part in the mesh.
type Config struct {
	// Node is this node's ID.
	Node sdk.NodeID
	// ObjectServer marks a node that hosts Spots; a node without it only calls.
	ObjectServer bool
	// Transport configures the connections to peers.
	Transport transport.Config
	// RouteCacheSize bounds the Ready-only route cache (default 65,536 routes).
	RouteCacheSize int
	// ReclaimInterval is the longest time between reclaim passes; a peer's end starts one at
	// once (default 30 s).
	ReclaimInterval time.Duration
	// PublishInterval is how often the node publishes its active-object count for placement
	// (default 1 s).
	PublishInterval time.Duration
	// MaxSlowRequests bounds the peers' requests that may wait on the store at once: creations,
	// closes, and calls to Spots being created or closed (default 256).
	MaxSlowRequests int
	// Logger receives the mesh's logs (default slog.Default()).
	Logger *slog.Logger
	// Unhandled is the node's unhandled-message policy (I1).
	Unhandled sdk.UnhandledDispatchOptions
	// UnhandledHold bounds how long a dropped request waits for the reply it never gets, when
	// its context does not end sooner (default 30 s).
	UnhandledHold time.Duration
	// Telemetry records this node's callers' operations (nil: none).
	Telemetry *telemetry.Telemetry
	// Channels are the node's channel servers and subscribers (nil: none).
	Channels *channel.Registry
}

func (c Config) withDefaults() Config {
	if c.RouteCacheSize <= 0 {
		c.RouteCacheSize = 1 << 16
	}
	if c.ReclaimInterval <= 0 {
		c.ReclaimInterval = 30 * time.Second
	}
	if c.PublishInterval <= 0 {
		c.PublishInterval = time.Second
	}
	if c.MaxSlowRequests <= 0 {
		c.MaxSlowRequests = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Channels == nil {
		c.Channels = &channel.Registry{}
	}
	if c.UnhandledHold <= 0 {
		c.UnhandledHold = 30 * time.Second
	}
	c.Transport.Node = c.Node
	if c.Transport.DialTimeout <= 0 {
		c.Transport.DialTimeout = 5 * time.Second
	}
	if c.Transport.Logger == nil {
		c.Transport.Logger = c.Logger
	}
	return c
}

// Mesh is this node's part in the mesh.
type Mesh struct {
	cfg Config
	log *slog.Logger
	tr  *transport.Transport

	// Set by Start.
	store   *store.Etcd
	reg     atomic.Pointer[store.Registration] // the node's current registration
	cat     *catalog.Catalog
	state   func() sdk.RuntimeState
	started atomic.Bool

	routes routeCache

	mu      sync.RWMutex
	members map[sdk.NodeID]store.Node
	seen    revisionGate // the membership revision applied so far

	status   statusTracker
	channels channelTable

	unhandledCount unhandledCounters

	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	reclaimKick chan struct{}
	slowSlots   chan struct{} // a place for each peer's request that may wait on the store
	slowPool    *gopool.Pool  // runs those requests; closed after wg's wait
	publishing  chan struct{} // held while the node's descriptor is written: one writer at a time
	held        atomic.Int64  // peers' dropped requests whose replies are withheld now
	closeOnce   sync.Once
}

// Listen starts the transport, so that the node can publish its endpoint before it
// registers. Requests that arrive before Start are answered with sdk.ErrNotServing.
func Listen(cfg Config) (*Mesh, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mesh{
		cfg: cfg, log: cfg.Logger.With("node", string(cfg.Node)),
		members: make(map[sdk.NodeID]store.Node), ctx: ctx, cancel: cancel,
		reclaimKick: make(chan struct{}, 1), slowSlots: make(chan struct{}, cfg.MaxSlowRequests),
		slowPool: gopool.New(0, 0), publishing: make(chan struct{}, 1),
	}
	m.routes.init(cfg.RouteCacheSize)
	tr, err := transport.New(cfg.Transport, m)
	if err != nil {
		cancel()
		return nil, err
	}
	m.tr = tr
	return m, nil
}

// Endpoint is the address peers dial.
func (m *Mesh) Endpoint() string { return m.tr.Addr() }

// Transport is the node's transport.
func (m *Mesh) Transport() *transport.Transport { return m.tr }

// Start joins the mesh: it loads the membership and watches it, connects to the peers that
// need a connection (G4), and starts the reclaimer and the publication of the node's load.
// state reports the host's runtime state.
func (m *Mesh) Start(ctx context.Context, st *store.Etcd, reg *store.Registration, cat *catalog.Catalog, state func() sdk.RuntimeState) error {
	nodes, rev, chanRev, err := m.join(ctx, st, reg, cat, state)
	if err != nil {
		return err
	}
	m.watchChannels(chanRev)
	m.watchMembership(rev)
	m.awaitPeers(ctx, nodes)
	if m.cfg.ObjectServer {
		m.wg.Go(m.reclaimLoop)
	}
	m.wg.Go(m.publishLoop)
	return nil
}

// join loads the channel memberships and the membership, as of the returned revisions, and
// connects to the nodes that need a connection. The channels come first: they say which
// nodes do (G4).
func (m *Mesh) join(ctx context.Context, st *store.Etcd, reg *store.Registration, cat *catalog.Catalog, state func() sdk.RuntimeState) ([]store.Node, int64, int64, error) {
	m.store, m.cat, m.state = st, cat, state
	m.reg.Store(reg)
	cat.SetNudger(m.nudge)
	cat.SetPeers(actorPeers{m})
	chanRev, err := m.joinChannels(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	nodes, rev, err := st.Nodes(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	for _, n := range nodes {
		m.apply(store.NodeEvent{Node: n})
	}
	m.seen.advance(rev)
	m.started.Store(true)
	return nodes, rev, chanRev, nil
}

// watchMembership applies the membership changes after rev until the mesh closes.
func (m *Mesh) watchMembership(rev int64) {
	m.wg.Go(func() {
		_ = m.store.WatchNodes(m.ctx, rev, func(ev store.NodeEvent) {
			m.apply(ev)
			m.seen.advance(ev.Revision)
		})
	})
}

// awaitPeers waits, for at most the dial timeout, until every peer this node must connect to
// is connected or has failed once, so that a node serves with its routes in place instead of
// answering "unreachable" for its first calls.
func (m *Mesh) awaitPeers(ctx context.Context, nodes []store.Node) {
	deadline := time.Now().Add(m.cfg.Transport.DialTimeout)
	for _, n := range nodes {
		if n.ID == m.cfg.Node || !m.needsConnection(n) {
			continue
		}
		for !m.tr.Settled(n.ID) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// apply takes one membership report. A resync is compared with the members known: only the
// nodes that left, or registered again, lose their link and routes, so that a watch that lost
// its history does not disconnect a mesh that did not change. A progress notification changes
// nothing here; the watcher advances the revision gate with it.
func (m *Mesh) apply(ev store.NodeEvent) {
	// live applies n, listed as live, given what was known of it before.
	live := func(n, prev store.Node, had bool) {
		if n.ID == m.cfg.Node {
			return
		}
		switch {
		case !had:
			m.log.Debug("a node joined the mesh", "peer", string(n.ID), "endpoint", n.Desc.GetEndpoint())
		case prev.Lease != n.Lease:
			// The same ID registered again: the old registration ended, so its routes are stale
			// and its records are to be reclaimed. The link is the process's, not the lease's:
			// it stays while the endpoint does.
			m.routes.dropOwner(n.ID)
			m.kickReclaim()
		}
		if m.needsConnection(n) && n.Desc.GetEndpoint() != "" {
			// A link to the same endpoint is kept as it is; a changed endpoint is dialled anew.
			m.tr.Connect(n.ID, n.Desc.GetEndpoint())
		}
	}
	switch {
	case ev.Progress:
	case ev.Resync:
		members := make(map[sdk.NodeID]store.Node, len(ev.Snapshot))
		for _, n := range ev.Snapshot {
			members[n.ID] = n
		}
		m.mu.Lock()
		old := m.members
		m.members = members
		m.mu.Unlock()
		for id := range old {
			if _, ok := members[id]; !ok {
				m.nodeGone(id)
			}
		}
		for _, n := range ev.Snapshot {
			prev, had := old[n.ID]
			live(n, prev, had)
		}
	case ev.Gone:
		m.mu.Lock()
		delete(m.members, ev.Node.ID)
		m.mu.Unlock()
		m.nodeGone(ev.Node.ID)
	default:
		m.mu.Lock()
		prev, had := m.members[ev.Node.ID]
		m.members[ev.Node.ID] = ev.Node
		m.mu.Unlock()
		live(ev.Node, prev, had)
	}
}

// awaitMember waits until the membership watch has applied node's registration, for a node
// this node learnt of from a Spot record before the watch reported it. It fails with
// sdk.ErrOwnerUnavailable when node is not registered, or is not reported within the dial
// timeout; with ctx's error when ctx ends first. A node that left costs one read here per call
// until its records are reclaimed.
func (m *Mesh) awaitMember(ctx context.Context, node sdk.NodeID) error {
	if !m.started.Load() {
		return fmt.Errorf("%w: node %s: this node has not joined the mesh yet", sdk.ErrOwnerUnavailable, node)
	}
	wctx, cancel := context.WithTimeout(ctx, m.cfg.Transport.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(m.ctx, cancel) // the mesh closing ends the wait too
	defer stop()
	n, ok, err := m.store.Node(wctx, node)
	if err == nil && !ok {
		return fmt.Errorf("%w: node %s is not in the mesh", sdk.ErrOwnerUnavailable, node)
	}
	if err == nil {
		err = m.seen.wait(wctx, n.Revision)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return fmt.Errorf("%w: node %s is not connected yet: %v", sdk.ErrOwnerUnavailable, node, err)
	}
}

// nodeGone forgets a node whose lease ended: its routes and its connection go, and its
// records are reclaimed (DESIGN §4 failover policy).
func (m *Mesh) nodeGone(id sdk.NodeID) {
	if id == m.cfg.Node {
		return
	}
	m.log.Debug("a node left the mesh", "peer", string(id))
	m.routes.dropOwner(id)
	m.tr.Disconnect(id)
	m.kickReclaim()
}

// nudge asks owner, off the caller's goroutine, to reconcile its record of key (B8): this node
// waited on it, Creating or Releasing, for longer than a creation or a close takes.
func (m *Mesh) nudge(_ context.Context, owner sdk.NodeID, key store.SpotKey) {
	m.wg.Go(func() {
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.Transport.DialTimeout)
		defer cancel()
		req := &wire.Request{Op: wire.Op_OP_RECONCILE, Kind: uint32(sdk.KindInstance), Type: key.Type, Id: key.ID}
		if typ := m.cat.TypeDesc(key.Type); typ != nil {
			req.Kind = uint32(typ.Kind)
		}
		if _, err := m.tr.Call(ctx, owner, req); err != nil {
			m.log.Debug("could not ask a node to check its record", "peer", string(owner), "spot", key.Type, "id", key.ID, "err", err)
		}
	})
}

// kickReclaim starts a reclaim pass soon: an owner ended.
func (m *Mesh) kickReclaim() {
	select {
	case m.reclaimKick <- struct{}{}:
	default:
	}
}

// needsConnection applies G4: two nodes of which neither is an Object Server nor holds a
// channel membership that others send to (a server, weight 0 included, or a subscriber) need
// no connection; a channel client's or a publisher's membership counts as none.
func (m *Mesh) needsConnection(peer store.Node) bool {
	return m.cfg.ObjectServer || peer.Desc.GetRoles()&RoleObjectServer != 0 ||
		m.localServerLike() || m.channels.serverLike(peer.ID)
}

// sortedMembers returns a snapshot of the membership in node ID order.
func (m *Mesh) sortedMembers() []store.Node {
	m.mu.RLock()
	out := make([]store.Node, 0, len(m.members))
	for _, n := range m.members {
		out = append(out, n)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.Node) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// reclaimLoop releases the records of dead owners when a peer goes and every ReclaimInterval.
func (m *Mesh) reclaimLoop() {
	ticker := time.NewTicker(m.cfg.ReclaimInterval)
	defer ticker.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-ticker.C:
		case <-m.reclaimKick:
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.ReclaimInterval)
		stats, err := m.store.Reclaim(ctx, m.reg.Load().Owner())
		cancel()
		switch {
		case err != nil && m.ctx.Err() == nil:
			m.log.Warn("reclaim failed; it is tried again", "err", err)
		case stats.Released > 0 || stats.DeadIncarnations > 0:
			m.log.Info("reclaimed the objects of ended owners", "registrations", stats.DeadIncarnations, "released", stats.Released)
		}
	}
}

// publishLoop keeps the node's descriptor current: runtime state and active objects, which
// placement reads (D6).
func (m *Mesh) publishLoop() {
	ticker := time.NewTicker(m.cfg.PublishInterval)
	defer ticker.Stop()
	var lastActive int64 = -1
	var lastState = sdk.RuntimeState(255)
	var lastReg *store.Registration
	for {
		select {
		case m.publishing <- struct{}{}:
		case <-m.ctx.Done():
			return
		}
		// Read under the same turn as Publish, so that a Serving written here never lands
		// after the Draining that Publish wrote.
		active, state, reg := m.cat.ActiveOwned(), m.state(), m.reg.Load()
		if (active != lastActive || state != lastState || reg != lastReg) && !reg.Guard().Lost() {
			desc := reg.Descriptor()
			desc.Active, desc.State = active, uint32(state)
			ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
			if err := reg.Update(ctx, desc); err == nil {
				lastActive, lastState, lastReg = active, state, reg
			} else if m.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				m.log.Warn("could not publish the node's descriptor", "err", err)
			}
			cancel()
		}
		<-m.publishing
		select {
		case <-m.ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Publish writes the node's descriptor now, with its current runtime state and active count: a
// node that starts draining tells its peers at once, not at the next PublishInterval, so that
// they stop placing objects on it.
func (m *Mesh) Publish(ctx context.Context) error {
	select {
	case m.publishing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-m.publishing }()
	reg := m.reg.Load()
	if reg == nil {
		return nil
	}
	desc := reg.Descriptor()
	desc.Active, desc.State = m.cat.ActiveOwned(), uint32(m.state())
	return reg.Update(ctx, desc)
}

// Rebind makes reg, a new registration of this node after its previous owner lease ended, the
// one the mesh publishes and reclaims with, and starts a reclaim: the previous registration's
// records are released like those of any ended owner, and then created afresh on demand.
func (m *Mesh) Rebind(reg *store.Registration) {
	m.reg.Store(reg)
	m.rejoinPublishers()
	m.kickReclaim()
}

// Close leaves the mesh: background work stops and the connections close. Safe to call more
// than once.
func (m *Mesh) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		// Requests that wait for a slot to be resolved are refused now; the transport answers
		// what its streams took in, for a second at most, and then ends the streams' contexts,
		// which ends the requests still being resolved.
		_ = m.tr.Close()
		m.wg.Wait()
		m.slowPool.Close()
	})
	return nil
}

// errNoDecoder: a reply cannot be decoded without the type's descriptor.
func errNoDecoder(t sdk.Target, method string) error {
	return fmt.Errorf("%w: cannot decode the reply of %s.%s on node without the type: call it through generated code (which carries the descriptor) or register the type",
		sdk.ErrUnhandled, t.Type(), method)
}
