package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/sdk"
)

// Mode is what a call may do to a missing Spot (A2, B1).
type Mode uint8

const (
	// Plain never creates: a missing Spot is ErrNotFound (B1, K2).
	Plain Mode = iota
	// Intent creates a missing Instance Spot (A2).
	Intent
	// ExplicitCreate creates a User Spot and fails with ErrAlreadyExists if it exists (A2).
	ExplicitCreate
)

// Route is where a resolved call goes: a Spot active here, or the Ready record of a Spot
// owned by another node.
type Route struct {
	local  ownedSpot
	Remote store.Resolution
}

// Local reports whether the Spot is active on this node.
func (r Route) Local() bool { return r.local != nil }

// ErrRemoteOwner is returned by operations that need the Spot on this node when its Ready
// owner is another node; the caller routes there.
var ErrRemoteOwner = errors.New("catalog: spot is owned by another node")

// ErrClosing is returned by Deliver when the Spot began closing after it was resolved: the
// caller resolves again, which waits for the close (D4) or answers not found.
var ErrClosing = errors.New("catalog: spot is closing")

// ErrCreating is returned by Admit when this node is creating the Spot: its record may already
// say Ready while its activation is not yet registered here. The caller waits for the creation
// with AwaitCreation, then admits again.
var ErrCreating = errors.New("catalog: spot is being created here")

// ErrHeld says a peer's one-way message for an Actor was held while the Actor moves: the done
// callback given with it answers the peer once it is admitted where it runs, or fails.
var ErrHeld = errors.New("catalog: one-way message held while its Actor moves")

// maxRounds bounds the state machine's rounds for one call: each round either waits for the
// store to change or makes progress, so it is never reached in practice.
const maxRounds = 64

// creation is one creation in flight on this node; every local caller of the same Spot joins
// it, so the factory runs once (B5).
type creation struct {
	done chan struct{}
	spot ownedSpot
	lost *store.Resolution // set when another creator holds the authority
	err  error
}

// Resolve runs the activation state machine for one User or Instance Spot (B2): the store's
// answer goes to exactly one component — Missing to the creation coordinator, Creating to the
// waiter of that attempt, Ready to route admission, Unavailable to terminal completion.
func (c *Catalog) Resolve(ctx context.Context, t sdk.Target, mode Mode) (Route, error) {
	typ, err := c.routedType(t)
	if err != nil {
		return Route{}, err
	}
	if mode == Intent && t.Kind() != sdk.KindInstance || mode == ExplicitCreate && t.Kind() != sdk.KindUser {
		return Route{}, fmt.Errorf("%w: %v cannot be created by this call (A2)", sdk.ErrInvalidArgument, t)
	}
	return c.resolve(ctx, typ, t.ID(), mode)
}

// routedType is the type of t for routing: the registered one, or, for a type this node does
// not host, one made from the target that can find where the Spot is but never creates it.
func (c *Catalog) routedType(t sdk.Target) (*spotType, error) {
	typ, err := c.ownedType(t)
	if err == nil || !errors.Is(err, sdk.ErrUnhandled) {
		return typ, err
	}
	desc := t.Desc()
	if desc == nil || desc.Name != t.Type() || desc.Kind != t.Kind() {
		desc = &sdk.SpotDesc{Name: t.Type(), Kind: t.Kind()}
	}
	return &spotType{desc: desc}, nil
}

// ownedType is the registered type of t, a User or Instance Spot type this node hosts. An
// Actor target is refused: an Actor has no Spot record.
func (c *Catalog) ownedType(t sdk.Target) (*spotType, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if t.Kind() == sdk.KindActor {
		return nil, fmt.Errorf("%w: %v is an Actor, not a User or Instance Spot", sdk.ErrInvalidArgument, t)
	}
	typ, ok := c.types[t.Type()]
	if !ok {
		return nil, fmt.Errorf("%w: spot type %s is not registered on node %s", sdk.ErrUnhandled, t.Type(), c.cfg.Node)
	}
	if typ.desc.Kind != t.Kind() {
		return nil, fmt.Errorf("%w: spot type %s is %s, addressed as %s", sdk.ErrInvalidArgument, t.Type(), typ.desc.Kind, t.Kind())
	}
	if t.Kind() == sdk.KindEntry {
		return nil, fmt.Errorf("%w: %v has no location record", sdk.ErrInvalidArgument, t)
	}
	return typ, nil
}

func (c *Catalog) resolve(ctx context.Context, typ *spotType, id string, mode Mode) (Route, error) {
	key := spotKey{typ.desc.Name, id}
	skey := store.SpotKey{Type: key.typ, ID: id}
	var res *store.Resolution // the resolver's latest answer; nil: read the store
	var waitedAttempt uint64  // the creation attempt this caller waited for
	for round := range maxRounds {
		if err := ctx.Err(); err != nil {
			return Route{}, err
		}
		// This node first: an activation here, or a creation in progress here.
		if route, wait, err := c.local(ctx, key, mode); route.Local() || err != nil {
			return route, err
		} else if wait {
			res = nil
			continue
		}
		if res == nil && round == 0 && mode != Plain && typ.factory != nil && c.HasRoom() {
			// A call that may create goes straight to the creation coordinator: the
			// reservation's failure branch reads the current record, so a missing Spot costs
			// no separate lookup and an existing one is handed on as if looked up.
			route, next, err := c.create(ctx, typ, id)
			if err != nil || route.Local() {
				return route, err
			}
			res = next
			continue
		}
		if res == nil {
			r, err := c.store.Lookup(ctx, skey)
			if err != nil {
				return Route{}, err
			}
			res = &r
		}
		var next *store.Resolution
		var err error
		var route Route
		switch res.State {
		case store.StateMissing:
			route, next, err = c.onMissing(ctx, typ, id, mode, *res, waitedAttempt)
		case store.StateCreating:
			waitedAttempt = res.Record.Attempt
			next, err = c.onCreating(ctx, key, mode, *res)
		case store.StateReady:
			route, next, err = c.onReady(ctx, key, mode, *res)
		case store.StateUnavailable:
			next, err = c.onUnavailable(ctx, key, mode, *res)
		default:
			err = fmt.Errorf("catalog: %s: unknown store state %v", skey, res.State)
		}
		if err != nil || route.Local() || route.Remote.State == store.StateReady {
			return route, err
		}
		res = next
	}
	return Route{}, fmt.Errorf("catalog: %s/%q did not settle in %d rounds", key.typ, id, maxRounds)
}

// local answers from this node's own state. It reports wait=true when it waited for a local
// creation or close to finish and the caller should look again.
func (c *Catalog) local(ctx context.Context, key spotKey, mode Mode) (Route, bool, error) {
	sh := c.slots.of(key)
	sh.mu.RLock()
	var sp ownedSpot
	var cr *creation
	if sl := sh.m[key]; sl != nil {
		sp, cr = sl.spot, sl.creating
	}
	sh.mu.RUnlock()
	if sp != nil {
		a := sp.base()
		if !a.turnAllowed() && a.current() != stateClosed {
			// Created under an owner lease that has ended: it owns nothing any more (C1).
			if _, err := c.beginClose(context.Background(), sp, sdk.CloseOwnerLost, false); err != nil && !errors.Is(err, errAlreadyClosed) {
				return Route{}, false, err
			}
			return Route{}, true, c.waitClose(ctx, a)
		}
		if a.current() == stateRelocating {
			if a.ownTurn(ctx) {
				// The unit waits for this very turn: delivery refuses the message instead.
				return Route{local: sp}, false, nil
			}
			// A relocation unit moves it: look again once it stays or has gone.
			_, err := c.awaitRelocation(ctx, a)
			return Route{}, err == nil, err
		}
		if a.current() == stateActive {
			if mode == ExplicitCreate {
				return Route{}, false, fmt.Errorf("%w: %s %s/%q", sdk.ErrAlreadyExists, sp.Kind(), key.typ, key.id)
			}
			return Route{local: sp}, false, nil
		}
		if mode == Plain {
			return Route{}, false, fmt.Errorf("%w: %s %s/%q is closing", sdk.ErrNotFound, sp.Kind(), key.typ, key.id)
		}
		if c.stopping.Load() && a.current() == stateClosed {
			// Force-stopped with its node (Close): its record stays until the lease ends, and
			// this node creates nothing; there is no close to wait for.
			return Route{}, false, c.errNotCreating(key)
		}
		// An intent call or a create that meets a close waits for it, then creates (D4).
		return Route{}, true, c.waitClose(ctx, a)
	}
	if cr != nil {
		select {
		case <-cr.done:
		case <-ctx.Done():
			return Route{}, false, ctx.Err()
		}
		switch {
		case cr.err != nil:
			return Route{}, false, cr.err // every waiter gets the creation's error (B8)
		case cr.lost != nil:
			return Route{}, true, nil
		case mode == ExplicitCreate:
			return Route{}, false, fmt.Errorf("%w: %s %s/%q", sdk.ErrAlreadyExists, cr.spot.Kind(), key.typ, key.id)
		}
		return Route{local: cr.spot}, false, nil
	}
	return Route{}, false, nil
}

// onMissing is the creation coordinator's input: no authority exists.
func (c *Catalog) onMissing(ctx context.Context, typ *spotType, id string, mode Mode, res store.Resolution, waitedAttempt uint64) (Route, *store.Resolution, error) {
	if mode == Plain {
		return Route{}, nil, fmt.Errorf("%w: %s %s/%q", sdk.ErrNotFound, typ.desc.Kind, typ.desc.Name, id)
	}
	if waitedAttempt != 0 && res.ReleasedBy == store.ReleaseCreationFailed {
		// The creation this caller waited for failed: the waiter gets the failure (B8).
		return Route{}, nil, fmt.Errorf("%w: %s/%q: its creator's factory failed", sdk.ErrCreationFailed, typ.desc.Name, id)
	}
	return c.create(ctx, typ, id)
}

// onCreating is the waiter of one creation attempt.
func (c *Catalog) onCreating(ctx context.Context, key spotKey, mode Mode, res store.Resolution) (*store.Resolution, error) {
	if res.Record.Owner == c.Owner() {
		// Our own reservation with no creation in progress here: left by a creation that could
		// not report (B8). Release it; the next round sees Missing.
		return nil, c.releaseLeaked(ctx, key, res.Record)
	}
	if mode == ExplicitCreate {
		return nil, fmt.Errorf("%w: %s %s/%q is being created", sdk.ErrAlreadyExists, res.Record.Kind, key.typ, key.id)
	}
	return c.waitChange(ctx, key, res)
}

// nudgeAfter is how long a waiter watches another live node's Creating or Releasing record
// before it asks that node to check that a creation or a close stands behind it.
func (c *Catalog) nudgeAfter() time.Duration { return max(2*time.Second, c.cfg.OperationTimeout/4) }

// waitChange waits for res's record to change. A record of another live node that stays
// Creating or Releasing past nudgeAfter may have been left behind by a creation or close whose
// last step was lost; its owner is asked to reconcile it (B8), and the wait goes on.
func (c *Catalog) waitChange(ctx context.Context, key spotKey, res store.Resolution) (*store.Resolution, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, c.nudgeAfter())
		next, err := c.store.WaitChange(wctx, res)
		timedOut := wctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return &next, nil
		case ctx.Err() != nil || !timedOut:
			return nil, err
		}
		c.nudge(ctx, res.Record.Owner.Node, key)
	}
}

// nudge asks owner to reconcile key, without waiting for it to do so.
func (c *Catalog) nudge(ctx context.Context, owner sdk.NodeID, key spotKey) {
	skey := store.SpotKey{Type: key.typ, ID: key.id}
	if owner == c.cfg.Node {
		c.suspect(skey)
		return
	}
	c.mu.Lock()
	fn := c.nudger
	c.mu.Unlock()
	if fn != nil {
		fn(ctx, owner, skey)
	}
}

// SetNudger sets how this node asks another to reconcile one of its records; the mesh sets it.
func (c *Catalog) SetNudger(fn func(ctx context.Context, owner sdk.NodeID, key store.SpotKey)) {
	c.mu.Lock()
	c.nudger = fn
	c.mu.Unlock()
}

// onReady is route admission's input: a live owner holds the Spot.
func (c *Catalog) onReady(ctx context.Context, key spotKey, mode Mode, res store.Resolution) (Route, *store.Resolution, error) {
	if mode == ExplicitCreate {
		return Route{}, nil, fmt.Errorf("%w: %s %s/%q", sdk.ErrAlreadyExists, res.Record.Kind, key.typ, key.id)
	}
	if res.Record.Owner != c.Owner() {
		return Route{Remote: res}, nil, nil
	}
	// Ready here: the activation was registered before its creation finished (B7), so a
	// second local look finds it unless the record outlived its activation.
	if route, wait, err := c.local(ctx, key, mode); route.Local() || wait || err != nil {
		return route, nil, err
	}
	return Route{}, nil, c.releaseLeaked(ctx, key, res.Record)
}

// onUnavailable is the terminal completion adapter: the authority exists but its owner
// cannot be used. A release in progress is waited out by calls that may create (D4); an ended
// owner lease is terminal and starts no creation (B3, K5).
func (c *Catalog) onUnavailable(ctx context.Context, key spotKey, mode Mode, res store.Resolution) (*store.Resolution, error) {
	if res.Evidence == store.EvidenceReleasing {
		if mode == Plain {
			return nil, fmt.Errorf("%w: %s %s/%q is being closed", sdk.ErrNotFound, res.Record.Kind, key.typ, key.id)
		}
		if res.Record.Owner == c.Owner() {
			if _, ok := c.slots.get(key); !ok {
				return nil, c.releaseLeaked(ctx, key, res.Record)
			}
		}
		return c.waitChange(ctx, key, res)
	}
	return nil, fmt.Errorf("%w: %s %s/%q: owner %s's lease has ended; it is released only by reclaim",
		sdk.ErrOwnerUnavailable, res.Record.Kind, key.typ, key.id, res.Record.Owner.Node)
}

// create is the creation coordinator: it takes a local slot (joining a creation already
// here), then runs the creation on a goroutine of its own, so that the caller's cancellation
// ends only the caller's wait (F10 in spirit) while the others still get the Spot.
func (c *Catalog) create(ctx context.Context, typ *spotType, id string) (Route, *store.Resolution, error) {
	key := spotKey{typ.desc.Name, id}
	defer c.enter()()
	sh := c.slots.of(key)
	sh.lock()
	if _, busy := sh.m[key]; busy {
		sh.mu.Unlock()
		return Route{}, nil, nil // raced another local caller: look again
	}
	if c.stopping.Load() {
		sh.mu.Unlock()
		return Route{}, nil, c.errNotCreating(key)
	}
	if c.cfg.ClientOnly {
		sh.mu.Unlock()
		return Route{}, nil, fmt.Errorf("%w: create %s/%q: node %s is not an Object Server", sdk.ErrNotServing, key.typ, id, c.cfg.Node)
	}
	if c.relocating.Load() {
		sh.mu.Unlock()
		return Route{}, nil, fmt.Errorf("%w: create %s/%q: node %s is relocating its objects", sdk.ErrNotServing, key.typ, id, c.cfg.Node)
	}
	if typ.factory == nil {
		sh.mu.Unlock()
		return Route{}, nil, fmt.Errorf("%w: create %s/%q: spot type %s is not registered on node %s", sdk.ErrUnhandled, key.typ, id, key.typ, c.cfg.Node)
	}
	if !c.registration().Guard().Valid() {
		sh.mu.Unlock()
		return Route{}, nil, fmt.Errorf("%w: create %s/%q: node %s's owner lease is not certainly valid", sdk.ErrNotServing, key.typ, id, c.cfg.Node)
	}
	if !c.takeActive() {
		sh.mu.Unlock()
		c.stats.capRefusals.Add(1)
		return Route{}, nil, fmt.Errorf("create %s/%q on %s: %w", key.typ, id, c.cfg.Node,
			&sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: int64(c.cfg.MaxActive)})
	}
	cr := &creation{done: make(chan struct{})}
	sh.put(key, &slot{creating: cr})
	sh.mu.Unlock()

	started := c.bg.goRunAlso(&c.creations, func() {
		octx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
		defer cancel()
		var sp ownedSpot
		var lost *store.Resolution
		var err error
		if terr := c.activationTurn(octx, func(hold *slotHold) { sp, lost, err = c.runCreation(octx, typ, id, hold) }); terr != nil {
			err = terr
		}
		sh.lock()
		if sp != nil {
			// B7 step 2: the route enters this node's admission view in the same continuation
			// as the Ready commit, before any waiter sends its first message.
			sh.m[key].creating, sh.m[key].spot = nil, sp
		} else {
			delete(sh.m, key)
			c.active.Add(-1)
		}
		sh.mu.Unlock()
		if inst, ok := sp.(*instanceSpot); ok {
			c.idle.add(inst)
		}
		cr.spot, cr.lost, cr.err = sp, lost, err
		close(cr.done)
		if sp != nil {
			c.settleLate(sp)
		}
	})
	if !started {
		sh.lock()
		delete(sh.m, key)
		sh.mu.Unlock()
		c.active.Add(-1)
		// The callers that joined it meanwhile get the refusal too: nothing ran for them.
		cr.err = c.errNotCreating(key)
		close(cr.done)
		return Route{}, nil, cr.err
	}
	select {
	case <-cr.done:
	case <-ctx.Done():
		return Route{}, nil, ctx.Err()
	}
	if cr.err != nil || cr.lost != nil {
		return Route{}, cr.lost, cr.err
	}
	return Route{local: cr.spot}, nil, nil
}

// errNotCreating refuses the creation of key because this node is closing: as a node that
// relocates, it does not serve new Spots, and the caller's placement chooses another node.
func (c *Catalog) errNotCreating(key spotKey) error {
	return fmt.Errorf("%w: create %s/%q: node %s is closing", sdk.ErrNotServing, key.typ, key.id, c.cfg.Node)
}

// AwaitCreation waits until a creation of the Spot t in progress on this node, if any, has
// finished, successfully or not, so that a message refused with ErrCreating can be admitted
// again. ctx bounds the wait.
func (c *Catalog) AwaitCreation(ctx context.Context, t sdk.Target) error {
	key := spotKey{t.Type(), t.ID()}
	sh := c.slots.of(key)
	sh.mu.RLock()
	var cr *creation
	if sl := sh.m[key]; sl != nil {
		cr = sl.creating
	}
	sh.mu.RUnlock()
	if cr == nil {
		return nil
	}
	select {
	case <-cr.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// activationTurn runs fn once fewer than MaxConcurrentActivations creations run (G5), waiting
// for a place within ctx: a burst of creations queues here instead of flooding the store.
func (c *Catalog) activationTurn(ctx context.Context, fn func(*slotHold)) error {
	select {
	case c.activating <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("no activation slot within the operation timeout: %w",
			&sdk.CapacityError{Where: sdk.CapacityScheduler, Limit: int64(cap(c.activating))})
	}
	hold := &slotHold{c: c}
	hold.refs.Store(1)
	defer hold.release()
	fn(hold)
	return nil
}

// slotHold is one of the MaxConcurrentActivations places. It is given back when both its
// creation and the factory that creation started have ended: a factory that outlives its
// creation's timeout still runs, so it still counts (G5).
type slotHold struct {
	c    *Catalog
	refs atomic.Int32
}

func (h *slotHold) retain() {
	if h != nil {
		h.refs.Add(1)
	}
}

func (h *slotHold) release() {
	if h != nil && h.refs.Add(-1) == 0 {
		<-h.c.activating
	}
}

// settleLate closes a Spot whose creation finished after the node stopped owning, or began
// closing, its Spots: the sweeps of those took their list before this Spot was there.
func (c *Catalog) settleLate(sp ownedSpot) {
	reason := sdk.CloseUnspecified
	switch {
	case !sp.base().turnAllowed():
		reason = sdk.CloseOwnerLost
	case c.stopping.Load():
		reason = sdk.CloseShutdown
	default:
		return
	}
	if _, err := c.beginClose(context.Background(), sp, reason, false); err != nil && !errors.Is(err, errAlreadyClosed) {
		c.log.Warn("a Spot created while its node stopped owning or closing could not be closed", "spot", sp.Type(), "id", sp.ID(), "err", err)
	}
}

// takeActive counts one more owned Spot unless the cap is reached (D6, K8).
func (c *Catalog) takeActive() bool {
	if c.cfg.MaxActive == 0 {
		c.active.Add(1)
		return true
	}
	for {
		n := c.active.Load()
		if n >= int64(c.cfg.MaxActive) {
			return false
		}
		if c.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// runCreation reserves the authority, runs the factory and OnActivate, and commits Ready (B5,
// B7). A failure releases the reservation so the ID can be created again (B8); a release whose
// outcome is unknown is left to the reconcile.
func (c *Catalog) runCreation(ctx context.Context, typ *spotType, id string, hold *slotHold) (ownedSpot, *store.Resolution, error) {
	skey := store.SpotKey{Type: typ.desc.Name, ID: id}
	reg := c.registration()
	owner := reg.Owner()
	r, err := c.store.Reserve(ctx, skey, typ.desc.Kind, owner)
	if err != nil {
		// Reserve leaves nothing behind when it can tell; when it cannot, the reconcile looks.
		c.suspect(skey)
		return nil, nil, fmt.Errorf("create %s: %w", skey, err)
	}
	if !r.Won {
		return nil, &r.Current, nil
	}
	c.stats.factoryRuns.Add(1)
	sp := c.newOwned(typ, id, reg)
	creating := store.Record{Kind: typ.desc.Kind, Phase: store.PhaseCreating, Owner: owner,
		Attempt: r.Reservation.Attempt, Incarnation: r.Reservation.Incarnation, Revision: r.Reservation.Revision}
	sp.setRecord(creating)
	// A new incarnation of a key is reserved only after the previous one's record was deleted,
	// so the reservation's revision grows with every activation of the Spot.
	sp.base().fence = sdk.Fence{Epoch: r.Reservation.Incarnation, Lease: owner.Lease}
	impl, err := c.build(ctx, sp.base(), sp, typ, hold)
	if err != nil {
		c.stats.creationFailures.Add(1)
		c.releaseFailed(skey, creating)
		return nil, nil, &creationError{msg: fmt.Sprintf("%v: %s: %v", sdk.ErrCreationFailed, skey, err), cause: err}
	}
	sp.base().impl = impl
	rec, err := c.store.CommitReady(ctx, r.Reservation)
	if err != nil {
		c.stats.creationFailures.Add(1)
		c.notifyClose(ctx, sp.base(), sdk.CloseCreationFailed)
		sp.base().exec.Close(fmt.Errorf("%w: %s: creation failed", sdk.ErrClosed, skey))
		sp.base().teardown()
		c.releaseFailed(skey, creating)
		return nil, nil, fmt.Errorf("%w: %s: commit ready: %v", sdk.ErrCreationFailed, skey, err)
	}
	sp.setRecord(rec)
	return sp, nil, nil
}

// releaseFailed releases the reservation of a failed creation (B8), with a budget of its own:
// the creation's may be spent. A release that does not happen now is done by the reconcile,
// or by the next caller that meets the record here.
func (c *Catalog) releaseFailed(key store.SpotKey, creating store.Record) {
	_, err := storeWrite(c, func(ctx context.Context) (struct{}, error) {
		err := c.store.Release(ctx, key, creating, store.ReleaseCreationFailed)
		if errors.Is(err, store.ErrFenced) {
			// A commit of Ready whose answer was lost (the node's close cut it off) may have
			// taken: the record is then still this attempt's, at a later revision, and no
			// activation runs under it. The reconcile, which would find it, may have stopped.
			res, lerr := c.store.Lookup(ctx, key)
			switch {
			case lerr != nil:
				return struct{}{}, lerr
			case res.State == store.StateMissing:
				return struct{}{}, nil
			}
			rec := res.Record
			switch {
			case rec.Owner != creating.Owner || rec.Attempt != creating.Attempt || rec.Incarnation != creating.Incarnation:
				// Another's: left alone, as the fenced release says.
			case rec.Phase == store.PhaseReleasing:
				err = c.store.FinishRelease(ctx, key, rec) // a release of ours took, its answer lost
			default:
				err = c.store.Release(ctx, key, rec, store.ReleaseCreationFailed)
			}
		}
		return struct{}{}, err
	})
	if err == nil {
		return
	}
	c.suspect(key)
	if !errors.Is(err, store.ErrFenced) {
		c.log.Warn("could not release a failed creation; it is released later", "spot", key, "err", err)
	}
}

func (c *Catalog) newOwned(typ *spotType, id string, reg *store.Registration) ownedSpot {
	var sp ownedSpot
	if typ.desc.Kind == sdk.KindUser {
		sp = &userSpot{}
	} else {
		sp = &instanceSpot{idleIndex: -1}
	}
	sp.own().self = sp
	a := sp.base()
	a.cat, a.typ, a.id, a.exec, a.guard = c, typ, id, exec.New(&c.cfg.Exec, c.cfg.Meter.Lanes()), reg.Guard()
	a.exec.SetOwner(a)
	return sp
}

// built is what a factory and OnActivate made.
type built struct {
	impl any
	err  error
}

// build runs the factory and OnActivate for a, bounded by ctx (OperationTimeout): a factory or
// OnActivate that does not return in time fails the creation, and its activation is closed so
// that nothing it started (timers) ever runs; when it returns at last, its object is dropped.
func (c *Catalog) build(ctx context.Context, a *activation, sc sdk.SpotContext, typ *spotType, hold *slotHold) (impl any, err error) {
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		var span *telemetry.Span
		ctx, span = c.tel.StartActivation(ctx, lvl, typ.desc.Kind, typ.desc.Name, a.id)
		defer func() { span.End(err) }()
	}
	out := make(chan built, 1)
	hold.retain()
	if !c.builders.goRun(func() {
		defer hold.release()
		impl, err := c.construct(ctx, sc, typ)
		out <- built{impl, err}
	}) {
		hold.release()
		return nil, c.errStopping()
	}
	select {
	case b := <-out:
		return b.impl, b.err
	case <-ctx.Done():
		a.state.Store(uint32(stateClosed))
		a.exec.Close(fmt.Errorf("%w: %s/%q: its creation did not finish in time", sdk.ErrClosed, typ.desc.Name, a.id))
		a.teardown()
		c.log.Error("a factory or OnActivate did not return in time; the creation failed", "spot", typ.desc.Name, "id", a.id, "err", ctx.Err())
		return nil, fmt.Errorf("the factory or OnActivate did not return in time: %w", ctx.Err())
	}
}

// construct runs the factory and OnActivate, turning a panic into an error.
func (c *Catalog) construct(ctx context.Context, sc sdk.SpotContext, typ *spotType) (impl any, err error) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("spot factory panicked", "spot", typ.desc.Name, "id", sc.ID(), "panic", v, "stack", string(debug.Stack()))
			impl, err = nil, fmt.Errorf("factory panicked: %v", v)
		}
	}()
	impl, err = typ.factory(sc)
	if err != nil {
		return nil, fmt.Errorf("factory: %w", err)
	}
	if impl == nil {
		return nil, errors.New("factory returned no object")
	}
	if h, ok := impl.(sdk.ActivateHandler); ok {
		mark := c.markCallback(ctx)
		defer mark.end() // however OnActivate ends, a panic too
		if err := h.OnActivate(mark); err != nil {
			return nil, fmt.Errorf("OnActivate: %w", err)
		}
	}
	return impl, nil
}

// releaseLeaked releases a record of this node's registration that no local activation or
// creation stands for: a creation or close that failed to report its last step (B8).
func (c *Catalog) releaseLeaked(ctx context.Context, key spotKey, rec store.Record) error {
	if rec.Owner != c.Owner() {
		return nil // another registration's: the reclaimer's, once its lease has ended
	}
	skey := store.SpotKey{Type: key.typ, ID: key.id}
	// A creation or close may have just started here; it owns the record then.
	if _, busy := c.slots.get(key); busy {
		return nil
	}
	// Tagged OwnerLost even when it was Creating: its creator reported its outcome long ago,
	// and whoever waits on the record now may create the Spot afresh (D5).
	tag := store.ReleaseOwnerLost
	var err error
	if rec.Phase == store.PhaseReleasing {
		err = c.store.FinishRelease(ctx, skey, rec)
	} else {
		err = c.store.Release(ctx, skey, rec, tag)
	}
	if errors.Is(err, store.ErrFenced) {
		return nil // changed meanwhile: the next round reads it again
	}
	if err == nil {
		c.stats.leaksReleased.Add(1)
	}
	return err
}

// creationError is a creation whose factory or OnActivate failed (B8). Like the error it
// replaces, it matches sdk.ErrCreationFailed and no other sentinel with errors.Is, so the
// runtime still reads it as a creation failure whatever the factory returned; errors.As also
// reaches the factory's error, so that an application finds its own typed error there. The
// runtime's own detail types (*sdk.AppError, *sdk.QueueFullError, *sdk.CapacityError) are not
// looked for in the cause: the runtime reads those to code an error for the wire and to decide
// a placement retry, and an error the factory got from a call of its own must not change that.
type creationError struct {
	msg   string
	cause error
}

func (e *creationError) Error() string { return e.msg }

func (e *creationError) Unwrap() error { return sdk.ErrCreationFailed }

func (e *creationError) As(target any) bool {
	switch target.(type) {
	case **sdk.AppError, **sdk.QueueFullError, **sdk.CapacityError:
		return false
	}
	return errors.As(e.cause, target)
}
