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

	"github.com/zlink-go/zlink/rt/exec"
	"github.com/zlink-go/zlink/rt/store"
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
	// and none is pending (D1, D2). Zero or negative: no idle eviction, unless a type sets its
	// own timeout.
	InstanceSpotIdleTimeout time.Duration
	// IdleScanInterval is the time between idle scans (default: a quarter of the timeout,
	// between 10 ms and 10 s).
	IdleScanInterval time.Duration
	// MaxActive caps the User and Instance Spots active or being created on this node (D6).
	// Zero: no cap.
	MaxActive int
	// OperationTimeout bounds a creation or a close once started: a caller's cancellation ends
	// only its own wait, never a shared operation (default 30 s).
	OperationTimeout time.Duration
	// Logger receives the catalog's logs (default: slog.Default()).
	Logger *slog.Logger
	// ClientOnly marks a node without the Object Server role: it makes no Entry Spots and
	// creates nothing.
	ClientOnly bool
}

func (c Config) withDefaults() Config {
	if c.IdleScanInterval <= 0 {
		c.IdleScanInterval = min(max(c.InstanceSpotIdleTimeout/4, 10*time.Millisecond), 10*time.Second)
	}
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = 30 * time.Second
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
	return errors.Join(errs...)
}

// spotType is one registered Spot type.
type spotType struct {
	desc    *sdk.SpotDesc
	factory sdk.Factory
	opts    sdk.TypeOptions
	methods map[string]*sdk.MethodDesc
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

// Types is the set of registered Spot types: an sdk.Registrar before the catalog starts,
// read-only after.
type Types struct {
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
	if !desc.Kind.Valid() {
		return fmt.Errorf("%w: spot type %s has kind %s", sdk.ErrInvalidArgument, desc.Name, desc.Kind)
	}
	t := &spotType{desc: desc, factory: factory, methods: make(map[string]*sdk.MethodDesc, len(desc.Methods))}
	for _, opt := range opts {
		opt(&t.opts)
	}
	if t.opts.IdleTimeout != 0 && desc.Kind != sdk.KindInstance {
		return fmt.Errorf("%w: spot type %s: only Instance Spots are idle-evicted (D7), it is %s", sdk.ErrInvalidArgument, desc.Name, desc.Kind)
	}
	for i := range desc.Methods {
		m := &desc.Methods[i]
		if m.Name == "" || m.Invoke == nil || m.NewRequest == nil {
			return fmt.Errorf("%w: spot type %s: method %d is incomplete", sdk.ErrInvalidArgument, desc.Name, i)
		}
		if _, dup := t.methods[m.Name]; dup {
			return fmt.Errorf("%w: spot type %s: method %s appears twice", sdk.ErrInvalidArgument, desc.Name, m.Name)
		}
		t.methods[m.Name] = m
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.frozen {
		return fmt.Errorf("%w: spot type %s registered after the node started", sdk.ErrInvalidArgument, desc.Name)
	}
	if ts.byName == nil {
		ts.byName = make(map[string]*spotType)
	}
	if _, dup := ts.byName[desc.Name]; dup {
		return fmt.Errorf("%w: spot type %s is registered twice", sdk.ErrInvalidArgument, desc.Name)
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
	reg    *store.Registration
	owner  store.Owner
	types  map[string]*spotType
	client sdk.Client
	log    *slog.Logger

	ctx    context.Context // cancelled by Close: ends timers and background work
	cancel context.CancelFunc
	bg     sync.WaitGroup

	entries map[string]*entrySpot // by type name; fixed after Start
	slots   shards[*slot]
	// active counts User and Instance Spots that are active or being created (D6).
	active atomic.Int64
	idle   idleList
	stats  stats

	closeOnce sync.Once
	stopping  atomic.Bool // Close began: nothing new is created or admitted
	closed    chan struct{}
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
	types.mu.Lock()
	types.frozen = true
	byName := make(map[string]*spotType, len(types.byName))
	for k, v := range types.byName {
		byName[k] = v
	}
	types.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Catalog{
		cfg: cfg, store: st, reg: reg, owner: reg.Owner(), types: byName, client: client,
		log: cfg.Logger.With("node", string(cfg.Node)),
		ctx: ctx, cancel: cancel,
		entries: make(map[string]*entrySpot),
		closed:  make(chan struct{}),
	}
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
		e := &entrySpot{activation: activation{cat: c, typ: t, exec: exec.New(&c.cfg.Exec)}}
		e.exec.SetPanicHandler(c.execPanic)
		impl, err := c.construct(ctx, e, t)
		if err != nil {
			return fmt.Errorf("catalog: entry spot %s on %s: %w", t.desc.Name, c.cfg.Node, err)
		}
		e.impl = impl
		c.entries[t.desc.Name] = e
	}
	c.bg.Add(1)
	go c.idleLoop()
	return nil
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

// Owner is this node's registration in the Location Store.
func (c *Catalog) Owner() store.Owner { return c.owner }

// SetClient sets what Spots get as SpotContext.Client; call it before Start.
func (c *Catalog) SetClient(client sdk.Client) { c.client = client }

// ActiveSpots returns the number of Spots active on this node, Entry Spots included.
func (c *Catalog) ActiveSpots() int {
	n := len(c.entries)
	c.slots.each(func(s *slot) {
		if s.spot != nil {
			n++
		}
	})
	return n
}

// ActiveOwned is the number of User and Instance Spots active or being created (D6).
func (c *Catalog) ActiveOwned() int64 { return c.active.Load() }

// HasRoom reports whether the active-object cap leaves room for one more Spot (G5).
func (c *Catalog) HasRoom() bool {
	return !c.cfg.ClientOnly && (c.cfg.MaxActive == 0 || c.active.Load() < int64(c.cfg.MaxActive))
}

// Close closes every Spot with reason Shutdown and releases the User and Instance Spots'
// locations, then stops the catalog's background work. ctx bounds it; Spots that could not be
// closed in time keep their records, which turn Unavailable when the node's lease ends.
func (c *Catalog) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() {
		c.stopping.Store(true)
		err = c.CloseOwned(ctx, sdk.CloseShutdown)
		for _, e := range c.entries {
			c.closeEntry(ctx, e)
		}
		c.cancel()
		c.bg.Wait()
		close(c.closed)
	})
	return err
}

// CloseOwned closes every User and Instance Spot active here with reason, 64 at a time. With
// CloseShutdown their locations are released; with CloseOwnerLost (the node's owner lease is
// gone) the release is fenced out and the activations only end here, leaving their records
// to the reclaimer.
func (c *Catalog) CloseOwned(ctx context.Context, reason sdk.CloseReason) error {
	var owned []ownedSpot
	c.slots.each(func(s *slot) {
		if s.spot != nil {
			owned = append(owned, s.spot)
		}
	})
	errs := make(chan error, len(owned))
	sem := make(chan struct{}, 64)
	for _, s := range owned {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- c.closeSpot(ctx, s, reason, false)
		}()
	}
	var all []error
	for range owned {
		if e := <-errs; e != nil && !errors.Is(e, errAlreadyClosed) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
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
