package catalog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Relocation units (F2–F7, F14, DESIGN §6). A User or Instance Spot moves with its Actors as one
// unit, from this node (the source) to another (the target):
//
//  1. hold: application admission closes; a message that meets the unit waits for its outcome
//     (its sender holds it, with no count or byte limit of its own: E5), then runs here again
//     or follows the Spot;
//  2. the turn in progress and the work already queued in the lane finish, in order, under
//     the lane's own reservation: their effects are part of the state that moves;
//  3. the Spot's and its Actors' states are taken (sdk.Relocatable);
//  4. the target makes the Spot from them; it is registered there as being created, so that a
//     message that reaches it first waits (B7);
//  5. one etcd transaction gives the record to the target, generation + 1, fenced on the
//     record's revision and both owner leases;
//  6. Message Follow: the source remembers where the Spot went and with which generation, and
//     redirects what reaches it late; the waiting senders look again;
//  7. the source's activation ends with CloseRelocated, and the target serves.
//
// A failure before step 5 is rolled back: the target drops what it made, and the Spot serves
// here again, the waiting messages first. A commit whose answer was lost is settled by
// issuing the same fenced commit again until the store tells.

// relocation is a unit in progress on its source.
type relocation struct {
	decided chan struct{} // closed once the unit committed or rolled back
	moved   *MovedError   // set before decided closes when the Spot moved
}

// MemberState is an Actor that moves with its Spot, with its state.
type MemberState struct {
	Actor sdk.Target
	State []byte
}

// Arrival is a Spot a relocation unit brings to a node.
type Arrival struct {
	Spot    sdk.Target
	State   []byte
	Members []MemberState
	// Methods is the source's method shapes of the Spot's and its Actors' types (Shapes);
	// the target refuses a unit whose methods it does not all serve alike.
	Methods []string
	Token   uint64
}

// SpotPeers is how a relocation unit reaches its target; the mesh provides it.
type SpotPeers interface {
	// PrepareSpot asks node to make the arriving Spot; the answer is the target's
	// registration, the commit's fence.
	PrepareSpot(ctx context.Context, node sdk.NodeID, in Arrival) (store.Owner, error)
	// SettleSpot tells node that the unit token of t committed as rec: the Spot serves there.
	SettleSpot(ctx context.Context, node sdk.NodeID, t sdk.Target, token uint64, rec store.Record) error
	// AbortSpot tells node that the unit token of t failed: it drops what it made.
	AbortSpot(ctx context.Context, node sdk.NodeID, t sdk.Target, token uint64) error
}

// Errors of a relocation unit, for the host's answer (F3).
var (
	// ErrPinned: the Spot, or one of its Actors, has no state to carry and its type's policy
	// is RelocationPin.
	ErrPinned = fmt.Errorf("%w: a pinned object has no state to carry", sdk.ErrInvalidArgument)
	// ErrIncompatible: the target does not serve the Spot's or its Actors' types alike.
	ErrIncompatible = fmt.Errorf("%w: the target does not serve the type alike", sdk.ErrUnhandled)
	// ErrMarshalState: an object's MarshalState failed; the object stays where it was.
	ErrMarshalState = errors.New("catalog: the object's state could not be taken")
	// ErrUnitBusy: the Spot, or one of its Actors, is closing or moving; the unit may be tried
	// again later.
	ErrUnitBusy = fmt.Errorf("%w: the Spot or one of its Actors is closing or moving", sdk.ErrInvalidArgument)
)

// relocation returns a's unit in progress, or nil.
func (a *activation) relocation() *relocation {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.relocating
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// RestoredState implements sdk.SpotContext.
func (a *activation) RestoredState() []byte { return a.restored }

// awaitRelocation waits for the unit in progress on a, if any, and returns where the Spot
// went (nil: it stays here).
func (c *Catalog) awaitRelocation(ctx context.Context, a *activation) (*MovedError, error) {
	rl := a.relocation()
	if rl == nil {
		return nil, nil
	}
	select {
	case <-rl.decided:
		return rl.moved, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// LocalSpots returns the User and Instance Spots active on this node, in a stable order.
func (c *Catalog) LocalSpots() []sdk.Target {
	var out []sdk.Target
	c.slots.eachLocked(func(sl *slot) {
		if sl.spot != nil && sl.spot.base().current() == stateActive {
			out = append(out, sl.spot.base().target())
		}
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type() != out[j].Type() {
			return out[i].Type() < out[j].Type()
		}
		return out[i].ID() < out[j].ID()
	})
	return out
}

// enter counts a creation, spawn or arrival from before its check of relocating until the
// returned func, called once it shows itself or gave up (see Catalog.entering).
func (c *Catalog) enter() func() {
	c.entering.Add(1)
	return func() { c.entering.Add(-1) }
}

// Unsettled reports whether an object is on its way onto this node: a creation, a spawn or an
// arrival (of a relocation unit, or of an Actor into an Entry Spot) that began before
// SetRelocating(true) and has not ended. A relocation waits for them before it finds nothing
// left to move (F7): what they bring becomes a unit of its own, or nothing.
func (c *Catalog) Unsettled() bool {
	if c.entering.Load() > 0 {
		return true
	}
	found := false
	c.slots.eachLocked(func(sl *slot) {
		found = found || sl.creating != nil
	})
	if found {
		return true
	}
	for _, e := range c.entries {
		for _, act := range e.memberList() {
			if act.current() == actorArriving {
				return true
			}
		}
	}
	return false
}

// EntryActors returns the Actors that are members of this node's Entry Spots, with their Spot.
func (c *Catalog) EntryActors() map[sdk.Target]sdk.Target {
	out := make(map[sdk.Target]sdk.Target)
	for _, e := range c.entries {
		for _, act := range e.memberList() {
			if act.current() == actorActive {
				out[act.Target()] = e.target()
			}
		}
	}
	return out
}

// Pinned reports whether the Spot t, active here, or one of its Actors, has no state to carry
// and a type whose policy is RelocationPin.
func (c *Catalog) Pinned(t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return false
	}
	if pinned(sp.base().typ, sp.base().impl) {
		return true
	}
	for _, act := range sp.base().memberList() {
		if pinned(act.typ, act.impl) {
			return true
		}
	}
	return false
}

// ActorPinned is Pinned for an Actor on this node.
func (c *Catalog) ActorPinned(t sdk.Target) bool {
	act, ok := c.LocalActor(t)
	return ok && pinned(act.typ, act.impl)
}

func pinned(typ *spotType, impl any) bool {
	_, relocatable := impl.(sdk.Relocatable)
	return !relocatable && typ.opts.Relocation == sdk.RelocationPin
}

// Shapes describes the methods of the types this node registers, one string per method:
// "type.method(request)reply" (a one-way method's reply is "-"). A relocation's target must
// serve every method of the source alike.
func (c *Catalog) Shapes(types ...string) []string {
	var out []string
	for _, name := range types {
		typ, ok := c.types[name]
		if !ok {
			continue
		}
		out = append(out, typeShapes(typ)...)
	}
	sort.Strings(out)
	return out
}

func typeShapes(typ *spotType) []string {
	out := make([]string, 0, len(typ.desc.Methods))
	for i := range typ.desc.Methods {
		m := &typ.desc.Methods[i]
		reply := "-"
		if !m.OneWay && m.NewReply != nil {
			reply = string(m.NewReply().ProtoReflect().Descriptor().FullName())
		}
		req := string(m.NewRequest().ProtoReflect().Descriptor().FullName())
		out = append(out, typ.desc.Name+"."+m.Name+"("+req+")"+reply)
	}
	return out
}

// RelocateSpot moves the Spot t, active on this node, with its Actors, to node as one
// relocation unit (see the top of this file). ctx bounds the steps before the commit; once the
// commit is sent, the unit finishes whatever ctx does. It returns nil once the Spot serves on
// node, and otherwise an error, the Spot serving here again: ErrPinned, ErrIncompatible,
// ErrUnitBusy, a store error, or the target's refusal.
func (c *Catalog) RelocateSpot(ctx context.Context, t sdk.Target, node sdk.NodeID) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if node == c.cfg.Node {
		return fmt.Errorf("%w: relocate %v: node %s is its source", sdk.ErrInvalidArgument, t.Plain(), node)
	}
	if c.peers == nil {
		return fmt.Errorf("%w: node %s reaches no other node", sdk.ErrNotServing, c.cfg.Node)
	}
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil || sp.Kind() != t.Kind() {
		return fmt.Errorf("%w: %v is not active on node %s", sdk.ErrNotFound, t.Plain(), c.cfg.Node)
	}
	if c.Pinned(t) {
		return fmt.Errorf("relocate %v: %w", t.Plain(), ErrPinned)
	}
	a := sp.base()
	a.mu.Lock()
	if a.closing != nil || a.relocating != nil || a.current() != stateActive || a.torn {
		a.mu.Unlock()
		return fmt.Errorf("relocate %v: %w", t.Plain(), ErrUnitBusy)
	}
	for act := range a.members {
		if act.current() != actorActive {
			// Its move or close holds or forwards messages that must reach a lane.
			a.mu.Unlock()
			return fmt.Errorf("relocate %v: %v: %w", t.Plain(), act.Target(), ErrUnitBusy)
		}
	}
	rl := &relocation{decided: make(chan struct{})}
	a.relocating = rl
	a.state.Store(uint32(stateRelocating))
	// Counted before its decision, which a close of the Spot waits for: Close then waits for
	// the unit's end too, so that the settle of a unit that committed is not cut.
	c.units.Add(1)
	defer c.units.Done()
	a.mu.Unlock()
	a.exec.CloseApplication(false)

	err := c.relocate(ctx, sp, rl, node)
	if rl.moved == nil {
		// Rolled back: the Spot serves here again, and the messages that waited look again.
		a.exec.OpenApplication()
		a.mu.Lock()
		a.relocating = nil
		if a.current() == stateRelocating {
			a.state.Store(uint32(stateActive))
		}
		a.mu.Unlock()
		close(rl.decided)
	}
	if err != nil {
		return fmt.Errorf("relocate %v to %s: %w", t.Plain(), node, err)
	}
	return nil
}

// relocate runs steps 2 to 7 of the unit rl of sp. It sets rl.moved once the Spot moved.
func (c *Catalog) relocate(ctx context.Context, sp ownedSpot, rl *relocation, node sdk.NodeID) error {
	a := sp.base()
	t := a.target()
	wctx, cancel := context.WithTimeout(ctx, c.cfg.OperationTimeout)
	defer cancel()
	if err := c.awaitTurnEnd(wctx, a); err != nil {
		return err
	}
	in, err := c.snapshotUnit(wctx, a)
	if err != nil {
		return err
	}
	in.Token = rand.Uint64() | 1
	owner, err := c.peers.PrepareSpot(wctx, node, in)
	if err != nil {
		// Its answer may have been lost after the Spot was made there.
		c.abortSpot(node, t, in.Token)
		return err
	}
	if !a.turnAllowed() {
		c.abortSpot(node, t, in.Token)
		return a.errLeaseEnded()
	}
	// From here the unit is a shared operation: the caller's cancellation ends nothing, the
	// node's forced stop ends it.
	rec := sp.record()
	key := sp.storeKey()
	moved, err := storeWrite(c, func(ctx context.Context) (store.Record, error) {
		return c.store.MoveSpot(ctx, key, rec, owner, in.Token)
	})
	if err != nil {
		// A fenced answer too: the store says fenced when, after a lost answer, it finds the
		// record moved on, which it may have done after this very commit took (its target
		// released it). awaitMoveOutcome tells a commit that never took from that.
		moved, err = c.awaitMoveOutcome(key, rec, owner, in.Token, err)
		if errors.Is(err, errMoveUnknown) {
			// The commit may have taken, or the record moved on: the source must not serve
			// again. It ends here as if it moved; the target settles by the record, and the
			// reconcile looks at what the record says of this node.
			c.departSpot(sp, rl, node, store.Record{Generation: rec.Generation + 1})
			c.suspect(key)
			return err
		}
	}
	if err != nil {
		c.abortSpot(node, t, in.Token)
		return err
	}
	c.departSpot(sp, rl, node, moved)
	c.settleSpot(node, t, in.Token, moved)
	return nil
}

// errMoveUnknown: the node stopped before the store told whether a unit's commit took.
var errMoveUnknown = fmt.Errorf("%w: the outcome of the relocation's commit is not known", sdk.ErrStoreUnavailable)

// awaitMoveOutcome learns whether the commit of a unit whose answer was lost (cause) took, by
// issuing the same fenced commit again: of the two, exactly one can commit, so a read alone never
// concludes that a commit did not happen. It asks until the store tells, or the node's forced
// stop (errMoveUnknown).
func (c *Catalog) awaitMoveOutcome(key store.SpotKey, rec store.Record, to store.Owner, token uint64, cause error) (store.Record, error) {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		moved, err := storeWrite(c, func(ctx context.Context) (store.Record, error) {
			return c.store.MoveSpot(ctx, key, rec, to, token)
		})
		if err == nil {
			return moved, nil
		}
		if errors.Is(err, store.ErrFenced) {
			res, lerr := storeWrite(c, func(ctx context.Context) (store.Resolution, error) { return c.store.Lookup(ctx, key) })
			if lerr == nil {
				r := res.Record
				switch {
				case res.State == store.StateReady && r.Owner == to && r.Attempt == token && r.Incarnation == rec.Incarnation:
					return r, nil
				case res.State != store.StateMissing && r.Revision == rec.Revision:
					return store.Record{}, err // not committed, and it never will be: roll back
				}
				// The record moved on past this unit (its target settled by the record and the
				// Spot went on from there): the source must not serve it again.
				return store.Record{}, fmt.Errorf("%w: the record moved on meanwhile", errMoveUnknown)
			}
		}
		if c.hardCtx.Err() != nil {
			return store.Record{}, fmt.Errorf("%w: %v", errMoveUnknown, cause)
		}
		select {
		case <-c.hardCtx.Done():
		case <-time.After(backoff):
		}
	}
}

// snapshotUnit takes the states of a and its Actors on a's queue, after everything queued
// before; nothing else runs there meanwhile, since application admission is closed.
func (c *Catalog) snapshotUnit(ctx context.Context, a *activation) (Arrival, error) {
	w := &snapshotWork{cat: c, a: a, done: make(chan struct{})}
	if err := c.submitLifecycle(ctx, a, w); err != nil {
		return Arrival{}, err
	}
	select {
	case <-w.done:
		return w.out, w.err
	case <-ctx.Done():
		return Arrival{}, fmt.Errorf("MarshalState of %v did not return in time: %w", a.target(), ctx.Err())
	}
}

// snapshotWork takes the states of a Spot and its Actors on the Spot's queue.
type snapshotWork struct {
	cat  *Catalog
	a    *activation
	done chan struct{}
	out  Arrival
	err  error
}

func (w *snapshotWork) Run() {
	defer close(w.done)
	c, a := w.cat, w.a
	if a.pendingClose() != nil {
		w.err = ErrUnitBusy // a close was asked for meanwhile: it goes first
		return
	}
	in := Arrival{Spot: a.target()}
	types := []string{a.typ.desc.Name}
	state, err := c.marshalState(a, a.impl, a.target())
	if err != nil {
		w.err = err
		return
	}
	in.State = state
	for _, act := range a.memberList() {
		if act.current() != actorActive {
			w.err = fmt.Errorf("%v: %w", act.Target(), ErrUnitBusy)
			return
		}
		st, err := c.marshalState(a, act.impl, act.Target())
		if err != nil {
			w.err = err
			return
		}
		in.Members = append(in.Members, MemberState{Actor: act.Target(), State: st})
		types = append(types, act.typ.desc.Name)
	}
	in.Methods = c.Shapes(types...)
	w.out = in
}

func (w *snapshotWork) Drop(err error) {
	w.err = err
	close(w.done)
}

// departSpot ends the source's side of a unit that committed as rec: the Spot and its Actors
// leave this node's index, where they went is remembered for the messages that come late,
// the waiting messages look again, and the activation ends with CloseRelocated.
func (c *Catalog) departSpot(sp ownedSpot, rl *relocation, node sdk.NodeID, rec store.Record) {
	a := sp.base()
	members := a.memberList()
	for _, act := range members {
		act.movedTo = node
		act.committed.Store(true)
		act.state.Store(uint32(actorGone))
		c.rememberDeparture(act.key(), node, 0)
		c.unregister(act)
		act.ended.Store(true)
		act.endSettled()
	}
	c.rememberDeparture(spotKey{a.typ.desc.Name, a.id}, node, rec.Generation)
	c.retire(sp, sdk.CloseRelocated)
	// rl stays on the retired activation: a close or a message that meets it later learns
	// where the Spot went.
	rl.moved = &MovedError{Node: node, Generation: rec.Generation}
	end := func() {
		ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
		defer cancel()
		c.notifyClose(ctx, a, sdk.CloseRelocated)
		a.teardown()
		a.exec.Close(fmt.Errorf("%w: %v moved to node %s", sdk.ErrStaleRoute, a.target(), node))
	}
	// Started before the waiters wake: a close of the node that one of them lets go on must
	// find the end tracked, or it runs here.
	started := c.bg.goRun(end)
	close(rl.decided)
	if !started {
		end()
	}
}

// settleSpot tells the target that the unit committed; a target that does not hear it settles
// by the record.
func (c *Catalog) settleSpot(node sdk.NodeID, t sdk.Target, token uint64, rec store.Record) {
	ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	if err := c.peers.SettleSpot(ctx, node, t, token, rec); err != nil {
		c.log.Warn("could not tell the target of a relocation that it committed; it settles by the record", "spot", t, "node", node, "err", err)
	}
}

// abortSpot tells node to drop the arrival of t for token.
func (c *Catalog) abortSpot(node sdk.NodeID, t sdk.Target, token uint64) {
	ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	if err := c.peers.AbortSpot(ctx, node, t, token); err != nil {
		c.log.Warn("could not drop the arrival of a relocation that failed; its node drops it by the record", "spot", t, "node", node, "err", err)
	}
}

// arrival is a Spot being received here by a relocation unit: registered as being created, so
// that messages for it wait, until the unit settles or aborts.
type arrival struct {
	sp      ownedSpot
	owner   store.Owner // the registration it arrives under
	token   uint64
	members []*actor
	cr      *creation
	gate    *time.Timer
}

// PrepareSpot receives the Spot of in from its source: it is made here from its state, with
// its Actors, and waits, as a Spot being created does, until the unit settles. It answers this
// node's registration for the unit's commit.
func (c *Catalog) PrepareSpot(ctx context.Context, in Arrival) (store.Owner, error) {
	t := in.Spot
	if err := t.Validate(); err != nil {
		return store.Owner{}, err
	}
	if c.stopping.Load() {
		return store.Owner{}, c.errStopping()
	}
	defer c.enter()()
	if c.cfg.ClientOnly || c.relocating.Load() {
		return store.Owner{}, fmt.Errorf("%w: node %s is not an Object Server that takes objects now", sdk.ErrNotServing, c.cfg.Node)
	}
	typ, err := c.ownedType(t)
	if err != nil {
		return store.Owner{}, fmt.Errorf("%w: %v", ErrIncompatible, err)
	}
	var types []string
	for _, m := range in.Members {
		if err := m.Actor.Validate(); err != nil {
			return store.Owner{}, err
		}
		if _, err := c.actorType(m.Actor.Type()); err != nil {
			return store.Owner{}, fmt.Errorf("%w: %v", ErrIncompatible, err)
		}
		types = append(types, m.Actor.Type())
	}
	if missing := missingShapes(in.Methods, c.Shapes(append(types, t.Type())...)); len(missing) > 0 {
		return store.Owner{}, fmt.Errorf("%w: node %s does not serve %v", ErrIncompatible, c.cfg.Node, missing)
	}
	reg := c.registration()
	if !reg.Guard().Valid() {
		return store.Owner{}, fmt.Errorf("%w: node %s's owner lease is not certainly valid", sdk.ErrNotServing, c.cfg.Node)
	}
	key := spotKey{t.Type(), t.ID()}
	sh := c.slots.of(key)
	sh.lock()
	if _, busy := sh.m[key]; busy {
		sh.mu.Unlock()
		return store.Owner{}, fmt.Errorf("%w: %v is already active or being created on node %s", sdk.ErrAlreadyExists, t.Plain(), c.cfg.Node)
	}
	if !c.takeActive() {
		sh.mu.Unlock()
		return store.Owner{}, &sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: int64(c.cfg.MaxActive)}
	}
	cr := &creation{done: make(chan struct{})}
	sh.put(key, &slot{creating: cr})
	sh.mu.Unlock()

	sp := c.newOwned(typ, t.ID(), reg)
	a := sp.base()
	a.restored = in.State
	// Nothing of it runs before the unit commits: what OnActivate starts (timers) waits for the
	// settle; the source may still serve the Spot.
	a.exec.CloseApplication(false)
	ar := &arrival{sp: sp, owner: reg.Owner(), token: in.Token, cr: cr}
	consented := false
	fail := func(err error) (store.Owner, error) {
		if consented {
			c.withdraw(ar)
		}
		c.dropSpotArrival(ar, err)
		return store.Owner{}, err
	}
	impl, err := c.build(ctx, a, sp, typ, nil)
	if err != nil {
		return fail(&creationError{msg: fmt.Sprintf("%v: %v arriving on %s: %v", sdk.ErrCreationFailed, t.Plain(), c.cfg.Node, err), cause: err})
	}
	a.impl = impl
	for _, m := range in.Members {
		act, err := c.arriveMember(ctx, a, m, in.Token)
		if err != nil {
			return fail(err)
		}
		ar.members = append(ar.members, act)
	}
	skey := store.SpotKey{Type: key.typ, ID: key.id}
	consented = true // from here a consent may exist, even if its write reports a failure
	if err := c.store.ConsentArrival(ctx, skey, reg.Owner(), in.Token); err != nil {
		return fail(err)
	}
	c.arrivalsMu.Lock()
	if c.arrivalsClosed {
		c.arrivalsMu.Unlock()
		return fail(c.errStopping())
	}
	if c.arrivals == nil {
		c.arrivals = make(map[spotKey]*arrival)
	}
	// A unit whose source stopped before it settled or aborted is settled by the record.
	ar.gate = time.AfterFunc(2*c.cfg.OperationTimeout, func() { c.bg.goRun(func() { c.settleSpotByRecord(key, ar) }) })
	c.arrivals[key] = ar
	c.arrivalsMu.Unlock()
	return reg.Owner(), nil
}

// missingShapes returns the shapes of want that have is missing; both are sorted.
func missingShapes(want, have []string) []string {
	var out []string
	for _, w := range want {
		i := sort.SearchStrings(have, w)
		if i == len(have) || have[i] != w {
			out = append(out, w)
		}
	}
	return out
}

// arriveMember makes the Actor of m, arriving with its Spot a: it holds its messages until the
// unit settles.
func (c *Catalog) arriveMember(ctx context.Context, a *activation, m MemberState, token uint64) (*actor, error) {
	typ, err := c.actorType(m.Actor.Type())
	if err != nil {
		return nil, err
	}
	key := spotKey{m.Actor.Type(), m.Actor.ID()}
	if err := c.takeActor(key); err != nil {
		return nil, err
	}
	act := &actor{cat: c, typ: typ, id: m.Actor.ID(), host: a, restored: m.State, settled: make(chan struct{}), token: token}
	act.slot.Store(true)
	act.state.Store(uint32(actorArriving))
	if err := c.constructActor(ctx, act); err != nil {
		act.discard()
		c.giveSlot(act)
		return nil, factoryFailure(err, func() string { return fmt.Sprintf("%v arriving on %s", m.Actor, c.cfg.Node) })
	}
	if err := c.register(act, false); err != nil {
		act.discard()
		c.giveSlot(act)
		return nil, err
	}
	return act, nil
}

// takeArrival removes the arrival of key for token, if it is there.
func (c *Catalog) takeArrival(key spotKey, token uint64) *arrival {
	c.arrivalsMu.Lock()
	defer c.arrivalsMu.Unlock()
	ar := c.arrivals[key]
	if ar == nil || ar.token != token {
		return nil
	}
	delete(c.arrivals, key)
	return ar
}

// SettleSpot lets the Spot t, arrived here by the unit token that committed as rec, serve: the
// messages that waited for it are admitted, and its Actors take theirs.
func (c *Catalog) SettleSpot(t sdk.Target, token uint64, rec store.Record) {
	key := spotKey{t.Type(), t.ID()}
	c.arrivalsMu.Lock()
	ar := c.arrivals[key]
	if ar == nil || ar.token != token || rec.Owner != ar.owner || rec.Attempt != token {
		c.arrivalsMu.Unlock()
		return // not a commit of this arrival: it settles by the record
	}
	delete(c.arrivals, key)
	c.arrivalsMu.Unlock()
	c.settleSpotArrival(key, ar, rec)
}

func (c *Catalog) settleSpotArrival(key spotKey, ar *arrival, rec store.Record) {
	ar.gate.Stop()
	sp := ar.sp
	sp.setRecord(rec)
	sp.base().fence = sdk.Fence{Epoch: rec.Revision, Lease: rec.Owner.Lease}
	sp.base().exec.OpenApplication()
	sh := c.slots.of(key)
	sh.lock()
	if sl := sh.m[key]; sl != nil && sl.creating == ar.cr {
		sl.creating, sl.spot = nil, sp
	}
	sh.mu.Unlock()
	if inst, ok := sp.(*instanceSpot); ok {
		c.idle.add(inst)
	}
	c.forgetDeparture(key)
	ar.cr.spot = sp
	close(ar.cr.done)
	for _, act := range ar.members {
		c.settleArrival(act)
	}
	c.settleLate(sp)
}

// AbortSpot drops the Spot t that was arriving here by the unit token, which failed. The
// consent is withdrawn first, and the record read if a commit took it, so that not even a
// stray abort drops a Spot the record gives this node.
func (c *Catalog) AbortSpot(t sdk.Target, token uint64) {
	key := spotKey{t.Type(), t.ID()}
	if ar := c.takeArrival(key, token); ar != nil {
		ar.gate.Stop()
		c.resolveArrival(key, ar, true)
	}
}

// dropSpotArrival ends an arrival that will not serve: its Actors and its object are dropped
// (its CloseHandler runs with CloseCreationFailed, as for a creation that failed), and the
// messages that waited for it are refused unrun, so that their senders look again.
func (c *Catalog) dropSpotArrival(ar *arrival, err error) {
	for _, act := range ar.members {
		c.dropArrival(act)
	}
	sp := ar.sp
	a := sp.base()
	if a.impl != nil {
		ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
		c.notifyClose(ctx, a, sdk.CloseCreationFailed)
		cancel()
	}
	a.state.Store(uint32(stateClosed))
	a.exec.Close(fmt.Errorf("%w: %v did not arrive", sdk.ErrClosed, a.target()))
	a.teardown()
	key := spotKey{a.typ.desc.Name, a.id}
	sh := c.slots.of(key)
	sh.lock()
	if sl := sh.m[key]; sl != nil && sl.creating == ar.cr {
		delete(sh.m, key)
	}
	sh.mu.Unlock()
	c.active.Add(-1)
	ar.cr.err = err
	close(ar.cr.done)
}

// settleSpotByRecord ends an arrival that was neither settled nor aborted in time.
func (c *Catalog) settleSpotByRecord(key spotKey, ar *arrival) {
	c.arrivalsMu.Lock()
	mine := c.arrivals[key] == ar
	c.arrivalsMu.Unlock()
	if mine {
		c.resolveArrival(key, ar, false)
	}
}

// resolveArrival ends the arrival ar by the record. It withdraws this node's consent first:
// from then on no commit can give it the Spot, so the record tells for good whether the unit
// committed. A store that does not answer leaves it pending for another look, unless final.
func (c *Catalog) resolveArrival(key spotKey, ar *arrival, final bool) {
	skey := store.SpotKey{Type: key.typ, ID: key.id}
	withdrawn, err := storeWrite(c, func(ctx context.Context) (bool, error) { return c.store.WithdrawArrival(ctx, skey, ar.token) })
	var res store.Resolution
	if err == nil && !withdrawn {
		res, err = storeWrite(c, func(ctx context.Context) (store.Resolution, error) { return c.store.Lookup(ctx, skey) })
	}
	if err != nil && !final {
		ar.gate.Reset(c.cfg.OperationTimeout)
		return
	}
	c.arrivalsMu.Lock()
	if c.arrivals[key] == ar {
		delete(c.arrivals, key)
	} else if !final {
		c.arrivalsMu.Unlock()
		return // settled or aborted meanwhile
	}
	c.arrivalsMu.Unlock()
	r := res.Record
	if err == nil && !withdrawn && res.State == store.StateReady && r.Owner == ar.owner && r.Attempt == ar.token {
		c.settleSpotArrival(key, ar, r)
		return
	}
	c.dropSpotArrival(ar, fmt.Errorf("%w: %s/%q did not arrive on node %s", sdk.ErrStaleRoute, key.typ, key.id, c.cfg.Node))
}

// withdraw deletes this node's consent to ar, whose unit will not commit here; a consent left
// behind goes with the node's lease.
func (c *Catalog) withdraw(ar *arrival) {
	a := ar.sp.base()
	skey := store.SpotKey{Type: a.typ.desc.Name, ID: a.id}
	if _, err := storeWrite(c, func(ctx context.Context) (bool, error) { return c.store.WithdrawArrival(ctx, skey, ar.token) }); err != nil {
		c.log.Debug("could not withdraw the consent to an arrival that was dropped", "spot", skey, "err", err)
	}
}

// endArrivals ends the arrivals still pending when the node closes, and refuses later ones:
// each settles if its unit committed (and then closes with the node), or is dropped.
func (c *Catalog) endArrivals() {
	c.arrivalsMu.Lock()
	pending := c.arrivals
	c.arrivals, c.arrivalsClosed = nil, true
	c.arrivalsMu.Unlock()
	var wg sync.WaitGroup
	for key, ar := range pending {
		ar.gate.Stop()
		wg.Go(func() { c.resolveArrival(key, ar, true) })
	}
	wg.Wait()
}

// AdmitFollow admits, as Admit does, a message that follows the relocated Spot t with the
// generation gen of its record here (Message Follow): only where the Spot holds gen or a later
// one (the one place a generation is checked, C2). One that the relocation held (held) enters
// the lane without the lane's limits and without a job permit (E5). One still arriving answers
// ErrCreating: wait with AwaitCreation, then admit again.
func (c *Catalog) AdmitFollow(ctx context.Context, t sdk.Target, gen uint64, held bool, method string, req proto.Message, size int, oneWay bool, done Answer) error {
	if err := c.checkFollow(t, gen); err != nil {
		return err
	}
	return c.admit(ctx, t, method, req, size, oneWay, held, done)
}

// checkFollow checks that the Spot t holds generation gen or a later one here.
func (c *Catalog) checkFollow(t sdk.Target, gen uint64) error {
	sp, creating := c.slotOf(spotKey{t.Type(), t.ID()})
	switch {
	case sp == nil && creating:
		return ErrCreating
	case sp == nil:
		if moved := c.departed(t); moved != nil {
			return moved
		}
		return fmt.Errorf("%w: node %s does not hold %v", sdk.ErrStaleRoute, c.cfg.Node, t.Plain())
	}
	if have := sp.record().Generation; have < gen {
		return fmt.Errorf("%w: %v on node %s is at generation %d, the message follows generation %d", sdk.ErrStaleRoute, t.Plain(), c.cfg.Node, have, gen)
	}
	return nil
}

var _ exec.Work = (*snapshotWork)(nil)

// MoveActorTo moves the Actor t, on this node, into the Spot to, as MoveActor does; for a
// host's relocation of the Actors of its Entry Spots.
func (c *Catalog) MoveActorTo(ctx context.Context, t, to sdk.Target) error {
	act, ok := c.LocalActor(t)
	if !ok {
		return fmt.Errorf("%w: %v is not on node %s", sdk.ErrNotFound, t, c.cfg.Node)
	}
	if pinned(act.typ, act.impl) {
		return fmt.Errorf("move %v: %w", t, ErrPinned)
	}
	return c.moveNow(ctx, act, to)
}
