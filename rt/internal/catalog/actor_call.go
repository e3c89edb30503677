package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

// errActorMoved: the Actor left this node (or closed) as the message came, and the message did
// not run; the caller looks for it again.
var errActorMoved = fmt.Errorf("%w: the Actor is no longer on this node", sdk.ErrStaleRoute)

// IsActorMoved reports whether err says that an Actor left this node before a message for it
// ran: the message may be routed again.
func IsActorMoved(err error) bool { return errors.Is(err, errActorMoved) }

// MovedError refuses a message for an Actor or a Spot that moved from this node to Node lately:
// the sender follows it there. The message did not run. Generation, for a Spot a relocation
// moved, is the generation of its record there: the message follows it with that generation,
// and the node admits it only once it holds that generation or a later one (C2).
type MovedError struct {
	Node       sdk.NodeID
	Generation uint64
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("%v: it moved to node %s", sdk.ErrStaleRoute, e.Node)
}

// Unwrap makes it match sdk.ErrStaleRoute.
func (e *MovedError) Unwrap() error { return sdk.ErrStaleRoute }

// errHeld says admit held the message while its Actor moves.
var errHeld = errors.New("catalog: held while the Actor moves")

// admit puts k, a message for act, on act's host's application lane, or holds it while act
// moves (errHeld). The lock orders admissions against a move: a message admitted as active is
// on the lane before the move's departure is.
//
// A held one-way message is acknowledged only once it is admitted where it runs (or ends
// unrun): its sender sends its next message only then, so that no later message of the same
// sender can overtake it — a later message may reach the move's other end, whose messages go
// first or last by the move's protocol, not by when they were sent. fresh says k comes from
// its sender now (a message that follows the Actor within this node keeps what its first
// admission decided, and one from a turn of the Actor's own Spot is answered at once, since
// the move's departure waits for that very turn). For a held fresh one-way message without a
// done callback, ack is where its sender learns the outcome.
func (act *actor) admit(k *call, it exec.Item, fresh bool) (ack <-chan error, err error) {
	k.a, k.actor = act.host, act // a message that follows the Actor changes Spot with it
	act.mu.Lock()
	defer act.mu.Unlock()
	switch act.current() {
	case actorActive:
	case actorArriving:
		if !k.follow {
			return act.holdAcked(k, fresh), errHeld
		}
	case actorMoving, actorDeparted:
		return act.holdAcked(k, fresh), errHeld
	case actorClosing:
		return nil, fmt.Errorf("%w: actor %s/%q is closing", sdk.ErrNotFound, act.typ.desc.Name, act.id)
	default:
		return nil, errActorMoved
	}
	answer := k.detachAnswer() // a held message that follows the Actor here: answered once admitted
	act.seq++
	k.seq, k.counted = act.seq, true
	act.queued.Add(1)
	if err := act.host.exec.Submit(it, k); err != nil {
		k.counted = false
		act.queued.Add(-1)
		if answer != nil {
			answer(err)
		}
		return nil, err
	}
	if answer != nil {
		answer(nil)
	}
	return nil, nil
}

// holdAcked holds k; a fresh one-way message is answered later (see admit). act.mu is held.
func (act *actor) holdAcked(k *call, fresh bool) <-chan error {
	var ack chan error
	if fresh && k.oneWay {
		k.ackHeld = true
		if k.onDone == nil {
			ack = make(chan error, 1)
			k.ack = ack
		}
	}
	act.hold(k)
	return ack
}

// hold keeps k to follow act, or to run here again if its move fails; act.mu is held. A held
// message gives back its job permit and its bytes: the hold has no limit of its own (E5).
func (act *actor) hold(k *call) {
	if k.seq == 0 {
		act.seq++
		k.seq = act.seq
	}
	k.settle()
	act.held = append(act.held, k)
}

// mayRun decides, as k's turn comes, whether it runs here: a message queued before its Actor
// departed runs; one that reaches its turn after is held to follow the Actor, in its admission
// order; one for an Actor already gone ends unrun.
func (act *actor) mayRun(k *call) bool {
	switch act.current() {
	case actorActive, actorMoving, actorClosing:
		act.ran(k)
		return true
	case actorArriving:
		if k.follow {
			act.ran(k)
			return true
		}
	}
	act.mu.Lock()
	switch act.current() {
	case actorDeparted, actorArriving, actorMoving:
		// Held before it leaves the queued count, so that a move that waits for the count to
		// reach zero finds it among the held messages.
		act.hold(k)
		act.ran(k)
		act.mu.Unlock()
		return false
	case actorActive:
		act.mu.Unlock()
		act.ran(k)
		return true
	}
	act.mu.Unlock()
	act.ran(k)
	if act.committed.Load() {
		// Queued before the Actor departed, it reached its turn only after the Actor's held
		// messages had followed it (a turn ahead of it outlasted the wait): it follows alone.
		if !act.cat.bg.goRun(func() { act.cat.forward(act.movedTo, act, k) }) {
			k.finish(nil, act.cat.errStopping())
		}
		return false
	}
	k.finish(nil, errActorMoved)
	return false
}

// ran takes k out of act's queued count.
func (act *actor) ran(k *call) {
	if k.counted {
		k.counted = false
		act.queued.Add(-1)
	}
}

// takeHeld returns act's held messages in their admission order; act.mu is held.
func (act *actor) takeHeld() []*call {
	held := act.held
	act.held = nil
	slices.SortStableFunc(held, func(x, y *call) int {
		switch {
		case x.seq < y.seq:
			return -1
		case x.seq > y.seq:
			return 1
		}
		return 0
	})
	return held
}

// requeue puts held messages back on act's host's lane, in their order, after any still
// queued there; act.mu is held. A message its lane refuses ends with the refusal.
func (act *actor) requeue(held []*call) {
	for _, k := range held {
		answer := k.detachAnswer() // answered once admitted again, where it runs
		k.a, k.actor = act.host, act
		act.queued.Add(1)
		k.counted = true
		if err := act.host.exec.Submit(exec.Item{Lane: sdk.LaneApplication, Payload: int64(proto.Size(k.req)), Activity: true, Unbounded: true}, k); err != nil {
			k.counted = false
			act.queued.Add(-1)
			err = closingAsNotFound(describeRefusal(err, act.host, k.md), act)
			k.finish(nil, err)
			if answer != nil {
				answer(err)
			}
			continue
		}
		if answer != nil {
			answer(nil)
		}
	}
}

// DeliverActor runs method on act, an Actor on this node, from a caller on this node. admitted
// is Deliver's: false says the message did not run and may be routed again (the Actor just
// left this node).
func (c *Catalog) DeliverActor(ctx context.Context, act *actor, method string, req proto.Message, oneWay bool) (reply proto.Message, admitted bool, err error) {
	md, err := c.method(act.typ, method, oneWay, req)
	if err != nil {
		if errors.Is(err, sdk.ErrUnhandled) && act.movedAway() {
			// Its new node, not this one, judges a message it has no handler for (C1, I1).
			return nil, false, errActorMoved
		}
		return nil, false, err
	}
	a := act.host
	if !a.turnAllowed() || !act.leaseHeld() {
		return nil, false, c.errLeaseNotValid()
	}
	if !oneWay && a.ownTurn(ctx) {
		return nil, false, fmt.Errorf("%w: %s.%s on Actor %q is a request from a turn of its Spot %s/%q, which would wait for that turn to end: call it from elsewhere, or Send",
			sdk.ErrInvalidArgument, act.typ.desc.Name, md.Name, act.id, a.typ.desc.Kind, a.id)
	}
	k := newCall(oneWay)
	k.ctx, k.a, k.md, k.req, k.oneWay, k.actor = ctx, a, md, req, oneWay, act
	it := exec.Item{Lane: sdk.LaneApplication, Payload: int64(proto.Size(req)), Activity: true}
	if !oneWay && act.current() == actorActive {
		// As for a Spot: a request that finds the host idle runs at once on its caller's
		// goroutine; nothing is queued before it, so it keeps its place among the Actor's
		// messages.
		company := a.enter(ctx)
		defer a.leave()
		it.Inline, it.InlineOnly, it.Company = true, true, company
		err = a.exec.Submit(it, k)
		if err == nil {
			return await(ctx, k)
		}
		if err != exec.ErrNotInline {
			k.release()
			return nil, false, c.actorRefusal(ctx, err, act, md)
		}
		// Queued, it does not make the runner of the host's queue yield (exec.Item.Company):
		// measured, an Actor's callers lose more throughput to those yields than their tail
		// gains.
		it.Inline, it.InlineOnly, it.Company = false, false, false
	}
	reserved, perr := c.cfg.Meter.Acquire(ctx, nestedJob)
	if perr != nil {
		k.release()
		return nil, false, perr
	}
	k.permit, k.reserved = true, reserved
	ack, err := act.admit(k, it, !(oneWay && a.ownTurn(ctx)))
	switch {
	case err == errHeld && !oneWay:
		return await(ctx, k)
	case err == errHeld && ack == nil:
		return nil, true, nil // from its Spot's own turn: answered at once
	case err == errHeld:
		// k is not ours any more: whoever admits it again, or ends it, answers here.
		select {
		case err := <-ack:
			// One that ended unrun because the Actor left is routed again by the caller.
			return nil, !IsActorMoved(err), err
		case <-ctx.Done():
			return nil, true, ctx.Err()
		}
	case err != nil:
		k.release()
		if errors.Is(err, errActorMoved) {
			return nil, false, err
		}
		return nil, false, c.actorRefusal(ctx, err, act, md)
	case oneWay:
		return nil, true, nil
	}
	return await(ctx, k)
}

// AdmitActor admits a message a peer sent for the Actor t, like Admit does for a Spot (C1):
// it runs only where the Actor is a member of a Spot active here under a certainly valid owner
// lease. An Actor that moved from here lately is refused with *MovedError naming its new node;
// one this node does not hold, with sdk.ErrStaleRoute. follow marks a message that follows the
// Actor from its old Spot, which an Actor arriving here takes before any other.
func (c *Catalog) AdmitActor(ctx context.Context, t sdk.Target, method string, req proto.Message, size int, oneWay, follow bool, done Answer) error {
	act, ok := c.LocalActor(t)
	if !ok {
		if node, moved := c.Departed(t); moved {
			return &MovedError{Node: node}
		}
		return fmt.Errorf("%w: node %s does not hold %v", sdk.ErrStaleRoute, c.cfg.Node, t)
	}
	md, err := c.method(act.typ, method, oneWay, nil)
	if err != nil {
		return err
	}
	if follow && act.current() == actorArriving && act.gate != nil {
		// Its old node is still sending what it held: the arrival waits for it.
		act.gate.Reset(2 * c.cfg.OperationTimeout)
	}
	if !act.host.turnAllowed() || !act.leaseHeld() {
		return c.errLeaseNotValid()
	}
	err = c.submit(ctx, act.host, act, md, req, size, oneWay, follow, done)
	if errors.Is(err, exec.ErrAdmissionClosed) {
		if act.host.relocation() != nil {
			return ErrClosing // its Spot moves: wait with AwaitActorHost, then admit again
		}
		return fmt.Errorf("%w: %v: its Spot %v is closing", sdk.ErrNotFound, t, act.host.target())
	}
	if errors.Is(err, errActorMoved) {
		if node, moved := c.Departed(t); moved {
			return &MovedError{Node: node}
		}
	}
	return err
}

// actorRefusal describes why act's host refused a message for act. A host whose close is being
// decided is waited for: if it serves on, ErrClosing says to try again.
func (c *Catalog) actorRefusal(ctx context.Context, err error, act *actor, md *sdk.MethodDesc) error {
	if err != exec.ErrAdmissionClosed {
		return describeRefusal(err, act.host, md)
	}
	a := act.host
	if a.guard == nil {
		return c.errStopping()
	}
	if a.ownTurn(ctx) {
		// The close or relocation of its Spot waits for this very turn.
		return fmt.Errorf("%w: %s.%s on %v from its Spot's own turn: the Spot is closing or moving", sdk.ErrClosed, act.typ.desc.Name, md.Name, act.Target())
	}
	// Should this wait ever hold up a peer's stream's reader, the peer is told meanwhile that
	// the stream is read.
	if werr := capacity.AsReader(ctx, func(ctx context.Context) error { return c.awaitDecision(ctx, a) }); werr != nil {
		return werr
	}
	if act.committed.Load() {
		return errActorMoved // it moved with its Spot: its sender looks for it again
	}
	if a.current() == stateActive {
		return ErrClosing
	}
	return fmt.Errorf("%w: %v: its Spot %v is closing", sdk.ErrNotFound, act.Target(), a.target())
}

// AwaitActorHost waits until a relocation unit that moves the Spot of the Actor t, on this
// node, has an outcome, so that a message AdmitActor refused with ErrClosing can be admitted
// again: here, or where the Actor went.
func (c *Catalog) AwaitActorHost(ctx context.Context, t sdk.Target) error {
	act, ok := c.LocalActor(t)
	if !ok {
		return nil
	}
	_, err := c.awaitRelocation(ctx, act.host)
	return err
}
