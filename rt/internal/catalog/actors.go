package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Actors (DESIGN §6): an Actor is a member of exactly one Spot at a time and runs on that
// Spot's serial queue and lanes. This node's Actors are in the catalog's actor index, keyed by
// type and ID, and in their host activation's member set. An Actor moves as one unit: it holds
// its new messages, its last turn in the old Spot ends, its state is taken, the new Spot
// receives it, one etcd transaction commits the new host, and the held messages follow it in
// the order they arrived.

// actorState is where an Actor activation is in its life on this node.
type actorState uint32

const (
	// actorActive: messages are admitted to the host's lane.
	actorActive actorState = iota
	// actorMoving: a move began; new messages are held, queued ones still run here.
	actorMoving
	// actorDeparted: the Actor's last turn here ended and its state was taken; every message
	// is held, to follow it or, if the move fails, to run here again.
	actorDeparted
	// actorArriving: the Actor was received here from a move; messages that follow it from
	// its old Spot run, any other is held until the move settles.
	actorArriving
	// actorClosing: an explicit close began; queued messages run, new ones are refused.
	actorClosing
	// actorGone: the Actor left this node or closed; nothing is admitted.
	actorGone
)

// actor is one Actor active on this node.
type actor struct {
	cat      *Catalog
	typ      *spotType
	id       string
	host     *activation
	impl     any
	restored []byte

	state atomic.Uint32 // actorState
	// queued counts this Actor's messages submitted to its host's lane and not yet run: a move
	// forwards held messages only once every earlier one has run or joined them.
	queued atomic.Int64

	mu     sync.Mutex
	seq    uint64  // admission order of queued and held messages
	held   []*call // messages held while moving or arriving, in admission order
	timers map[*spotTimer]struct{}
	// settled is closed when a move of the Actor out of, or into, this node ends.
	settled chan struct{}
	// committed says a move of the Actor out of this node committed: it belongs to its new
	// Spot on movedTo, and only its held messages are still here, to follow it.
	committed atomic.Bool
	movedTo   sdk.NodeID // set before committed
	// leftToMove says its Spot closed while its move's outcome was unknown, with the Spot's
	// index no longer naming it: the move committed (or its record is gone), and the move,
	// not the Spot's teardown, ends it here with its held messages.
	leftToMove atomic.Bool
	// slot says the Actor holds one of the node's MaxActiveActors places; ended says its end
	// here (a close, or its Spot's) was claimed, so that it ends once.
	slot  atomic.Bool
	ended atomic.Bool
	// token identifies the move an arriving Actor came by: only that move settles or aborts it.
	token uint64
	// lease is the owner lease of the node's registration that an Entry host's record of the
	// Actor names (0 in a User or Instance host): once it ends, the reclaimer deletes that
	// record and the Actor may be spawned elsewhere, so this copy runs no more (leaseHeld).
	lease int64
	// lostLease says the end of the Actor for its lease's end was claimed (endOfLostLease).
	lostLease atomic.Bool
	// gate ends an arrival whose move never settled (its source stopped); source is the Actor
	// that leaves, for a move between two Spots of this node.
	gate   *time.Timer
	source *actor
	log    *slog.Logger
}

func (act *actor) current() actorState { return actorState(act.state.Load()) }

func (act *actor) key() spotKey { return spotKey{act.typ.desc.Name, act.id} }

func (act *actor) storeKey() store.ActorKey {
	return store.ActorKey{Type: act.typ.desc.Name, ID: act.id}
}

// Target is the Actor's address.
func (act *actor) Target() sdk.Target { return sdk.ActorTarget(act.typ.desc.Name, act.id) }

// Type implements sdk.ActorContext.
func (act *actor) Type() string { return act.typ.desc.Name }

// ID implements sdk.ActorContext.
func (act *actor) ID() string { return act.id }

// Host implements sdk.ActorContext.
func (act *actor) Host() sdk.Target { return act.host.target() }

// TurnStart implements sdk.ActorContext: an Actor's turns are its host Spot's.
func (act *actor) TurnStart() time.Time { return act.host.TurnStart() }

// Node implements sdk.ActorContext.
func (act *actor) Node() sdk.NodeID { return act.cat.cfg.Node }

// RestoredState implements sdk.ActorContext.
func (act *actor) RestoredState() []byte { return act.restored }

// Logger implements sdk.ActorContext.
func (act *actor) Logger() *slog.Logger {
	act.mu.Lock()
	defer act.mu.Unlock()
	if act.log == nil {
		act.log = act.cat.log.With("actor", act.typ.desc.Name, "id", act.id, "host", act.host.target().String())
	}
	return act.log
}

// Client implements sdk.ActorContext: the host Spot's client, so that the Actor's own calls
// are recognised as its Spot's.
func (act *actor) Client() sdk.Client { return act.host.Client() }

// AfterFunc implements sdk.ActorContext.
func (act *actor) AfterFunc(d time.Duration, fn func(context.Context), opts ...sdk.TimerOption) sdk.Timer {
	return act.host.startMemberTimer(act, d, 0, fn, opts)
}

// Every implements sdk.ActorContext. A period below one millisecond is raised to it.
func (act *actor) Every(d time.Duration, fn func(context.Context), opts ...sdk.TimerOption) sdk.Timer {
	d = max(d, time.Millisecond)
	return act.host.startMemberTimer(act, d, d, fn, opts)
}

// discard ends act, which its factory made but which never became a member: the timers the
// factory armed stop, and no other arms.
func (act *actor) discard() {
	act.state.Store(uint32(actorGone))
	act.stopTimers()
}

// leaseHeld reports whether act's record names the node's current registration, which an
// Actor of a User or Instance host always does. An Entry host's Actor whose record names a
// lease that ended runs no more (C1): its record is the reclaimer's, and it may be spawned
// elsewhere. Its end is claimed at the first refusal, for an Actor that the end of the lease
// did not find active (its move rolled back later).
func (act *actor) leaseHeld() bool {
	if act.leaseCurrent() {
		return true
	}
	c := act.cat
	if act.current() == actorActive && act.lostLease.CompareAndSwap(false, true) {
		c.bg.goRun(func() {
			ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
			defer cancel()
			c.endOfLostLease(ctx, act)
		})
	}
	return false
}

// endOfLostLease ends act, an Actor of an Entry Spot whose record names an owner lease that
// ended, within ctx: its queued messages end unrun, its closing callback gets CloseOwnerLost,
// and its record is left to the reclaimer. One in a move is left to it: a commit moves it,
// and a rollback makes it active again, for its next refusal to end it (leaseHeld).
func (c *Catalog) endOfLostLease(ctx context.Context, act *actor) {
	act.lostLease.Store(true)
	met, err := act.begin(ctx, actorClosing, nil)
	switch {
	case err != nil && !errors.Is(err, errActorMoved):
		// Its move or close did not end in time: its next refusal claims its end again.
		act.lostLease.Store(false)
		return
	case met == actorClosing || err != nil:
		return // an explicit close ended it, or it left
	}
	c.endActor(ctx, act.host, act, sdk.CloseOwnerLost, true)
}

// leaseCurrent reports whether act's record names the node's current registration (leaseHeld
// without claiming its end).
func (act *actor) leaseCurrent() bool {
	return act.lease == 0 || act.lease == act.cat.Owner().Lease
}

// closingReason is the reason act's closing callback gets as its turn comes: its Spot's
// (activation.closingReason), but CloseOwnerLost, and no turn, once the lease its record
// names has ended, though the node registered again.
func (act *actor) closingReason(reason sdk.CloseReason) sdk.CloseReason {
	if !act.leaseCurrent() {
		return sdk.CloseOwnerLost
	}
	return act.host.closingReason(reason)
}

// endEntryMembersOf ends, within ctx, the Actors of the Entry Spots whose records name lease,
// an owner lease that ended (C1).
func (c *Catalog) endEntryMembersOf(ctx context.Context, lease int64) {
	var wg sync.WaitGroup
	for _, e := range c.entries {
		for _, act := range e.memberList() {
			if act.lease == lease && act.lostLease.CompareAndSwap(false, true) {
				wg.Go(func() { c.endOfLostLease(ctx, act) })
			}
		}
	}
	wg.Wait()
}

// stopTimers stops the Actor's timers: it left its Spot or closed.
func (act *actor) stopTimers() {
	act.mu.Lock()
	timers := act.timers
	act.timers = nil
	act.mu.Unlock()
	for t := range timers {
		t.Stop()
	}
}

// target is the address of the Spot a is the activation of.
func (a *activation) target() sdk.Target {
	switch a.typ.desc.Kind {
	case sdk.KindEntry:
		return sdk.EntryTarget(a.typ.desc.Name, a.cat.cfg.Node)
	case sdk.KindUser:
		return sdk.UserTarget(a.typ.desc.Name, a.id)
	}
	return sdk.InstanceTarget(a.typ.desc.Name, a.id)
}

// addMember makes act a member of a; it fails once a stopped being active. activate makes
// act Active as it joins, under a's lock: neither its timers nor a's close see it Active
// unless it joined.
func (a *activation) addMember(act *actor, activate bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	// A Spot whose close is pending takes no new member: an idle eviction decided on no members.
	if a.current() != stateActive || a.torn || a.closing != nil {
		return false
	}
	if activate {
		act.state.Store(uint32(actorActive))
	}
	if a.members == nil {
		a.members = make(map[*actor]struct{})
	}
	a.members[act] = struct{}{}
	a.memberCount.Add(1)
	return true
}

// removeMember ends act's membership of a.
func (a *activation) removeMember(act *actor) {
	a.mu.Lock()
	if _, ok := a.members[act]; ok {
		delete(a.members, act)
		a.memberCount.Add(-1)
	}
	a.mu.Unlock()
}

// memberList returns a's members now.
func (a *activation) memberList() []*actor {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*actor, 0, len(a.members))
	for act := range a.members {
		out = append(out, act)
	}
	return out
}

// actorType is the registered Actor type named name.
func (c *Catalog) actorType(name string) (*spotType, error) {
	typ, ok := c.types[name]
	if !ok {
		return nil, fmt.Errorf("%w: actor type %s is not registered on node %s", sdk.ErrUnhandled, name, c.cfg.Node)
	}
	if typ.desc.Kind != sdk.KindActor {
		return nil, fmt.Errorf("%w: %s is a %s Spot type, not an Actor type", sdk.ErrInvalidArgument, name, typ.desc.Kind)
	}
	return typ, nil
}

// LocalActorRef is an Actor on this node, as LocalActor finds it.
type LocalActorRef = *actor

// LocalActor returns the Actor t when it is on this node, in whatever state.
func (c *Catalog) LocalActor(t sdk.Target) (*actor, bool) {
	if t.Kind() != sdk.KindActor {
		return nil, false
	}
	act, ok := c.actors.get(spotKey{t.Type(), t.ID()})
	return act, ok
}

// movedAway reports whether a move of act to another node committed: only its held messages
// are still here, on their way to its new node, until the move's end takes it out of the index.
func (act *actor) movedAway() bool {
	return act.committed.Load() && act.movedTo != act.cat.cfg.Node
}

// ActiveActors is the number of Actors active on this node (G3), arriving ones included.
func (c *Catalog) ActiveActors() int64 { return c.actorCount.Load() }

// takeActor counts one more Actor unless the MaxActiveActors cap is reached (D6).
func (c *Catalog) takeActor(key spotKey) error {
	for {
		n := c.actorCount.Load()
		if c.cfg.MaxActiveActors > 0 && n >= int64(c.cfg.MaxActiveActors) {
			c.stats.capRefusals.Add(1)
			return fmt.Errorf("actor %s/%q on %s: %w", key.typ, key.id, c.cfg.Node,
				&sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: int64(c.cfg.MaxActiveActors)})
		}
		if c.actorCount.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// storeHost is a's fence as an Actor host: its record as this node holds it, or for an Entry
// Spot the node's registration.
func (c *Catalog) storeHost(a *activation) (store.Host, error) {
	if a.typ.desc.Kind == sdk.KindEntry {
		return store.EntryHost(a.typ.desc.Name, c.Owner()), nil
	}
	sp := c.spotAt(spotKey{a.typ.desc.Name, a.id})
	if sp == nil || sp.base() != a {
		return store.Host{}, fmt.Errorf("%w: %v is not active on node %s", sdk.ErrNotFound, a.target(), c.cfg.Node)
	}
	return store.SpotHost(sp.storeKey(), sp.record()), nil
}

// Spawn implements sdk.SpotContext: it makes the Actor desc/id a member of a. The record is
// written first, so that of racing spawns of one ID anywhere exactly one wins; the factory
// runs after, and a failing one releases the record again.
func (a *activation) Spawn(ctx context.Context, desc *sdk.SpotDesc, id string) error {
	c := a.cat
	if ctx == nil {
		return errNilContext("Spawn")
	}
	if desc == nil {
		return fmt.Errorf("%w: Spawn needs an Actor descriptor", sdk.ErrInvalidArgument)
	}
	if err := (store.ActorKey{Type: desc.Name, ID: id}).Validate(); err != nil {
		return fmt.Errorf("spawn into %v: %w", a.target(), err)
	}
	typ, err := c.actorType(desc.Name)
	if err != nil {
		return fmt.Errorf("spawn %s/%q: %w", desc.Name, id, err)
	}
	if err := c.openToMembers(a); err != nil || !a.turnAllowed() {
		return fmt.Errorf("%w: spawn %s/%q: %v is closing", sdk.ErrClosed, desc.Name, id, a.target())
	}
	if c.relocating.Load() {
		return fmt.Errorf("%w: spawn %s/%q: node %s is relocating its objects", sdk.ErrNotServing, desc.Name, id, c.cfg.Node)
	}
	key := spotKey{desc.Name, id}
	if _, ok := c.actors.get(key); ok {
		return fmt.Errorf("%w: actor %s/%q", sdk.ErrAlreadyExists, desc.Name, id)
	}
	if err := c.holdForSpawn(key); err != nil {
		return err
	}
	// Held until it is registered, or its record released; a release in the background takes
	// the key over (handed).
	handed := false
	defer func() {
		if !handed {
			c.spawning.Delete(key)
		}
	}()
	host, err := c.storeHost(a)
	if err != nil {
		return err
	}
	if err := c.takeActor(key); err != nil {
		return err
	}
	storeKey := store.ActorKey{Type: desc.Name, ID: id}
	loc, err := c.store.Spawn(ctx, storeKey, host)
	if err != nil {
		c.actorCount.Add(-1)
		if errors.Is(err, store.ErrOutcomeUnknown) || errors.Is(err, sdk.ErrStoreUnavailable) {
			c.releaseOrphan(a, storeKey, nil, true) // it may have landed
			handed = true
		}
		return fmt.Errorf("spawn into %v: %w", a.target(), err)
	}
	act := &actor{cat: c, typ: typ, id: id, host: a, lease: host.Lease}
	// Arriving until it is registered: a timer its factory arms does not run before.
	act.state.Store(uint32(actorArriving))
	act.slot.Store(true)
	// undo gives back what a spawn refused after its record was written holds.
	undo := func(err error) error {
		act.discard()
		c.giveSlot(act)
		handed = c.releaseActor(a, loc, host)
		return err
	}
	if err := c.constructActor(ctx, act); err != nil {
		return undo(factoryFailure(err, func() string { return fmt.Sprintf("actor %s/%q", desc.Name, id) }))
	}
	// Counted from here until it is registered, and refused if the node began to relocate
	// while its factory ran: a relocation waits for it, never for a factory (Unsettled).
	defer c.enter()()
	if c.relocating.Load() {
		return undo(fmt.Errorf("%w: spawn %s/%q: node %s is relocating its objects", sdk.ErrNotServing, desc.Name, id, c.cfg.Node))
	}
	if err := c.register(act, true); err != nil {
		return undo(err)
	}
	return nil
}

// holdForSpawn holds key in c.spawning for a spawn, unless another spawn holds it, or a
// release in the background holds it or waits for it (releaseWaits): that one goes first.
func (c *Catalog) holdForSpawn(key spotKey) error {
	settling := func() error {
		return fmt.Errorf("%w: spawn %s/%q: the record of an earlier spawn or close of it is still being settled", sdk.ErrStoreUnavailable, key.typ, key.id)
	}
	if c.releaseWaits(key) {
		return settling()
	}
	if held, busy := c.spawning.LoadOrStore(key, holdSpawn); busy {
		if held == holdSettle || c.releaseWaits(key) {
			return settling()
		}
		return fmt.Errorf("%w: actor %s/%q: a spawn of it is under way on node %s", sdk.ErrAlreadyExists, key.typ, key.id, c.cfg.Node)
	}
	if c.releaseWaits(key) { // one began to wait since the check above
		c.spawning.Delete(key)
		return settling()
	}
	return nil
}

// constructActor runs act's factory on one of the builders once one of the
// MaxConcurrentActivations places for Actor factories is free, as a Spot's creation waits for
// one of its own (G5); it waits for ctx and OperationTimeout at most, the factory included. A
// factory that does not return in that time fails the spawn or the arrival, as a Spot's fails
// its creation (B8), and the caller discards act, so that no timer it arms runs; the object it
// returns at last is dropped. A factory keeps its place until it returns, however it ends, so
// that factories left running bound those that may start. When the factory did not run, or ctx
// ended first, the error is a *notBuilt: not the factory's failure.
func (c *Catalog) constructActor(ctx context.Context, act *actor) error {
	if err := ctx.Err(); err != nil {
		return &notBuilt{fmt.Errorf("the factory did not run: %w", err)}
	}
	timeout := time.NewTimer(c.cfg.OperationTimeout)
	defer timeout.Stop()
	select {
	case c.actorFactories <- struct{}{}:
	case <-timeout.C:
		return &notBuilt{fmt.Errorf("the factory did not run: %w", &sdk.CapacityError{Where: sdk.CapacityScheduler, Limit: int64(cap(c.actorFactories))})}
	case <-ctx.Done():
		return &notBuilt{fmt.Errorf("the factory did not run: %w", ctx.Err())}
	}
	out := make(chan built, 1)
	if !c.builders.goRun(func() {
		defer func() { <-c.actorFactories }()
		impl, err := c.runActorFactory(act)
		out <- built{impl, err}
	}) {
		<-c.actorFactories
		return &notBuilt{c.errStopping()}
	}
	var late error
	select {
	case b := <-out:
		return act.take(b)
	case <-timeout.C:
		late = fmt.Errorf("the factory did not return within %v", c.cfg.OperationTimeout)
	case <-ctx.Done():
		late = &notBuilt{fmt.Errorf("the factory did not return before the caller's context ended: %w", ctx.Err())}
	}
	select {
	case b := <-out: // it returned as the wait ended (a pause lets both happen at once)
		return act.take(b)
	default:
	}
	c.log.Error("an Actor's factory did not return in time; its spawn or arrival failed", "actor", act.typ.desc.Name, "id", act.id, "err", late)
	return late
}

// take makes b, what act's factory made, act's object, or returns its failure.
func (act *actor) take(b built) error {
	if b.err != nil {
		return b.err
	}
	act.impl = b.impl
	return nil
}

// notBuilt is the error of a factory that did not run, or that its caller stopped waiting for
// when its context ended: not a failure of the factory's, which its callers return as it is.
type notBuilt struct{ err error }

func (e *notBuilt) Error() string { return e.err.Error() }
func (e *notBuilt) Unwrap() error { return e.err }

// factoryFailure is the error of a spawn or arrival whose factory failed, described by
// describe: a creation failure, unless it was not the factory's (notBuilt).
func factoryFailure(err error, describe func() string) error {
	if nb := (*notBuilt)(nil); errors.As(err, &nb) {
		return fmt.Errorf("%s: %w", describe(), nb.err)
	}
	return &creationError{msg: fmt.Sprintf("%v: %s: %v", sdk.ErrCreationFailed, describe(), err), cause: err}
}

// runActorFactory runs act's factory, turning a panic into an error.
func (c *Catalog) runActorFactory(act *actor) (impl any, err error) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("actor factory panicked", "actor", act.typ.desc.Name, "id", act.id, "panic", v, "stack", string(debug.Stack()))
			impl, err = nil, fmt.Errorf("factory panicked: %v", v)
		}
	}()
	impl, err = act.typ.actorFactory(act)
	if err != nil {
		return nil, fmt.Errorf("factory: %w", err)
	}
	if impl == nil {
		return nil, errors.New("factory returned no object")
	}
	return impl, nil
}

// register puts act in the actor index and in its host's members; active makes it Active as
// it joins its host, before anything can find it (a spawn), and only if it joins.
func (c *Catalog) register(act *actor, active bool) error {
	key := act.key()
	sh := c.actors.of(key)
	sh.lock()
	if _, dup := sh.m[key]; dup {
		sh.mu.Unlock()
		return fmt.Errorf("%w: actor %s/%q is already on node %s", sdk.ErrAlreadyExists, key.typ, key.id, c.cfg.Node)
	}
	if !act.host.addMember(act, active) {
		sh.mu.Unlock()
		return fmt.Errorf("%w: %v closed meanwhile", sdk.ErrClosed, act.host.target())
	}
	sh.put(key, act)
	sh.mu.Unlock()
	c.forgetDeparture(key)
	return nil
}

// unregister takes act out of the index and its host's members, and stops its timers.
func (c *Catalog) unregister(act *actor) {
	key := act.key()
	sh := c.actors.of(key)
	sh.lock()
	if sh.m[key] == act {
		delete(sh.m, key)
	}
	sh.mu.Unlock()
	act.host.removeMember(act)
	act.stopTimers()
	if act.gate != nil {
		act.gate.Stop()
	}
	c.giveSlot(act)
}

// giveSlot gives back act's place under MaxActiveActors, if it holds one.
func (c *Catalog) giveSlot(act *actor) {
	if act.slot.Swap(false) {
		c.actorCount.Add(-1)
	}
}

// releaseActor deletes the record of an Actor that never served, spawned into a, with a
// budget of its own; the spawn holds its key. A release that fails is tried again in the
// background (releaseOrphan), which takes the key over: handed.
func (c *Catalog) releaseActor(a *activation, loc store.ActorLocation, host store.Host) (handed bool) {
	_, err := storeWrite(c, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.store.ReleaseActor(ctx, loc, host)
	})
	if err != nil && !errors.Is(err, store.ErrFenced) {
		c.log.Warn("could not release the record of an Actor whose spawn failed; it is tried again", "actor", loc.Key, "err", err)
		c.releaseOrphan(a, loc.Key, nil, true)
		return true
	}
	return false
}

// keyHold says why a key is in Catalog.spawning.
type keyHold uint8

const (
	holdSpawn  keyHold = iota // a spawn is bringing the Actor up
	holdSettle                // releaseOrphan releases its record
)

// orphanTries bounds releaseOrphan's tries of the store: about a minute of a store that does
// not answer, after which the record is left to the close of its host Spot.
const orphanTries = 30

// orphanWaitStep is how often a release in the background that waits for its key looks again.
const orphanWaitStep = 10 * time.Millisecond

// releaseWaits reports whether a release in the background waits for key.
func (c *Catalog) releaseWaits(key spotKey) bool {
	c.waitingMu.Lock()
	defer c.waitingMu.Unlock()
	return c.releasesWaiting[key] > 0
}

// waitForKey counts a release in the background that waits for key, from now until done is
// called once: no spawn takes key meanwhile (releaseWaits).
func (c *Catalog) waitForKey(key spotKey) (done func()) {
	c.waitingMu.Lock()
	defer c.waitingMu.Unlock()
	if c.releasesWaiting == nil {
		c.releasesWaiting = make(map[spotKey]int)
	}
	c.releasesWaiting[key]++
	return func() {
		c.waitingMu.Lock()
		defer c.waitingMu.Unlock()
		if c.releasesWaiting[key]--; c.releasesWaiting[key] == 0 {
			delete(c.releasesWaiting, key)
		}
	}
}

// awaitKey takes key, which waitForKey counts as waited for, for a release in the background
// once its holder (a spawn, or another release) lets go. It gives up when the node stops or a
// is no longer active (its close releases its members' records).
func (c *Catalog) awaitKey(a *activation, key spotKey) bool {
	tick := time.NewTicker(orphanWaitStep)
	defer tick.Stop()
	for {
		if _, busy := c.spawning.LoadOrStore(key, holdSettle); !busy {
			return true
		}
		if _, err := c.storeHost(a); err != nil {
			return false
		}
		select {
		case <-c.ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// releaseOrphan deletes in the background the record of the Actor key in a, which this node
// does not hold, after a write that should have settled it (a spawn, a release) ended with its
// outcome unknown or failed: otherwise the record names a Spot that holds nothing, and the ID
// can neither be called nor spawned again while that Spot lives. It holds the key in
// c.spawning while it reads and releases (held: the caller's spawn holds it already and hands
// it over), so that the ID is not spawned on this node meanwhile; a key that a spawn or
// another release holds, which owes this record nothing, it takes once they let go. It stops
// once the record is gone or names another Spot, an Actor of the ID other than closing is here
// (one that arrived: the index names it before its move commits), a is no longer active (its
// close releases its members' records; an Entry Spot's under an ended lease are the
// reclaimer's), or the node stops.
func (c *Catalog) releaseOrphan(a *activation, key store.ActorKey, closing *actor, held bool) {
	k := spotKey{key.Type, key.ID}
	waited := func() {} // ends the wait for the key, if any; once, whoever calls it first
	if held {
		c.spawning.Store(k, holdSettle)
	} else {
		// Counted before it tries the key: a spawn that comes after this does not take the
		// key before this release.
		waited = sync.OnceFunc(c.waitForKey(k))
		if _, busy := c.spawning.LoadOrStore(k, holdSettle); !busy {
			held = true
			waited()
		}
	}
	if !c.bg.goRun(func() {
		own := held
		defer func() {
			if own {
				c.spawning.Delete(k)
			}
		}()
		defer waited()
		wait := time.NewTimer(0)
		defer wait.Stop()
		for try, backoff := 0, 50*time.Millisecond; try < orphanTries; try, backoff = try+1, min(2*backoff, 2*time.Second) {
			select {
			case <-c.ctx.Done():
				return
			case <-wait.C:
			}
			wait.Reset(backoff)
			if !own {
				own = c.awaitKey(a, k)
				waited()
				if !own {
					return
				}
			}
			if done := c.releaseOrphanOnce(a, key, k, closing); done {
				return
			}
		}
		c.log.Warn("the record of an Actor this node does not hold could not be released; it goes with its Spot's", "actor", key)
	}) {
		waited()
		if held {
			c.spawning.Delete(k)
		}
	}
}

// releaseOrphanOnce is one try of releaseOrphan; done says there is nothing left to do.
func (c *Catalog) releaseOrphanOnce(a *activation, key store.ActorKey, k spotKey, closing *actor) (done bool) {
	host, err := c.storeHost(a)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
	defer cancel()
	loc, err := c.store.LookupActor(ctx, key)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return true
	case err != nil:
		return false
	case loc.Host != host.HostRef:
		return true
	}
	// Read after the record: an Actor that arrived here is in the index before its commit
	// names this Spot.
	if act, here := c.actors.get(k); here && act != closing {
		return true
	}
	err = c.store.ReleaseActor(ctx, loc, host)
	return err == nil
}

// closeMembers closes every Actor of a before a's own closing callback: each one's
// CloseHandler runs with reason on a's queue, then it leaves the index. Its record is
// released with a's (by the caller). An Actor in a move or a close of its own is waited for
// first. One still in a move then is a's only if a's index of Actors names it (namedMembers):
// one arriving is then a's member, and one leaving stays a's, as its move can no longer commit;
// otherwise one arriving is dropped (the Actor stays where it was) and one leaving is left to
// its move, which committed. The waits and the read have a budget of OperationTimeout each,
// within bound; the callbacks then share one that budget makes, so that a slow move or store
// leaves them their time.
func (c *Catalog) closeMembers(bound context.Context, a *activation, reason sdk.CloseReason, budget func() (context.Context, context.CancelFunc)) {
	members := a.memberList()
	if len(members) == 0 {
		return
	}
	// An Entry Spot, and a Spot whose owner lease ended, have no Releasing record to fence
	// the moves of their members: the close fences their records itself.
	fence := a.typ.desc.Kind == sdk.KindEntry || reason == sdk.CloseOwnerLost
	named := c.awaitMembers(bound, a, members, fence)
	ctx, cancel := budget()
	defer cancel()
	for _, act := range members {
		switch st := act.current(); {
		case act.committed.Load():
			// It moved: its held messages follow it, and it leaves on its own.
		case st == actorArriving && !named[act]:
			// It never served here, and its move did not commit (or its record could not be
			// read): the Actor stays where it was.
			c.dropArrival(act)
		case (st == actorMoving || st == actorDeparted) && named != nil && !named[act]:
			// Its move committed before the close fenced it: the move sees it through, to its
			// new Spot (or, if the record is gone, to its end), with the messages it holds.
			act.leftToMove.Store(true)
		default:
			if st == actorArriving {
				act.mu.Lock()
				act.source = nil // its move committed: nothing goes back to where it was
				act.mu.Unlock()
			}
			c.endActor(ctx, a, act, reason, true)
		}
	}
}

// awaitMembers waits, within a budget of OperationTimeout, for each of members (a's) that is in
// a move or a close of its own to end it. If some are still in a move then, arriving or
// leaving, it reads which members a's index names (namedMembers); named is nil when it did not
// read it, or the read failed. fence says that a's record does not fence its members' moves.
func (c *Catalog) awaitMembers(bound context.Context, a *activation, members []*actor, fence bool) (named map[*actor]bool) {
	wait, cancel := context.WithTimeout(bound, c.cfg.OperationTimeout)
	defer cancel()
	moving := false
	for _, act := range members {
		for !act.committed.Load() {
			act.mu.Lock()
			st, ch := act.current(), act.settled
			act.mu.Unlock()
			if st == actorActive || st == actorGone || ch == nil {
				break
			}
			select {
			case <-ch:
				continue // its move or close ended: look again
			case <-wait.Done():
			}
			break
		}
		switch act.current() {
		case actorArriving, actorMoving, actorDeparted:
			moving = moving || !act.committed.Load()
		}
	}
	if !moving {
		return nil
	}
	return c.namedMembers(bound, a, members, fence)
}

// namedMembers reads, in one read of a's index of Actors within a budget of its own, which of
// members the index names: those whose records name a. A User or Instance host's record is
// Releasing by now, which fences any move's commit still to come, into a or out of it, so the
// read is final: a committed arrival (D9) is a's member, to end with a with the state it
// carried; a member whose move out did not commit stays a's. An Entry host at its node's
// shutdown, and a host whose owner lease ended, have no such fence (fence): the records of the
// members in a move are fenced one by one (fenceMoves) within the same budget. named is nil
// when the read failed: the arrivals are then dropped, since the Actor may serve on where it
// was, and the leaving members end with a.
func (c *Catalog) namedMembers(bound context.Context, a *activation, members []*actor, fence bool) (named map[*actor]bool) {
	host, err := c.storeHost(a)
	if err == nil {
		reads, cancel := context.WithTimeout(bound, c.cfg.OperationTimeout)
		defer cancel()
		var keys []store.ActorKey
		if keys, err = c.store.HostActors(reads, host.HostRef); err == nil {
			in := make(map[store.ActorKey]bool, len(keys))
			for _, k := range keys {
				in[k] = true
			}
			named = make(map[*actor]bool, len(members))
			for _, act := range members {
				named[act] = in[act.storeKey()]
			}
			if fence {
				c.fenceMoves(reads, host, members, named)
			}
			return named
		}
	}
	c.log.Warn("a closing Spot could not read which of its Actors in a move are its own; those arriving are dropped without their closing callbacks",
		"spot", a.target(), "err", err)
	return nil
}

// fenceMoves makes what named says of the members of host still in a move final, for a host
// whose record does not fence their moves: each one's record is read and rewritten as it is
// (FenceActor), so that a commit still in flight fails its fence. A record that changed between
// the read and the rewrite is read again: a commit that landed first decides. A record that
// cannot be read or rewritten leaves that member as the index said, and a commit may still land
// after this.
func (c *Catalog) fenceMoves(ctx context.Context, host store.Host, members []*actor, named map[*actor]bool) {
	for _, act := range members {
		if act.committed.Load() {
			continue
		}
		arriving := false
		switch act.current() {
		case actorArriving:
			arriving = true
		case actorMoving, actorDeparted:
		default:
			continue
		}
		for range 3 {
			loc, err := c.store.LookupActor(ctx, act.storeKey())
			if err != nil {
				break
			}
			here := loc.Host == host.HostRef
			named[act] = here
			if here == arriving {
				break // the move has committed (or never can): there is nothing to stop
			}
			if _, err := c.store.FenceActor(ctx, loc); !errors.Is(err, store.ErrFenced) {
				break
			}
		}
	}
}

// endActor ends act with its Spot a, once: its held messages end unrun, its CloseHandler runs
// with reason on a's queue when callback says so, and it leaves the index.
func (c *Catalog) endActor(ctx context.Context, a *activation, act *actor, reason sdk.CloseReason, callback bool) {
	if !act.ended.CompareAndSwap(false, true) {
		return
	}
	act.state.Store(uint32(actorGone))
	act.stopTimers()
	c.dropHeld(act, fmt.Errorf("%w: actor %s/%q closed with its Spot (%s)", sdk.ErrNotFound, act.typ.desc.Name, act.id, reason))
	if h, ok := act.impl.(sdk.CloseHandler); ok && callback {
		c.notifyCloseOf(ctx, a, h, reason, act)
	}
	c.unregister(act)
	act.endSettled()
}

// dropHeld ends every message act holds with err, unrun.
func (c *Catalog) dropHeld(act *actor, err error) {
	act.mu.Lock()
	held := act.held
	act.held = nil
	act.mu.Unlock()
	for _, k := range held {
		k.finish(nil, err)
	}
}

// begin moves act from active to next (a move or a close), waiting first for a move or close
// in progress to end. ok, when set, may refuse to begin. met is the state of a close or move
// that ended while this one waited, which a close takes for its own.
func (act *actor) begin(ctx context.Context, next actorState, ok func() error) (met actorState, err error) {
	for {
		act.mu.Lock()
		st := act.current()
		if st == actorActive {
			// The host's lock orders this against the start of a relocation unit, which checks
			// that every member is active under it.
			a := act.host
			a.mu.Lock()
			if rl := a.relocating; rl != nil && !isClosed(rl.decided) && !a.ownTurn(ctx) {
				// Its Spot moves: the Actor goes with it, or stays; look again then. A turn of
				// the Spot itself goes first: the unit waits for that turn, and finding the
				// Actor no longer active, gives up and is tried again later.
				a.mu.Unlock()
				act.mu.Unlock()
				if _, err := act.cat.awaitRelocation(ctx, a); err != nil {
					return st, err
				}
				continue
			}
			if ok != nil {
				if err := ok(); err != nil {
					a.mu.Unlock()
					act.mu.Unlock()
					return st, err
				}
			}
			act.state.Store(uint32(next))
			a.mu.Unlock()
			act.settled = make(chan struct{})
			act.mu.Unlock()
			return st, nil
		}
		ch := act.settled
		act.mu.Unlock()
		switch {
		case st == actorGone:
			return st, errActorMoved
		case st == actorClosing && next != actorClosing:
			return st, fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, act.Target())
		case ch == nil:
			return st, fmt.Errorf("%w: %v is between two states", sdk.ErrStaleRoute, act.Target())
		}
		select {
		case <-ch:
			if st == actorClosing {
				return st, nil // the close it met ended
			}
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// endSettled wakes whoever waits for a move of act to end.
func (act *actor) endSettled() {
	act.mu.Lock()
	ch := act.settled
	act.settled = nil
	act.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// departures remembers, for a while, where Actors that moved away from this node went, so
// that a message sent along an old route is redirected there instead of failing.
type departures struct {
	mu sync.Mutex
	m  map[spotKey]departure
}

type departure struct {
	to    sdk.NodeID
	gen   uint64 // a relocated Spot's record generation on to; 0 for an Actor
	until time.Time
}

// departureTTL is how long the node a moved Actor or Spot went to is remembered, for the messages
// that come late; maxDepartures bounds them.
const (
	departureTTL  = 30 * time.Second
	maxDepartures = 65536
)

func (c *Catalog) rememberDeparture(key spotKey, to sdk.NodeID, gen uint64) {
	d := &c.departures
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = make(map[spotKey]departure)
	}
	if len(d.m) >= maxDepartures {
		for k, v := range d.m {
			if now.After(v.until) || len(d.m) >= maxDepartures {
				delete(d.m, k)
			}
		}
	}
	d.m[key] = departure{to: to, gen: gen, until: now.Add(departureTTL)}
}

func (c *Catalog) forgetDeparture(key spotKey) {
	d := &c.departures
	d.mu.Lock()
	delete(d.m, key)
	d.mu.Unlock()
}

// Departed returns the node the Actor or Spot t moved to from this node, if that was lately.
func (c *Catalog) Departed(t sdk.Target) (sdk.NodeID, bool) {
	moved := c.departed(t)
	if moved == nil {
		return "", false
	}
	return moved.Node, true
}

// departed is the redirect of a message for t, which moved from this node lately, or nil.
func (c *Catalog) departed(t sdk.Target) *MovedError {
	d := &c.departures
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.m[spotKey{t.Type(), t.ID()}]
	if !ok || time.Now().After(v.until) {
		return nil
	}
	return &MovedError{Node: v.to, Generation: v.gen}
}

// CloseActor explicitly closes act, an Actor on this node: new messages are refused, the
// queued ones run, its CloseHandler runs with CloseExplicit on its Spot's queue, then its
// record is released; its Spot serves on. Concurrent closes share one. From a turn of its
// Spot (act's own, or its Spot's), the close starts and returns: it runs after that turn.
func (c *Catalog) CloseActor(ctx context.Context, act *actor) error {
	if met, err := act.begin(ctx, actorClosing, nil); met == actorClosing || err != nil {
		return err // a close in progress ended (met), or the Actor left
	}
	a := act.host
	bctx := context.WithoutCancel(ctx)
	end := &actorEnd{cat: c, act: act, ctx: bctx, done: make(chan struct{})}
	if a.ownTurn(ctx) {
		// Behind the messages queued for it; a full lane leaves it to the lifecycle lane, which
		// also waits for them.
		if err := a.exec.Submit(exec.Item{Lane: sdk.LaneApplication}, end); err != nil {
			if err := a.exec.Submit(exec.Item{Lane: sdk.LaneLifecycle, AfterApplication: true}, end); err != nil {
				end.Drop(err)
			}
		}
		if !c.bg.goRun(func() { <-end.done; _ = c.finishActorClose(act) }) {
			return c.errStopping()
		}
		return nil
	}
	if err := c.submitApplication(ctx, a, end); err != nil {
		// Its Spot stopped taking application work (it is closing too): the lifecycle lane
		// runs the callback after the queued messages all the same.
		if err := c.submitLifecycle(ctx, a, end); err != nil {
			end.Drop(err)
		}
	}
	select {
	case <-end.done:
	case <-ctx.Done():
		// The close goes on without this caller.
		c.bg.goRun(func() { <-end.done; _ = c.finishActorClose(act) })
		return ctx.Err()
	}
	return c.finishActorClose(act)
}

// actorEnd runs an Actor's CloseHandler on its Spot's queue, after its queued messages.
type actorEnd struct {
	cat  *Catalog
	act  *actor
	ctx  context.Context
	once sync.Once
	done chan struct{}
}

func (w *actorEnd) Run() {
	w.once.Do(func() {
		defer close(w.done)
		h, ok := w.act.impl.(sdk.CloseHandler)
		if !ok || !w.act.ended.CompareAndSwap(false, true) {
			return // no callback, or its Spot's close ended it first
		}
		defer func() {
			if v := recover(); v != nil {
				w.cat.log.Error("closing callback panicked", "actor", w.act.typ.desc.Name, "id", w.act.id, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		// Its context is marked as a closing callback's: it runs on its Spot's queue.
		mark := w.cat.markCallback(w.ctx)
		defer mark.end()
		h.OnClose(mark, w.act.closingReason(sdk.CloseExplicit))
	})
}

func (w *actorEnd) Drop(error) { w.once.Do(func() { close(w.done) }) }

// finishActorClose releases the record of act, whose close callback ran, and ends it here.
func (c *Catalog) finishActorClose(act *actor) error {
	defer func() {
		act.ended.Store(true)
		act.state.Store(uint32(actorGone))
		c.unregister(act)
		act.endSettled()
	}()
	host, err := c.storeHost(act.host)
	if err != nil {
		return nil // its Spot closed meanwhile, and the record went with the Spot's
	}
	if act.lease != 0 && act.lease != host.Lease {
		return nil // its record names a lease that ended: it is the reclaimer's
	}
	_, err = storeWrite(c, func(ctx context.Context) (struct{}, error) {
		loc, err := c.store.LookupActor(ctx, act.storeKey())
		if err != nil {
			if errors.Is(err, sdk.ErrNotFound) {
				return struct{}{}, nil
			}
			return struct{}{}, err
		}
		return struct{}{}, c.store.ReleaseActor(ctx, loc, host)
	})
	if err != nil {
		c.log.Warn("the record of a closed Actor was not released; it is tried again", "actor", act.Target(), "err", err)
		// Before it leaves the index, so that no spawn of its ID here comes in between: the
		// release holds the ID, or waits for it ahead of any spawn (releaseWaits).
		c.releaseOrphan(act.host, act.storeKey(), act, false)
		return fmt.Errorf("close %v: %w", act.Target(), err)
	}
	return nil
}
