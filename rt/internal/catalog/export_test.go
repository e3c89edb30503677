package catalog

import (
	"context"
	"errors"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

// PermitBatch is how many job permits of ended jobs a Spot's runner returns together.
const PermitBatch = permitBatch

// Callers is how many requests of this node's callers are in the delivery of the local Spot t;
// -1 if t is not active here.
func (c *Catalog) Callers(t sdk.Target) int32 {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return -1
	}
	return sp.base().callers.Load()
}

// Company reports whether a request with ctx that came to the local Spot t now would have
// company, as enter would report it.
func (c *Catalog) Company(ctx context.Context, t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	return sp != nil && hasCompany(sp.base().callers.Load()+1, ctx)
}

// NestsASpotContext reports whether ctx is a Spot context whose sender's values are a Spot
// context themselves.
func NestsASpotContext(ctx context.Context) bool {
	sc, ok := ctx.(*spotCtx)
	if !ok {
		return false
	}
	_, nested := sc.values.(*spotCtx)
	return nested
}

// OnTurnChecked makes fn run after every turn's lease check lets it start, before the rest of
// the turn, until restore is called.
func OnTurnChecked(fn func()) (restore func()) {
	prev := turnChecked.Swap(&fn)
	return func() { turnChecked.Store(prev) }
}

// CachedSpot returns the Spot t that the Spot cache hands out now without reading the index,
// if it does.
func (c *Catalog) CachedSpot(t sdk.Target) (sdk.SpotContext, bool) {
	key := spotKey{t.Type(), t.ID()}
	h := keyHash(key)
	sp := c.cache.get(h, key, c.slots.at(h))
	return sp, sp != nil
}

// CacheHolds reports whether the Spot cache's entry of t holds a Spot of t's key, valid or not.
func (c *Catalog) CacheHolds(t sdk.Target) bool {
	key := spotKey{t.Type(), t.ID()}
	o := c.cache.entry(keyHash(key)).Load()
	return o != nil && o.id == key.id && o.typ.desc.Name == key.typ
}

// ChangeShardOf write-locks and unlocks the index's shard of t, as any change of a Spot of
// the shard does.
func (c *Catalog) ChangeShardOf(t sdk.Target) {
	sh := c.slots.of(spotKey{t.Type(), t.ID()})
	sh.lock()
	sh.mu.Unlock()
}

// ShareACacheEntry reports whether the Spots typ/a and typ/b have the same Spot cache entry.
func ShareACacheEntry(typ, a, b string) bool {
	var c spotCache
	return c.entry(keyHash(spotKey{typ, a})) == c.entry(keyHash(spotKey{typ, b}))
}

// Spot is the local Spot r goes to, or nil.
func (r Route) Spot() sdk.SpotContext {
	if r.local == nil {
		return nil
	}
	return r.local
}

// IndexedSpot finds the Spot t as LocalSpot does, through the index only.
func (c *Catalog) IndexedSpot(t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	return sp != nil && sp.Kind() == t.Kind() && sp.base().current() == stateActive
}

// EvictIdle runs the idle cleanup's close of the local Instance Spot t now, as a scan that
// found it idle would, without the scan's own check: as if work ran between the scan and the
// close. It returns the close's error, or ErrNotFound if t is not an active Instance Spot here.
func (c *Catalog) EvictIdle(ctx context.Context, t sdk.Target) error {
	inst, ok := c.spotAt(spotKey{t.Type(), t.ID()}).(*instanceSpot)
	if !ok {
		return sdk.ErrNotFound
	}
	return c.closeSpot(ctx, inst, sdk.CloseIdleEvicted, true)
}

// IsNotQuiescent reports whether err is a close's refusal of a Spot that was not quiescent.
func IsNotQuiescent(err error) bool { return errors.Is(err, errNotQuiescent) }

// Closing reports whether a close of the local Spot t is in progress.
func (c *Catalog) Closing(t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return false
	}
	a := sp.base()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing != nil
}

// Quiescent reports whether the local Spot t runs nothing and has nothing queued.
func (c *Catalog) Quiescent(t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return false
	}
	_, quiescent := sp.base().exec.IdleSince()
	return quiescent
}

// ActorMoving reports whether the Actor t on this node is in a move out of its Spot.
func (c *Catalog) ActorMoving(t sdk.Target) bool {
	act, ok := c.LocalActor(t)
	if !ok {
		return false
	}
	st := act.current()
	return st == actorMoving || st == actorDeparted
}

// InCommittedMove puts the Actor t on this node, for the length of fn, where a move of it to
// node stands between its commit and its end: its new Spot has it, its index entry here is
// still there. It reports false when t is not here.
func (c *Catalog) InCommittedMove(t sdk.Target, node sdk.NodeID, fn func()) bool {
	act, ok := c.LocalActor(t)
	if !ok {
		return false
	}
	act.movedTo = node
	act.committed.Store(true)
	defer func() {
		act.committed.Store(false)
		act.movedTo = ""
	}()
	fn()
	return true
}

// ActorHolds is how many messages the Actor t on this node holds while it moves.
func (c *Catalog) ActorHolds(t sdk.Target) int {
	act, ok := c.LocalActor(t)
	if !ok {
		return 0
	}
	act.mu.Lock()
	defer act.mu.Unlock()
	return len(act.held)
}

// BackgroundSealed reports whether Close has sealed the catalog's background work: no
// goroutine of the catalog's own starts from then on.
func (c *Catalog) BackgroundSealed() bool {
	c.bg.mu.Lock()
	defer c.bg.mu.Unlock()
	return c.bg.sealed
}

// noWork is lifecycle work that does nothing.
type noWork struct{}

func (noWork) Run()       {}
func (noWork) Drop(error) {}

// FillLifecycleLane queues lifecycle work that does nothing on the local Spot t, after its
// application work, until its lifecycle lane refuses more; it returns how much it queued.
func (c *Catalog) FillLifecycleLane(t sdk.Target) (int, error) {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return 0, errors.New("no such local Spot")
	}
	for n := 0; ; n++ {
		err := sp.base().exec.Submit(exec.Item{Lane: sdk.LaneLifecycle, AfterApplication: true}, noWork{})
		var full *sdk.QueueFullError
		if errors.As(err, &full) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// HoldBackground runs background work of the catalog's that lasts until release is closed, as
// a slow release or settle in the background would; false once the background is sealed.
func (c *Catalog) HoldBackground(release <-chan struct{}) bool {
	return c.bg.goRun(func() { <-release })
}

// LockBackground holds the background group as a closing catalog's seal does; the function it
// returns seals the group and lets go.
func (c *Catalog) LockBackground() (sealAndUnlock func()) {
	c.bg.mu.Lock()
	return func() {
		c.bg.sealed = true
		c.bg.mu.Unlock()
	}
}

// CreationPending reports whether a creation of t is registered on this node.
func (c *Catalog) CreationPending(t sdk.Target) bool {
	sl, ok := c.slots.get(spotKey{t.Type(), t.ID()})
	return ok && sl.creating != nil
}
