// Package catalog holds the activations of one node (digest A–E): the three Spot kinds as
// three types, the activation state machine that hands each resolver answer to exactly one
// component, creation that runs a factory once per object however many callers race, close
// transactions, idle cleanup, the active-object cap and Spot timers.
//
// The catalog is the runtime's object catalog of D1 (ZLinkSpotNodeCatalog in the .NET
// mapping): it owns idle cleanup.
package catalog

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

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/channel"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/gopool"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/sdk"
)

// MaxScanCandidates is the most Spots one idle scan examines (D1).
const MaxScanCandidates = 64

// Config configures a Catalog.
type Config struct {
	// Node is this node's ID.
	Node sdk.NodeID
	// Exec bounds every activation's two lanes (E2, E4).
	Exec exec.Config
	// InstanceSpotIdleTimeout evicts an Instance Spot once no application work has run for it
	// and none is pending (D1, D2). Zero: DefaultInstanceSpotIdleTimeout, as in rt.Config.
	// Negative: no idle eviction, unless a type sets its own timeout.
	InstanceSpotIdleTimeout time.Duration
	// IdleScanInterval is the time between idle scans (default: a quarter of the shortest idle
	// timeout in force on the node, a type's own or the node's, between 10 ms and 10 s).
	IdleScanInterval time.Duration
	// MaxActive caps the User and Instance Spots active or being created on this node (D6).
	// Zero: no cap.
	MaxActive int
	// MaxActiveActors caps the Actors active on this node, those that arrive by a move
	// included (D6). Zero: no cap.
	MaxActiveActors int
	// MaxConcurrentActivations bounds the creations that run at once; more wait their turn
	// (default 64).
	MaxConcurrentActivations int
	// OperationTimeout bounds a creation or a close once started: a caller's cancellation ends
	// only its own wait, never a shared operation (default 30 s). A factory, OnActivate or
	// closing callback that does not return within it is left behind: the creation fails, the
	// close goes on without it.
	OperationTimeout time.Duration
	// Logger receives the catalog's logs (default: slog.Default()).
	Logger *slog.Logger
	// ClientOnly marks a node without the Object Server role: it makes no Entry Spots and
	// creates nothing.
	ClientOnly bool
	// Telemetry records the turns, activations and closes of this node's Spots (nil: none).
	Telemetry *telemetry.Telemetry
	// Meter accounts the node's capacity: the application job queue's permits and the Core
	// HWM bytes of peers' messages in lanes (nil: none).
	Meter *capacity.Meter
}

// DefaultInstanceSpotIdleTimeout is how long an Instance Spot stays without work before it is
// evicted, unless its type or the node says otherwise (D1).
const DefaultInstanceSpotIdleTimeout = 10 * time.Minute

func (c Config) withDefaults() Config {
	if c.InstanceSpotIdleTimeout == 0 {
		c.InstanceSpotIdleTimeout = DefaultInstanceSpotIdleTimeout
	}
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = 30 * time.Second
	}
	if c.MaxConcurrentActivations <= 0 {
		c.MaxConcurrentActivations = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if err := c.Node.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Exec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxActive < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxActive must not be negative, got %d", sdk.ErrConfig, c.MaxActive))
	}
	if c.MaxActiveActors < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxActiveActors must not be negative, got %d", sdk.ErrConfig, c.MaxActiveActors))
	}
	return errors.Join(errs...)
}

// spotType is one registered Spot or Actor type.
type spotType struct {
	desc         *sdk.SpotDesc
	factory      sdk.Factory      // a Spot type's
	actorFactory sdk.ActorFactory // an Actor type's
	opts         sdk.TypeOptions
	methods      map[string]typeMethod
}

// typeMethod is one method of a registered type, with the full name of its request message.
type typeMethod struct {
	desc    *sdk.MethodDesc
	request protoreflect.FullName
}

// check refuses req unless it is the method's request message.
func (m typeMethod) check(typ string, req proto.Message) error {
	if got := req.ProtoReflect().Descriptor().FullName(); got != m.request {
		return fmt.Errorf("%w: %s.%s takes %s, got %s", sdk.ErrInvalidArgument, typ, m.desc.Name, m.request, got)
	}
	return nil
}

// idleTimeout is the type's idle timeout: its registration option, else its descriptor's
// (the `idle=` annotation), else the node's default; ≤ 0 disables eviction.
func (t *spotType) idleTimeout(nodeDefault time.Duration) time.Duration {
	if d := t.opts.IdleTimeout; d != 0 {
		return d
	}
	if d := t.desc.IdleTimeout; d != 0 {
		return d
	}
	return nodeDefault
}

// Bounds of the idle scan's default interval.
const (
	minIdleScanInterval = 10 * time.Millisecond
	maxIdleScanInterval = 10 * time.Second
)

// idleScanInterval is the default time between idle scans: a quarter of the shortest idle
// timeout in force among the Instance types, each its own or the node's default, so that a type
// that declares a short timeout is evicted at its own pace and not at the default's (D1).
func idleScanInterval(types map[string]*spotType, nodeDefault time.Duration) time.Duration {
	shortest := time.Duration(0)
	for _, t := range types {
		if t.desc.Kind != sdk.KindInstance {
			continue
		}
		if d := t.idleTimeout(nodeDefault); d > 0 && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	if shortest == 0 {
		shortest = nodeDefault // no Instance type is evicted: the scan does not run
	}
	return min(max(shortest/4, minIdleScanInterval), maxIdleScanInterval)
}

// Types is the set of registered Spot types: an sdk.Registrar before the catalog starts,
// read-only after.
type Types struct {
	// Registry takes the node's channel servers and subscribers, which the mesh serves.
	channel.Registry

	mu     sync.Mutex
	frozen bool
	byName map[string]*spotType
	order  []*spotType
}

var _ sdk.Registrar = (*Types)(nil)

// RegisterSpot implements sdk.Registrar.
func (ts *Types) RegisterSpot(desc *sdk.SpotDesc, factory sdk.Factory, opts ...sdk.TypeOption) error {
	if desc == nil || factory == nil {
		return fmt.Errorf("%w: RegisterSpot needs a descriptor and a factory", sdk.ErrInvalidArgument)
	}
	if err := sdk.ValidateTypeName(desc.Name); err != nil {
		return fmt.Errorf("register spot: %w", err)
	}
	if desc.Kind == sdk.KindActor {
		return fmt.Errorf("%w: %s is an Actor type: register it with RegisterActor", sdk.ErrInvalidArgument, desc.Name)
	}
	if !desc.Kind.IsSpot() {
		return fmt.Errorf("%w: spot type %s has kind %s", sdk.ErrInvalidArgument, desc.Name, desc.Kind)
	}
	t := &spotType{desc: desc, factory: factory, opts: sdk.ApplyTypeOptions(opts)}
	if (t.opts.IdleTimeout != 0 || desc.IdleTimeout != 0) && desc.Kind != sdk.KindInstance {
		return fmt.Errorf("%w: spot type %s: only Instance Spots are idle-evicted (D7), it is %s", sdk.ErrInvalidArgument, desc.Name, desc.Kind)
	}
	return ts.add(t)
}

// RegisterActor implements sdk.Registrar.
func (ts *Types) RegisterActor(desc *sdk.SpotDesc, factory sdk.ActorFactory, opts ...sdk.TypeOption) error {
	if desc == nil || factory == nil {
		return fmt.Errorf("%w: RegisterActor needs a descriptor and a factory", sdk.ErrInvalidArgument)
	}
	if err := sdk.ValidateTypeName(desc.Name); err != nil {
		return fmt.Errorf("register actor: %w", err)
	}
	if desc.Kind != sdk.KindActor {
		return fmt.Errorf("%w: %s is a %s Spot type: register it with RegisterSpot", sdk.ErrInvalidArgument, desc.Name, desc.Kind)
	}
	t := &spotType{desc: desc, actorFactory: factory, opts: sdk.ApplyTypeOptions(opts)}
	if t.opts.IdleTimeout != 0 || desc.IdleTimeout != 0 {
		return fmt.Errorf("%w: actor type %s: an Actor is never idle-evicted on its own; its Spot is", sdk.ErrInvalidArgument, desc.Name)
	}
	return ts.add(t)
}

// add checks t's methods and registers it under its name, which Spot and Actor types share.
func (ts *Types) add(t *spotType) error {
	desc := t.desc
	if err := sdk.ValidateMethods(desc.Methods); err != nil {
		return fmt.Errorf("%w: %s type %s: %w", sdk.ErrInvalidArgument, desc.Kind, desc.Name, err)
	}
	if p := t.opts.Relocation; p != sdk.RelocationRecreate && p != sdk.RelocationPin {
		return fmt.Errorf("%w: %s type %s: unknown relocation policy %d", sdk.ErrInvalidArgument, desc.Kind, desc.Name, p)
	}
	t.methods = make(map[string]typeMethod, len(desc.Methods))
	for i := range desc.Methods {
		m := &desc.Methods[i]
		// ValidateMethods has seen NewRequest make a message without panicking.
		request := m.NewRequest().ProtoReflect().Descriptor().FullName()
		t.methods[m.Name] = typeMethod{desc: m, request: request}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.frozen {
		return fmt.Errorf("%w: %s type %s registered after the node started", sdk.ErrInvalidArgument, desc.Kind, desc.Name)
	}
	if ts.byName == nil {
		ts.byName = make(map[string]*spotType)
	}
	if _, dup := ts.byName[desc.Name]; dup {
		return fmt.Errorf("%w: type %s is registered twice", sdk.ErrInvalidArgument, desc.Name)
	}
	ts.byName[desc.Name] = t
	ts.order = append(ts.order, t)
	return nil
}

// Names returns the registered type names in registration order.
func (ts *Types) Names() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	names := make([]string, len(ts.order))
	for i, t := range ts.order {
		names[i] = t.desc.Name
	}
	return names
}

// Has reports whether a type named name is registered.
func (ts *Types) Has(name string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	_, ok := ts.byName[name]
	return ok
}

// Catalog holds the activations of one node.
type Catalog struct {
	cfg    Config
	store  store.Store
	reg    atomic.Pointer[store.Registration] // the registration new Spots are owned under
	types  map[string]*spotType
	client sdk.Client
	log    *slog.Logger
	tel    *telemetry.Telemetry
	// stopGauge ends the active-Spots gauge at Close.
	stopGauge func()

	ctx    context.Context // cancelled by Close: ends timers and background work
	cancel context.CancelFunc
	// hardCtx bounds the shared operations (creations, closes); it is cancelled when Close
	// runs out of time, so that nothing waits on after a forced stop.
	hardCtx    context.Context
	hardCancel context.CancelFunc
	bg         group
	// creations are the creations under way, among the background work: Close closes the
	// Spots they made late once they have ended, whatever other work goes on.
	creations sync.WaitGroup
	// builders run factories and OnActivate; a creation or a spawn waits for one only as long
	// as its OperationTimeout, and Close only briefly.
	builders builders
	// actorFactories holds a place for each Actor factory running now (constructActor).
	actorFactories chan struct{}
	// units are the relocation units under way (RelocateSpot), until they end.
	units sync.WaitGroup

	suspects suspects // keys whose record and activation may disagree
	mu       sync.Mutex
	nudger   func(ctx context.Context, owner sdk.NodeID, key store.SpotKey) // set by the mesh

	entries map[string]*entrySpot // by type name; fixed after Start
	slots   shards[*slot]
	cache   spotCache // of slots' Spots, for messages
	holders holders   // activations whose runners hold job permits of ended jobs back
	// active counts User and Instance Spots that are active or being created (D6).
	active atomic.Int64
	// activating holds a place for each creation running now.
	activating chan struct{}
	idle       idleList
	stats      stats

	actors     shards[*actor] // the Actors on this node
	actorCount atomic.Int64   // Actors active or arriving here (G3)
	// spawning holds the keys of the Actors that a spawn on this node is bringing up, or whose
	// records it releases in the background (releaseOrphan): a second spawn of such a key here
	// waits for neither, and the release never meets a spawn of its key here.
	spawning sync.Map // spotKey -> keyHold
	// releasesWaiting counts, by key, the releases in the background that wait for a key that
	// another holds: no spawn takes it before them.
	waitingMu       sync.Mutex
	releasesWaiting map[spotKey]int
	departures      departures
	peers           Peers // set by the mesh: how a move reaches another node
	// arrivals are the Spots relocation units are bringing here, until they settle or abort.
	arrivalsMu     sync.Mutex
	arrivals       map[spotKey]*arrival
	arrivalsClosed bool // the node closed: it takes no arrival

	closeOnce sync.Once
	stopping  atomic.Bool // Close began: nothing new is created or admitted
	// relocating: the node's relocation runs: it creates, spawns and receives nothing (F2).
	relocating atomic.Bool
	// entering counts the creations, spawns and arrivals past their check of relocating that
	// have not yet shown themselves (a slot being created, a member arriving): with those, what
	// a relocation must wait for before it finds nothing left to move (Unsettled). An Actor's
	// is counted only after its factory, which checks relocating again.
	entering atomic.Int64
	closed   chan struct{}
}

// slot is this node's state of one User or Instance Spot.
type slot struct {
	creating *creation // set while this node creates the Spot
	spot     ownedSpot // set once the Spot is Ready here, until its close completes
}

// New returns a catalog for the registration reg. It takes ownership of nothing: the store
// and the registration stay the caller's. client is what Spots get as SpotContext.Client.
func New(cfg Config, st store.Store, reg *store.Registration, types *Types, client sdk.Client) (*Catalog, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st == nil || reg == nil || types == nil {
		return nil, errors.New("catalog: a store, a registration and types are required")
	}
	if reg.Owner().Node != cfg.Node {
		return nil, fmt.Errorf("catalog: registration is for node %s, not %s", reg.Owner().Node, cfg.Node)
	}
	types.Registry.Freeze()
	types.mu.Lock()
	types.frozen = true
	byName := make(map[string]*spotType, len(types.byName))
	for k, v := range types.byName {
		byName[k] = v
	}
	types.mu.Unlock()
	if cfg.IdleScanInterval <= 0 {
		cfg.IdleScanInterval = idleScanInterval(byName, cfg.InstanceSpotIdleTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hardCtx, hardCancel := context.WithCancel(context.Background())
	c := &Catalog{
		cfg: cfg, store: st, types: byName, client: client,
		log: cfg.Logger.With("node", string(cfg.Node)), tel: cfg.Telemetry,
		ctx: ctx, cancel: cancel, hardCtx: hardCtx, hardCancel: hardCancel,
		entries:        make(map[string]*entrySpot),
		closed:         make(chan struct{}),
		activating:     make(chan struct{}, cfg.MaxConcurrentActivations),
		actorFactories: make(chan struct{}, cfg.MaxConcurrentActivations),
	}
	c.bg.pool = gopool.New(0, 0)
	c.suspects.init()
	c.reg.Store(reg)
	cfg.Meter.SetReclaim(c.reclaimHeld)
	c.stopGauge = c.tel.ObserveActiveSpots(c.ActiveOwned)
	return c, nil
}

// Start makes the Entry Spots, one per registered Entry type (A2), and starts the idle scan.
// A failing Entry factory fails Start.
func (c *Catalog) Start(ctx context.Context) error {
	for _, t := range c.sortedTypes() {
		if c.cfg.ClientOnly {
			break
		}
		if t.desc.Kind != sdk.KindEntry {
			continue
		}
		e := &entrySpot{activation: activation{cat: c, typ: t, exec: exec.New(&c.cfg.Exec, c.cfg.Meter.Lanes())}}
		e.exec.SetOwner(&e.activation)
		octx, cancel := context.WithTimeout(ctx, c.cfg.OperationTimeout)
		impl, err := c.build(octx, &e.activation, e, t, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("catalog: entry spot %s on %s: %w", t.desc.Name, c.cfg.Node, err)
		}
		e.impl = impl
		c.entries[t.desc.Name] = e
	}
	reg := c.registration()
	c.bg.goRun(c.idleLoop)
	c.bg.goRun(c.reconcileLoop)
	c.bg.goRun(func() { c.watchLoss(reg) })
	return nil
}

// registration is the registration new Spots are owned under.
func (c *Catalog) registration() *store.Registration { return c.reg.Load() }

// Rebind makes reg, a new registration of this node after its previous owner lease ended, the
// one new Spots are owned under. The Spots of the previous lease close on their own with
// CloseOwnerLost; their records are reclaimed like those of any ended owner.
func (c *Catalog) Rebind(reg *store.Registration) error {
	if reg.Owner().Node != c.cfg.Node {
		return fmt.Errorf("catalog: registration is for node %s, not %s", reg.Owner().Node, c.cfg.Node)
	}
	if c.stopping.Load() {
		return c.errStopping()
	}
	c.reg.Store(reg)
	if !c.bg.goRun(func() { c.watchLoss(reg) }) {
		return c.errStopping()
	}
	return nil
}

// watchLoss ends the Spots owned under reg when its owner lease ends (C1): the node no longer
// owns them, so their queued work is dropped unrun and they close with CloseOwnerLost, leaving
// their records to the mesh's reclaimer.
func (c *Catalog) watchLoss(reg *store.Registration) {
	select {
	case <-c.ctx.Done():
		return
	case <-reg.Lost():
	}
	if unfenced {
		return // the deliberately broken runtime of the fault suite's own test
	}
	guard := reg.Guard()
	lost := c.ownedSpots(func(sp ownedSpot) bool { return sp.base().guard == guard })
	c.log.Error("the owner lease ended: the node no longer owns its Spots and closes them",
		"cause", reg.Cause(), "spots", len(lost))
	ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	if err := c.closeAll(ctx, lost, sdk.CloseOwnerLost, c.bg.goRun); err != nil {
		c.log.Warn("closing the Spots of an ended owner lease", "err", err)
	}
	// The Entry Spots stay, and serve again once the node registers again; their Actors'
	// records name the lease that ended, which the reclaimer deletes, so those Actors end.
	members, cancelMembers := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancelMembers()
	c.endEntryMembersOf(members, reg.Owner().Lease)
}

func (c *Catalog) sortedTypes() []*spotType {
	out := make([]*spotType, 0, len(c.types))
	for _, t := range c.types {
		out = append(out, t)
	}
	// Start Entry Spots in a stable order.
	slices.SortFunc(out, func(a, b *spotType) int { return strings.Compare(a.desc.Name, b.desc.Name) })
	return out
}

// Owner is this node's current registration in the Location Store.
func (c *Catalog) Owner() store.Owner { return c.registration().Owner() }

// SetClient sets what Spots get as SpotContext.Client; call it before Start.
func (c *Catalog) SetClient(client sdk.Client) { c.client = client }

// ActiveSpots returns the number of Spots active on this node, Entry Spots included.
func (c *Catalog) ActiveSpots() int {
	n := len(c.entries)
	c.slots.eachLocked(func(s *slot) {
		if s.spot != nil {
			n++
		}
	})
	return n
}

// Executors is the number of Spots whose lanes exist now: the Entry Spots and the User and
// Instance Spots active or being created.
func (c *Catalog) Executors() int { return len(c.entries) + int(c.active.Load()) }

// ActiveOwned is the number of User and Instance Spots active or being created (D6).
func (c *Catalog) ActiveOwned() int64 { return c.active.Load() }

// HasRoom reports whether the active-object cap leaves room for one more Spot (G5).
func (c *Catalog) HasRoom() bool {
	return !c.cfg.ClientOnly && (c.cfg.MaxActive == 0 || c.active.Load() < int64(c.cfg.MaxActive))
}

// ErrForceStopped is returned by Close when a Spot did not close, because ctx ended first or
// its close failed: the rest were stopped without their closing callbacks, and their records
// were left to the reclaimer. The error that wraps it wraps those causes too.
var ErrForceStopped = errors.New("catalog: force-stopped")

// ErrWorkOutlastedClose is a Spot's close (or a relocation unit) giving up because the turn in
// progress or the queued work did not finish within its time: it ran out of time, nothing
// failed.
var ErrWorkOutlastedClose = errors.New("catalog: the turn in progress or the queued work did not finish in time")

// forcedGrace bounds the wait for the catalog's own goroutines after a forced stop; they wait
// on nothing but the store and timers by then.
const forcedGrace = 5 * time.Second

// expired is a context that has ended: a wait on it is a poll with its grace period.
var expired = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Close closes every Spot with reason Shutdown and releases the User and Instance Spots'
// locations, then stops the catalog's background work. A Spot whose creation finishes while
// Close runs closes in the same way once the creations in flight have ended within ctx. ctx
// bounds
// it (F8): when it ends first, or a Spot's close fails, the remaining Spots are stopped at
// once — queued work dropped, contexts cancelled, no closing callback — their records are left
// to turn Unavailable when the node's lease ends, and the error wraps ErrForceStopped and says
// why. A handler or callback still running then cannot be stopped; it ends on its own, and
// nothing waits for it. Safe to call more than once.
func (c *Catalog) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() {
		c.stopping.Store(true)
		listed := c.ownedSpots(nil)
		err = c.closeAll(ctx, listed, sdk.CloseShutdown, c.bg.goRun)
		c.endArrivals()
		// An Entry whose work outlasted ctx is stopped without its closing callbacks, as the
		// forced stop below stops the others.
		forcedEntries := 0
		for _, e := range c.sortedEntries() {
			if eerr := c.closeEntry(ctx, e); eerr != nil {
				forcedEntries++
				err = errors.Join(err, fmt.Errorf("entry spot %s: %w", e.typ.desc.Name, eerr))
			}
		}
		// The units under way have decided (each Spot's close waited for its own); a unit
		// that committed still tells its target, which serves the Spot once it hears. Half of
		// what is left at most: a target that does not answer settles by the record.
		unitsCtx, cancelUnits := halfLeft(ctx)
		waitFor(&c.units, unitsCtx, 0)
		cancelUnits()
		// Background work ends, and nothing new starts: a goroutine started now would race
		// with the wait for them. A creation still in flight fails.
		c.cancel()
		c.bg.seal()
		if waitFor(&c.creations, ctx, 0) && ctx.Err() == nil {
			// F8: a creation that passed its check of stopping before Close set it, and
			// finished after the Spots were listed, closes its Spot itself (settleLate) unless
			// the seal came first. The creations have all ended now and none starts any more:
			// such a Spot closes here as the others did, whatever other background work is
			// still under way. Its close needs none (c.ctx has ended; it is bounded by ctx and
			// hardCtx), and runs on goroutines of the group, which is waited for below.
			in := make(map[ownedSpot]bool, len(listed))
			for _, sp := range listed {
				in[sp] = true
			}
			if late := c.ownedSpots(func(sp ownedSpot) bool { return !in[sp] }); len(late) > 0 {
				if lerr := c.closeAll(ctx, late, sdk.CloseShutdown, c.bg.goSealed); lerr != nil {
					err = errors.Join(err, fmt.Errorf("%s created while the node closed: %w", spots(len(late)), lerr))
				}
			}
		}
		done := waitFor(&c.bg.wg, ctx, 0)
		forced := 0
		if !done || ctx.Err() != nil || c.ActiveSpots() > len(c.entries) {
			forced = c.forceStop()
		}
		c.hardCancel()
		ended := waitFor(&c.bg.wg, expired, forcedGrace)
		if !ended {
			c.log.Error("the catalog's goroutines did not end after a forced stop")
		}
		c.bg.end(ended)
		if forced += forcedEntries; forced > 0 {
			err = forcedError(forced, err, ctx.Err())
		}
		// A factory that never returned already failed its creation; it is not the close's to
		// wait for.
		if !waitFor(c.builders.close(), expired, 50*time.Millisecond) {
			c.log.Warn("factories or OnActivate callbacks that timed out are still running")
		}
		c.stopGauge()
		close(c.closed)
	})
	return err
}

// forcedError is Close's error when it force-stopped n activations: it wraps ErrForceStopped
// and the causes that exist — closes that failed (err), ctx's end (ended) — and names no
// missing one.
func forcedError(n int, err, ended error) error {
	if ended != nil && !errors.Is(err, ended) {
		err = errors.Join(err, ended)
	}
	if err == nil {
		return fmt.Errorf("%w: %s still active after their closes", ErrForceStopped, spots(n))
	}
	return fmt.Errorf("%w: %s did not close: %w", ErrForceStopped, spots(n), err)
}

// spots is "1 Spot" or "n Spots".
func spots(n int) string {
	if n == 1 {
		return "1 Spot"
	}
	return fmt.Sprintf("%d Spots", n)
}

// halfLeft is ctx ending halfway to its deadline, or ctx itself when it has none.
func halfLeft(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Until(dl)/2)
}

// waitFor waits for wg until ctx ends, then at most grace longer; it reports whether wg was done.
func waitFor(wg *sync.WaitGroup, ctx context.Context, grace time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	select {
	case <-done:
		return true
	case <-time.After(grace):
		return false
	}
}

// forceStop stops every activation still here at once: queued work is dropped, timers stop,
// contexts are cancelled, and closes and creations in progress stop waiting. It returns how
// many activations it stopped.
func (c *Catalog) forceStop() int {
	c.hardCancel()
	n := 0
	stop := func(a *activation) {
		if a.current() == stateClosed {
			return
		}
		n++
		a.exec.Close(fmt.Errorf("%w: node %s force-stopped", sdk.ErrClosed, c.cfg.Node))
		a.teardown()
		a.state.Store(uint32(stateClosed))
	}
	for _, sp := range c.ownedSpots(nil) {
		stop(sp.base())
	}
	for _, e := range c.sortedEntries() {
		stop(&e.activation)
	}
	return n
}

func (c *Catalog) sortedEntries() []*entrySpot {
	out := make([]*entrySpot, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entrySpot) int { return strings.Compare(a.typ.desc.Name, b.typ.desc.Name) })
	return out
}

// CloseOwned closes every User and Instance Spot active here with reason, 64 at a time. With
// CloseShutdown their locations are released; with CloseOwnerLost (the node's owner lease is
// gone) the store is not written and the activations only end here, leaving their records to
// the reclaimer.
func (c *Catalog) CloseOwned(ctx context.Context, reason sdk.CloseReason) error {
	return c.closeAll(ctx, c.ownedSpots(nil), reason, c.bg.goRun)
}

// ownedSpots returns the User and Instance Spots active here that keep passes (all when nil).
// The slots are read under their shard's lock; keep runs under it and must be quick.
func (c *Catalog) ownedSpots(keep func(ownedSpot) bool) []ownedSpot {
	var out []ownedSpot
	c.slots.eachLocked(func(s *slot) {
		if s.spot != nil && (keep == nil || keep(s.spot)) {
			out = append(out, s.spot)
		}
	})
	return out
}

// closeAll closes spots with reason, 64 at a time, each bounded by ctx; the close transactions
// it starts run on goroutines that run starts (beginCloseOn).
func (c *Catalog) closeAll(ctx context.Context, spots []ownedSpot, reason sdk.CloseReason, run func(func()) bool) error {
	errs := make(chan error, len(spots))
	sem := make(chan struct{}, 64)
	for _, s := range spots {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- c.closeSpotOn(ctx, s, reason, false, run)
		}()
	}
	var all []error
	for range spots {
		if e := <-errs; e != nil && !errors.Is(e, errAlreadyClosed) && !errors.Is(e, errRelocated) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
}

// InTurn reports whether ctx is the context of a turn running on this node: a one-way
// message's, a timer's, a request's, or a closing callback's or an OnActivate's while it runs,
// or one derived from it. A turn of another catalog of the process is not one of this node's.
func (c *Catalog) InTurn(ctx context.Context) bool {
	// F10: only this node's turns are waited for by its shutdown or relocation; a one-way
	// turn or a timer of another node of the process is not.
	if a := turnOf(ctx); a != nil && a.cat == c {
		return true
	}
	if c.inCallback(ctx) {
		return true
	}
	for _, e := range c.sortedEntries() {
		if e.activation.ownTurn(ctx) {
			return true
		}
	}
	for _, sp := range c.ownedSpots(nil) {
		if sp.base().ownTurn(ctx) {
			return true
		}
	}
	return false
}

// errStopping answers work that arrives after Close began.
func (c *Catalog) errStopping() error {
	return fmt.Errorf("%w: node %s is closing", sdk.ErrClosed, c.cfg.Node)
}

// execPanic is told of a panic that escaped a work item; every item recovers its own, so
// this is a last line of defence.
func (c *Catalog) execPanic(v any, stack []byte) {
	c.log.Error("spot work panicked", "panic", v, "stack", string(stack))
}

// SetRelocating makes the node refuse, or take again, new creations, spawns and arrivals while
// its relocation runs (F2): they would have to move again.
func (c *Catalog) SetRelocating(on bool) { c.relocating.Store(on) }
