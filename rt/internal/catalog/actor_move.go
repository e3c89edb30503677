package catalog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Peers is how a move of an Actor, or a relocation unit, reaches another node; the mesh
// provides it.
type Peers interface {
	SpotPeers
	// PrepareArrival asks node to receive the Actor actor, with its state, as a member of the
	// Spot host there, for the move token; the answer is host's fence as node holds it.
	PrepareArrival(ctx context.Context, node sdk.NodeID, actor, host sdk.Target, state []byte, token uint64) (store.Host, error)
	// SettleArrival tells node that the move token of actor committed and its held messages
	// followed it: the Actor takes every message there now.
	SettleArrival(ctx context.Context, node sdk.NodeID, actor sdk.Target, token uint64) error
	// AbortArrival tells node that the move token of actor failed: it drops what it received.
	AbortArrival(ctx context.Context, node sdk.NodeID, actor sdk.Target, token uint64) error
	// Follow delivers a held message to the Actor on node, ahead of those sent there directly,
	// and returns its outcome.
	Follow(ctx context.Context, node sdk.NodeID, actor sdk.Target, method string, req proto.Message, oneWay bool) (proto.Message, error)
}

// SetPeers sets how moves reach other nodes; call it before Start.
func (c *Catalog) SetPeers(p Peers) { c.peers = p }

// sameSpot reports whether x and y address the same Spot, whatever their intent.
func sameSpot(x, y sdk.Target) bool {
	return x.Kind() == y.Kind() && x.Type() == y.Type() && x.ID() == y.ID() && x.Node() == y.Node()
}

// errOutcomePending: the commit of a move was sent and its outcome is not known yet; the
// Actor holds its messages until the record tells, and then follows them or serves them here.
var errOutcomePending = fmt.Errorf("%w: the move's commit was sent and its outcome is not known yet; the Actor holds its messages until the store tells", sdk.ErrStoreUnavailable)

// MoveActor moves act, an Actor on this node, into the Spot to, on whatever node that Spot is
// (DESIGN §6): as one unit, its new messages are held, its last turn here ends, its state is
// taken (sdk.Relocatable), the new Spot receives it, one etcd transaction commits the new
// host, and the held messages follow it in order. A move of act in progress is waited for
// first. Called from a turn of act's Spot (act's own, or its Spot's), it checks the move and
// returns, and the move runs once that turn ended (its failure is logged). A failure before
// the commit leaves the Actor where it was, serving its held messages. An Actor that left this
// node meanwhile answers an error IsActorMoved matches.
func (c *Catalog) MoveActor(ctx context.Context, act *actor, to sdk.Target) error {
	if err := to.Validate(); err != nil {
		return err
	}
	if !to.Kind().IsSpot() {
		return fmt.Errorf("%w: an Actor moves into a Spot, and %v is not one", sdk.ErrInvalidArgument, to)
	}
	if !act.host.ownTurn(ctx) {
		return c.moveNow(ctx, act, to)
	}
	// The move's departure waits for this very turn: it is checked now and runs after.
	if sameSpot(act.host.target(), to) {
		return fmt.Errorf("%w: %v is already a member of %v", sdk.ErrInvalidArgument, act.Target(), to.Plain())
	}
	if _, err := c.spotNode(ctx, to); err != nil {
		return fmt.Errorf("move %v to %v: %w", act.Target(), to.Plain(), err)
	}
	if !c.bg.goRun(func() {
		mctx, cancel := context.WithTimeout(c.ctx, 2*c.cfg.OperationTimeout)
		defer cancel()
		if err := c.moveNow(mctx, act, to.Plain()); err != nil && !errors.Is(err, errOutcomePending) {
			c.log.Warn("a move started from its Spot's own turn failed; the Actor stays where it was", "actor", act.Target(), "to", to.Plain(), "err", err)
		}
	}) {
		return c.errStopping()
	}
	return nil
}

// moveNow runs a move of act, waiting for one in progress first.
func (c *Catalog) moveNow(ctx context.Context, act *actor, to sdk.Target) error {
	if _, err := act.begin(ctx, actorMoving, func() error {
		if sameSpot(act.host.target(), to) {
			return fmt.Errorf("%w: %v is already a member of %v", sdk.ErrInvalidArgument, act.Target(), to.Plain())
		}
		// begin holds the host's lock: a Spot whose close is pending or under way ends its
		// members with it, and none of them starts to leave meanwhile.
		if h := act.host; h.closing != nil || h.torn || h.current() != stateActive {
			return fmt.Errorf("%w: %v: its Spot %v is closing", sdk.ErrNotFound, act.Target(), h.target())
		}
		return nil
	}); err != nil {
		return err
	}
	err := c.move(ctx, act, to)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errOutcomePending), errors.Is(err, errActorLost):
		return fmt.Errorf("move %v to %v: %w", act.Target(), to.Plain(), err)
	}
	c.rollback(act)
	return fmt.Errorf("move %v to %v: %w", act.Target(), to.Plain(), err)
}

// move runs the steps of a move of act, which is moving, up to the commit, and starts the rest.
func (c *Catalog) move(ctx context.Context, act *actor, to sdk.Target) error {
	from := act.host
	node, err := c.spotNode(ctx, to)
	if err != nil {
		return err
	}
	if c.stopping.Load() {
		return c.errStopping()
	}
	fromHost, err := c.storeHost(from)
	if err != nil {
		return err
	}
	loc, err := c.store.LookupActor(ctx, act.storeKey())
	if err != nil {
		return err
	}
	if loc.Host != fromHost.HostRef {
		return fmt.Errorf("%w: its record names %s, not %v", sdk.ErrStaleRoute, loc.Host, from.target())
	}
	state, err := c.depart(ctx, act)
	if err != nil {
		return err
	}
	// From here the move is a shared operation: the caller's cancellation ends nothing, the
	// node's forced stop ends it.
	wctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	token := rand.Uint64() | 1
	var toHost store.Host
	if node == c.cfg.Node {
		toHost, err = c.prepare(wctx, act.Target(), to.Plain(), state, act, token)
	} else if c.peers == nil {
		err = fmt.Errorf("%w: node %s cannot reach node %s", sdk.ErrNotServing, c.cfg.Node, node)
	} else {
		toHost, err = c.peers.PrepareArrival(wctx, node, act.Target(), to.Plain(), state, token)
		if err != nil {
			// Its answer may have been lost after the arrival was made there.
			c.abortArrival(node, act, token)
		}
	}
	if err != nil {
		return err
	}
	if _, err := c.store.MoveActor(wctx, loc, fromHost, toHost); err != nil {
		outcome, known := moveStayed, true
		if !errors.Is(err, store.ErrNotMember) && !errors.Is(err, store.ErrHostNotReady) {
			// Refused by its fence, or unanswered: the record tells what happened (a fence also
			// fails once the record is gone).
			outcome, known = c.moveOutcome(loc, fromHost, toHost)
		}
		if !known {
			if !c.bg.goRun(func() { c.awaitOutcome(act, node, loc, fromHost, toHost, token) }) {
				c.log.Warn("the node stops while a move's outcome is unknown; the Actor ends with it", "actor", act.Target())
				c.endUnknown(act)
			}
			return errOutcomePending
		}
		switch outcome {
		case moveStayed:
			c.abortArrival(node, act, token)
			return err
		case moveLost:
			c.abortArrival(node, act, token)
			c.endLost(act)
			return fmt.Errorf("%w: %w", errActorLost, err)
		}
	}
	c.committed(act, node, token)
	return nil
}

// endUnknown ends act, whose move's outcome will not be known on this node (it stops), if its
// Spot's close left it to its move: its held messages end unrun. Any other Actor ends with its
// Spot, which closes with the node.
func (c *Catalog) endUnknown(act *actor) {
	if act.leftToMove.Load() {
		c.endActor(context.Background(), act.host, act, sdk.CloseShutdown, false)
	}
}

// moveOutcome is what a move's commit did, as the Actor's record tells.
type moveOutcome uint8

const (
	// moveStayed: the record names the source; the Actor serves on there.
	moveStayed moveOutcome = iota
	// moveCommitted: the record names the target.
	moveCommitted
	// moveLost: the record is gone, or names neither Spot. The commit may have happened and
	// the target ended the Actor since, its record with it (or the record was reclaimed): the
	// Actor lives on neither side, and the source does not serve it again.
	moveLost
)

// errActorLost: a move found the Actor's record gone, and the Actor ended unrun where it was.
var errActorLost = fmt.Errorf("%w: the Actor's record is gone; it ended where it was", sdk.ErrNotFound)

// endLost ends act, whose record no longer names its Spot, without its CloseHandler: another
// node ended it, or no node holds it any more. Its held messages end unrun.
func (c *Catalog) endLost(act *actor) {
	if !act.ended.CompareAndSwap(false, true) {
		return
	}
	act.state.Store(uint32(actorGone))
	act.stopTimers()
	c.dropHeld(act, fmt.Errorf("%w: actor %s/%q", errActorLost, act.typ.desc.Name, act.id))
	c.unregister(act)
	act.endSettled()
}

// committed starts the end of a move of act to node whose commit succeeded: its timers stop
// here, and its held messages follow it.
func (c *Catalog) committed(act *actor, node sdk.NodeID, token uint64) {
	act.movedTo = node
	act.committed.Store(true)
	act.stopTimers()
	if !c.bg.goRun(func() { c.follow(act, node, token) }) {
		c.follow(act, node, token)
	}
}

// awaitOutcome asks the store until it tells whether the move of act to toHost committed, then
// follows it or serves here again.
func (c *Catalog) awaitOutcome(act *actor, node sdk.NodeID, loc store.ActorLocation, fromHost, toHost store.Host, token uint64) {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		select {
		case <-c.ctx.Done():
			// The node stops: its Actors end with their Spots, and the arrival by the record.
			c.endUnknown(act)
			return
		case <-time.After(backoff):
		}
		outcome, known := c.moveOutcome(loc, fromHost, toHost)
		if !known {
			continue
		}
		switch outcome {
		case moveCommitted:
			c.committed(act, node, token)
		case moveStayed:
			c.abortArrival(node, act, token)
			c.rollback(act)
		case moveLost:
			c.abortArrival(node, act, token)
			c.endLost(act)
		}
		return
	}
}

// moveOutcome tells what the move of the record at loc from fromHost to toHost did, by issuing
// the same fenced commit again with a budget of its own, then reading the record: of the two
// commits, exactly one can succeed, so a read alone never concludes that a commit whose answer
// was lost did not happen. known is false when the store did not answer.
func (c *Catalog) moveOutcome(loc store.ActorLocation, fromHost, toHost store.Host) (_ moveOutcome, known bool) {
	_, err := storeWrite(c, func(ctx context.Context) (store.ActorLocation, error) {
		return c.store.MoveActor(ctx, loc, fromHost, toHost)
	})
	if err == nil {
		return moveCommitted, true
	}
	if !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrNotMember) {
		return 0, false
	}
	now, err := storeWrite(c, func(ctx context.Context) (store.ActorLocation, error) {
		return c.store.LookupActor(ctx, loc.Key)
	})
	switch {
	case err == nil && (now.Host == toHost.HostRef || now.Incarnation == loc.Incarnation && now.Generation > loc.Generation):
		// It names the target, or a later move of the same record: only this move could
		// start from loc, so it committed, and the Actor may have moved on since.
		return moveCommitted, true
	case err == nil && now.Host == fromHost.HostRef:
		return moveStayed, true
	case err == nil, errors.Is(err, sdk.ErrNotFound):
		return moveLost, true
	}
	return 0, false
}

// spotNode returns the node of the Spot to, creating a missing Instance Spot when to states
// create-intent.
func (c *Catalog) spotNode(ctx context.Context, to sdk.Target) (sdk.NodeID, error) {
	if to.Kind() == sdk.KindEntry {
		return to.Node(), nil
	}
	mode := Plain
	if to.CreateIntent() {
		mode = Intent
	}
	route, err := c.Resolve(ctx, to, mode)
	if err != nil {
		return "", err
	}
	if route.Local() {
		return c.cfg.Node, nil
	}
	return route.Remote.Record.Owner.Node, nil
}

// departureWork is the end of an Actor's life in a Spot: it runs on the Spot's queue after
// every message queued for the Actor before it, and takes the Actor's state.
type departureWork struct {
	cat   *Catalog
	act   *actor
	claim atomic.Uint32 // 0 waiting, 1 ran, 2 given up by the mover
	done  chan struct{}
	state []byte
	err   error
}

func (d *departureWork) Run() {
	if !d.claim.CompareAndSwap(0, 1) {
		return
	}
	d.act.state.Store(uint32(actorDeparted))
	d.state, d.err = d.cat.marshalState(d.act.host, d.act.impl, d.act.Target())
	close(d.done)
}

func (d *departureWork) Drop(err error) {
	if d.claim.CompareAndSwap(0, 1) {
		d.err = err
		close(d.done)
	}
}

// depart ends act's turns here and returns its state: the departure waits on the Spot's
// queue behind act's queued messages, and a turn in progress.
func (c *Catalog) depart(ctx context.Context, act *actor) ([]byte, error) {
	// A caller without a deadline still gets an answer: a turn that never ends (one that waits
	// for this move itself) fails the move after OperationTimeout.
	bctx, cancel := context.WithTimeout(ctx, c.cfg.OperationTimeout)
	defer cancel()
	d := &departureWork{cat: c, act: act, done: make(chan struct{})}
	if err := c.submitApplication(bctx, act.host, d); err != nil {
		return nil, err
	}
	select {
	case <-d.done:
		return d.state, d.err
	case <-bctx.Done():
	}
	if d.claim.CompareAndSwap(0, 2) {
		return nil, fmt.Errorf("the turns before the Actor's departure did not end: %w", bctx.Err())
	}
	// It runs now: its state is taken in a moment, unless MarshalState hangs.
	select {
	case <-d.done:
		return d.state, d.err
	case <-time.After(c.cfg.OperationTimeout):
	case <-c.hardCtx.Done():
	}
	return nil, fmt.Errorf("MarshalState of %v did not return in time", act.Target())
}

// submitApplication puts w on a's application lane, behind the messages queued there, waiting
// for a place while the lane is full, bounded by ctx.
func (c *Catalog) submitApplication(ctx context.Context, a *activation, w exec.Work) error {
	for {
		err := a.exec.Submit(exec.Item{Lane: sdk.LaneApplication}, w)
		if err == nil {
			return nil
		}
		if errors.Is(err, exec.ErrAdmissionClosed) {
			return fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, a.target())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v's queue stayed full: %w", a.target(), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// marshalState takes the state of impl, the object of what, through sdk.Relocatable; an object
// without it moves empty. MarshalState runs as a turn of a, the Spot whose queue it runs on:
// a request it makes of a is refused rather than waiting for the very turn it runs in, and it
// has OperationTimeout to return.
func (c *Catalog) marshalState(a *activation, impl any, what sdk.Target) (state []byte, err error) {
	r, ok := impl.(sdk.Relocatable)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(a.spotContext(context.Background()), c.cfg.OperationTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("MarshalState panicked", "object", what, "panic", v, "stack", string(debug.Stack()))
			state, err = nil, fmt.Errorf("%w: MarshalState of %v: %v", sdk.ErrHandlerPanicked, what, v)
		}
	}()
	state, err = r.MarshalState(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: MarshalState of %v: %w", ErrMarshalState, what, err)
	}
	return state, nil
}

// rollback makes act, whose move failed before its commit, serve here again: its held
// messages go back on its Spot's queue in their order.
func (c *Catalog) rollback(act *actor) {
	if act.host.isTorn() {
		// Its Spot closed while it tried to leave: it ends as its Spot's members did.
		c.endActor(context.Background(), act.host, act, sdk.CloseOwnerLost, false)
		return
	}
	act.mu.Lock()
	if st := act.current(); st != actorMoving && st != actorDeparted {
		act.mu.Unlock()
		return
	}
	act.state.Store(uint32(actorActive))
	act.requeue(act.takeHeld())
	ch := act.settled
	act.settled = nil
	act.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// follow runs after a move of act committed: once every message queued for act before it
// departed has reached its turn (and was held), act is gone from here — a message that comes
// now is sent on to the new node by its sender, where it waits for the move to settle — and
// the held messages follow it to node in their order. Then the new Spot takes messages from
// anyone.
func (c *Catalog) follow(act *actor, node sdk.NodeID, token uint64) {
	if node != c.cfg.Node {
		c.rememberDeparture(act.key(), node, 0)
	}
	deadline := time.Now().Add(c.cfg.OperationTimeout)
	for act.queued.Load() > 0 && time.Now().Before(deadline) && c.hardCtx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	act.mu.Lock()
	act.state.Store(uint32(actorGone))
	held := act.takeHeld()
	act.mu.Unlock()
	for _, k := range held {
		c.forward(node, act, k)
	}
	c.unregister(act)
	act.endSettled()
	if node == c.cfg.Node {
		c.SettleArrival(act.Target(), token)
		return
	}
	ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	if err := c.peers.SettleArrival(ctx, node, act.Target(), token); err != nil {
		// The new node settles the arrival by the record when its wait ends.
		c.log.Warn("could not settle the arrival of a moved Actor", "actor", act.Target(), "node", node, "err", err)
	}
}

// forward sends k, held for act, to the Actor on node, where it runs before the messages sent
// there directly; its outcome goes to k's caller.
func (c *Catalog) forward(node sdk.NodeID, act *actor, k *call) {
	if !k.oneWay && k.ctx.Err() != nil {
		k.finish(nil, k.ctx.Err()) // its caller gave up while it was held: it never ran
		return
	}
	if node == c.cfg.Node {
		next, ok := c.actors.get(act.key())
		if !ok || next == act || next.current() == actorGone {
			k.finish(nil, fmt.Errorf("%w: %v lost its new Spot before the message ran", sdk.ErrNotFound, act.Target()))
			return
		}
		k.follow = true
		_, err := next.admit(k, exec.Item{Lane: sdk.LaneApplication, Payload: int64(proto.Size(k.req)), Activity: true, Unbounded: true}, false)
		if err != nil && err != errHeld {
			k.finish(nil, closingAsNotFound(err, next))
		}
		return
	}
	// A request waits for its caller at most, a one-way message for its admission; neither
	// longer than OperationTimeout, nor past the node's forced stop.
	parent := k.ctx
	if k.oneWay {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, c.cfg.OperationTimeout)
	defer cancel()
	stop := context.AfterFunc(c.hardCtx, cancel)
	defer stop()
	reply, err := c.peers.Follow(ctx, node, act.Target(), k.md.Name, k.req, k.oneWay)
	k.finish(reply, err)
}

// PrepareArrival receives the Actor actor, with its state, as a member of the Spot host on this
// node, for a move from another node: the Actor is made (its factory gets the state, and has
// ctx, the mover's request, and OperationTimeout to return), and it holds every message but
// those that follow it until the move settles. It returns host's fence for the move's commit.
func (c *Catalog) PrepareArrival(ctx context.Context, actor, host sdk.Target, state []byte, token uint64) (store.Host, error) {
	return c.prepare(ctx, actor, host, state, nil, token)
}

// prepare is PrepareArrival; source, for a move between two Spots of this node, is the Actor
// that leaves, whose place in the index the arriving one takes.
func (c *Catalog) prepare(ctx context.Context, actorT, hostT sdk.Target, state []byte, source *actor, token uint64) (store.Host, error) {
	if c.stopping.Load() {
		return store.Host{}, c.errStopping()
	}
	if source == nil && c.relocating.Load() {
		return store.Host{}, fmt.Errorf("%w: node %s is relocating its objects", sdk.ErrNotServing, c.cfg.Node)
	}
	if err := actorT.Validate(); err != nil {
		return store.Host{}, err
	}
	typ, err := c.actorType(actorT.Type())
	if err != nil {
		return store.Host{}, err
	}
	a, err := c.hostActivation(hostT)
	if err != nil {
		return store.Host{}, err
	}
	if err := c.openToMembers(a); err != nil {
		return store.Host{}, err
	}
	if !a.turnAllowed() {
		return store.Host{}, c.errLeaseNotValid()
	}
	host, err := c.storeHost(a)
	if err != nil {
		return store.Host{}, err
	}
	key := spotKey{actorT.Type(), actorT.ID()}
	act := &actor{cat: c, typ: typ, id: actorT.ID(), host: a, restored: state, settled: make(chan struct{}), token: token, lease: host.Lease}
	act.state.Store(uint32(actorArriving))
	// A move between two Spots of this node hands the leaving Actor's place over; any other
	// arrival takes one.
	if source != nil && source.slot.Swap(false) {
		act.slot.Store(true)
	} else if err := c.takeActor(key); err != nil {
		return store.Host{}, err
	} else {
		act.slot.Store(true)
	}
	if err := c.constructActor(ctx, act); err != nil {
		act.discard()
		c.handBack(act, source)
		return store.Host{}, factoryFailure(err, func() string { return fmt.Sprintf("%v arriving in %v", actorT, hostT) })
	}
	if source == nil {
		// Counted from here until it is a member, and refused if the node began to relocate
		// while its factory ran: a relocation waits for it, never for a factory (Unsettled).
		defer c.enter()()
		if c.relocating.Load() {
			act.discard()
			c.handBack(act, source)
			return store.Host{}, fmt.Errorf("%w: node %s is relocating its objects", sdk.ErrNotServing, c.cfg.Node)
		}
	}
	act.source = source
	// A move whose source stopped before it settled is settled by the record.
	act.gate = time.AfterFunc(2*c.cfg.OperationTimeout, func() { c.bg.goRun(func() { c.settleByRecord(act) }) })
	sh := c.actors.of(key)
	sh.lock()
	if cur, ok := sh.m[key]; ok && cur != source {
		sh.mu.Unlock()
		act.gate.Stop()
		act.discard()
		c.handBack(act, source)
		return store.Host{}, fmt.Errorf("%w: %v is already on node %s", sdk.ErrAlreadyExists, actorT, c.cfg.Node)
	}
	if !a.addMember(act, false) {
		sh.mu.Unlock()
		act.gate.Stop()
		act.discard()
		c.handBack(act, source)
		return store.Host{}, fmt.Errorf("%w: %v is closing or closed", sdk.ErrNotFound, hostT)
	}
	sh.put(key, act)
	sh.mu.Unlock()
	c.forgetDeparture(key)
	return host, nil
}

// handBack gives back the place under MaxActiveActors of an arrival that did not happen: to
// the Actor that stays, for a move between two Spots of this node.
func (c *Catalog) handBack(act, source *actor) {
	if source != nil && !source.ended.Load() && act.slot.Swap(false) {
		source.slot.Store(true)
		return
	}
	c.giveSlot(act)
}

// hostActivation is the activation of the Spot t on this node, which an Actor may join.
func (c *Catalog) hostActivation(t sdk.Target) (*activation, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	switch t.Kind() {
	case sdk.KindEntry:
		if t.Node() != c.cfg.Node {
			return nil, fmt.Errorf("%w: %v is on another node", ErrRemoteOwner, t)
		}
		e, ok := c.entries[t.Type()]
		if !ok {
			return nil, fmt.Errorf("%w: node %s has no Entry Spot %s", sdk.ErrNotFound, c.cfg.Node, t.Type())
		}
		return &e.activation, nil
	case sdk.KindUser, sdk.KindInstance:
		sp := c.spotAt(spotKey{t.Type(), t.ID()})
		if sp == nil || sp.Kind() != t.Kind() || sp.base().current() != stateActive {
			return nil, fmt.Errorf("%w: %v is not active on node %s", sdk.ErrNotFound, t.Plain(), c.cfg.Node)
		}
		return sp.base(), nil
	}
	return nil, fmt.Errorf("%w: an Actor is a member of a Spot, and %v is not one", sdk.ErrInvalidArgument, t)
}

// SettleArrival lets the Actor actor, arrived here by a move that committed and whose held
// messages followed it, take every message: the ones it held go to its Spot's queue first, in
// their order. It does nothing for an Actor that is not arriving.
func (c *Catalog) SettleArrival(actorT sdk.Target, token uint64) {
	act, ok := c.LocalActor(actorT)
	if !ok || act.token != token {
		return
	}
	c.settleArrival(act)
}

func (c *Catalog) settleArrival(act *actor) {
	act.mu.Lock()
	if act.current() != actorArriving {
		act.mu.Unlock()
		return
	}
	act.state.Store(uint32(actorActive))
	act.requeue(act.takeHeld())
	ch := act.settled
	act.settled, act.source = nil, nil
	act.mu.Unlock()
	if act.gate != nil {
		act.gate.Stop()
	}
	if ch != nil {
		close(ch)
	}
}

// AbortArrival drops the Actor actor that was arriving here by a move that failed. It does
// nothing for an Actor that is not arriving.
func (c *Catalog) AbortArrival(actorT sdk.Target, token uint64) {
	act, ok := c.LocalActor(actorT)
	if !ok || act.token != token || act.current() != actorArriving {
		return
	}
	c.dropArrival(act)
}

func (c *Catalog) dropArrival(act *actor) {
	act.mu.Lock()
	if act.current() != actorArriving {
		act.mu.Unlock()
		return
	}
	act.state.Store(uint32(actorGone))
	source := act.source
	act.source = nil
	held := act.takeHeld()
	act.mu.Unlock()
	if source != nil {
		// For a move between two Spots of this node, the Actor stays in its Spot, unless that
		// ended meanwhile: its place in the index and under the cap is its own again, and the
		// messages sent to the arrival join those it holds, after them, to run there.
		source.mu.Lock()
		st := source.current()
		alive := !source.ended.Load() && (st == actorMoving || st == actorDeparted)
		if alive {
			for _, k := range held {
				k.seq = 0
				source.hold(k)
			}
			held = nil
		}
		source.mu.Unlock()
		if alive {
			sh := c.actors.of(act.key())
			sh.lock()
			if sh.m[act.key()] == act {
				sh.m[act.key()] = source
			}
			sh.mu.Unlock()
			if act.slot.Swap(false) {
				source.slot.Store(true)
			}
		}
	}
	for _, k := range held {
		k.finish(nil, errActorMoved) // its sender looks for the Actor again
	}
	act.ended.Store(true)
	c.unregister(act)
	act.endSettled()
}

// abortArrival drops the arrival of act on node after its move (token) failed.
func (c *Catalog) abortArrival(node sdk.NodeID, act *actor, token uint64) {
	if node == c.cfg.Node {
		if next, ok := c.actors.get(act.key()); ok && next != act && next.token == token {
			c.dropArrival(next)
		}
		return
	}
	if c.peers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	if err := c.peers.AbortArrival(ctx, node, act.Target(), token); err != nil {
		c.log.Warn("could not drop the arrival of an Actor whose move failed; its node drops it by the record", "actor", act.Target(), "node", node, "err", err)
	}
}

// settleByRecord ends an arrival that was neither settled nor aborted in time: the record says
// whether the move committed.
func (c *Catalog) settleByRecord(act *actor) {
	if act.current() != actorArriving {
		return
	}
	act.mu.Lock()
	source := act.source
	act.mu.Unlock()
	if source != nil && !source.ended.Load() {
		if st := source.current(); st == actorMoving || st == actorDeparted {
			// A move between two Spots of this node is still under way here: it ends itself.
			act.gate.Reset(c.cfg.OperationTimeout)
			return
		}
	}
	host, herr := c.storeHost(act.host)
	for range 3 {
		loc, err := storeWrite(c, func(ctx context.Context) (store.ActorLocation, error) {
			return c.store.LookupActor(ctx, act.storeKey())
		})
		switch {
		case err == nil && herr == nil && loc.Host == host.HostRef:
			c.settleArrival(act)
			return
		case errors.Is(err, sdk.ErrNotFound):
			c.dropArrival(act)
			return
		case err != nil:
			act.gate.Reset(c.cfg.OperationTimeout)
			return
		}
		// The record names another Spot. The move's commit may still be in flight (its answer
		// lost, its source paused): the record is fenced first, so that the commit cannot land
		// after the drop and name a Spot that holds nothing.
		_, err = storeWrite(c, func(ctx context.Context) (store.ActorLocation, error) {
			return c.store.FenceActor(ctx, loc)
		})
		switch {
		case err == nil:
			c.dropArrival(act)
			return
		case !errors.Is(err, store.ErrFenced):
			act.gate.Reset(c.cfg.OperationTimeout)
			return
		}
		// The record changed since it was read: read it again.
	}
	act.gate.Reset(c.cfg.OperationTimeout)
}

// openToMembers fails when a is closing or a close of it is pending: a Spot whose close may have
// been decided on its members takes no new one. It does not wait for the decision, since a
// turn of a itself may be asking, and the close waits for that turn.
func (c *Catalog) openToMembers(a *activation) error {
	if a.pendingClose() != nil || a.current() != stateActive {
		return fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, a.target())
	}
	return nil
}

// closingAsNotFound says that a Spot whose admission closed is closing, in the sdk's terms.
func closingAsNotFound(err error, act *actor) error {
	if errors.Is(err, exec.ErrAdmissionClosed) {
		return fmt.Errorf("%w: %v: its Spot %v is closing", sdk.ErrNotFound, act.Target(), act.host.target())
	}
	return err
}
