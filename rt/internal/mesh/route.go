package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Routing is one loop over a next-hop decision. Each hop either ends the message — it ran, or
// it was refused for good — or names the next hop: the object's activation here, the store's
// answer about where it is, placement's choice for a new one, or a node to send it to. A
// message is sent again only when the node it went to refused it unrun (a redirect, a refusal
// at the activation cap or as not serving during placement, a refusal at the cap of a
// create-intent message on a cached route) or it never left this node; once a node admitted
// it, its outcome is the caller's answer, whatever it says (C3).

// hopKind is what the router does next with a message.
type hopKind uint8

const (
	// hopHere delivers to the object's activation on this node: an Entry Spot of this node, a
	// Spot the store resolved here, or an Actor in this node's index.
	hopHere hopKind = iota
	// hopResolve asks where the object is: a Spot's record (creating a missing Instance Spot
	// here on intent), or an Actor's record and its Spot's.
	hopResolve
	// hopPlace asks placement, or the call's OnNode, for the node that creates a missing
	// Instance Spot.
	hopPlace
	// hopSend sends the message to node.
	hopSend
)

// hop is the next step of one message.
type hop struct {
	kind hopKind
	node sdk.NodeID
	// route is where the store resolved a Spot on this node (hopHere).
	route catalog.Route
	// cached: node came from the route cache, and a message that never left may look again.
	cached bool
	// placed: placement chose chosen for this message, and a refusal at the activation cap,
	// there or wherever a redirect led, tries the next node.
	placed bool
	chosen sdk.NodeID
	// generation: the node redirected the message to a relocated Spot with this generation of
	// its record there, which the message carries (Message Follow, C2); held: the relocation
	// held it meanwhile.
	generation uint64
	held       bool
}

// maxHops bounds the hops of one message, besides placement's retries (bounded by the nodes it
// leaves out); each either waits on the store or is a refusal that ran nothing, so it is never
// reached in practice.
const maxHops = 16

// route takes a valid target's message from its first hop to its outcome.
func (m *Mesh) route(ctx context.Context, t sdk.Target, method string, req proto.Message, oneWay bool, opts sdk.CallOptions) (proto.Message, error) {
	var payload []byte
	var away refusals // nodes that refused unrun to create the Spot
	h := m.firstHop(t, true)
	for round := 0; round < maxHops+3*away.count(); round++ {
		switch h.kind {
		case hopHere:
			reply, next, err := m.deliverHere(ctx, t, h, method, req, oneWay)
			switch next {
			case hereDone:
				return reply, err
			case hereAbsent:
				// The Actor's record names this node, whose index does not have it yet: a
				// spawn or an arrival is being registered.
				if err := pause(ctx, round); err != nil {
					return nil, err
				}
			}
			h = hop{kind: hopResolve, placed: h.placed, chosen: h.chosen}

		case hopResolve:
			next, err := m.resolveHop(ctx, t)
			if err != nil {
				// A refusal of this node's, chosen by placement or reached by a redirect: both
				// are left out.
				if h.placed && away.note(err, h.chosen, m.cfg.Node) {
					h = hop{kind: hopPlace}
					continue
				}
				return nil, m.dispatched(ctx, t, method, oneWay, err)
			}
			next.placed, next.chosen = h.placed, h.chosen
			h = next

		case hopPlace:
			if opts.Node != "" {
				if err := opts.Node.Validate(); err != nil {
					return nil, fmt.Errorf("OnNode: %w", err)
				}
				h = hop{kind: hopSend, node: opts.Node}
				continue
			}
			node, err := m.place(t.Type(), t.ID(), away)
			if err != nil && away.reviveLed() {
				node, err = m.place(t.Type(), t.ID(), away)
			}
			if err != nil {
				return nil, err
			}
			h = hop{kind: hopSend, node: node, placed: true, chosen: node}

		case hopSend:
			if h.placed && h.node != h.chosen {
				if err := away.refusalOf(h.node); err != nil {
					// A second node's read of the Spot's record leads to the owner that refused
					// as not serving already, this node or another: the Spot has not moved (F7
					// moves it elsewhere), and every other node would lead there again. Its
					// refusal is the answer, after one other try rather than one through every
					// node.
					return nil, err
				}
			}
			if h.node == m.cfg.Node {
				h = m.hereHop(t, h)
				continue
			}
			if payload == nil {
				b, err := proto.Marshal(req)
				if err != nil {
					return nil, fmt.Errorf("%w: %v %s: cannot encode the message: %v", sdk.ErrInvalidArgument, t, method, err)
				}
				payload = b
			}
			reply, next, refused, err := m.send(ctx, t, h, method, payload, oneWay)
			switch {
			case next != nil:
				h = *next
			case refused && h.placed && away.note(err, h.chosen, h.node):
				h = hop{kind: hopPlace}
			case refused && h.cached && t.CreateIntent() && atActivationCap(err):
				// The cached node no longer holds the Spot and refused to create it again at
				// its cap, unrun: placement chooses, as if nothing had been cached.
				away.note(err, h.node)
				h = hop{kind: hopPlace}
			default:
				return reply, err
			}
		}
	}
	// The last redirect cached its node: the next message reads the owner from the store
	// rather than starting from the loop again (B6). Only that route goes: one that another
	// message cached meanwhile, from the store or a reply, stays.
	if h.kind == hopSend && !h.cached {
		m.routes.drop(t, h.node)
	}
	return nil, fmt.Errorf("%w: %v: its location kept changing (%d hops)", sdk.ErrStaleRoute, t, maxHops+3*away.count())
}

// callerEnded reports whether ctx has ended, or its deadline has passed although its timer has
// not fired yet: the transport answers DeadlineExceeded from then on.
func callerEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// refusals are the nodes that refused unrun to create a message's new Spot, which placement
// leaves out: at their activation cap (their published count lagged), or as not serving (they
// began a relocation or a drain that their published state did not show yet). Neither ran the
// message, so placing it on another node is no retry (C3).
type refusals struct {
	full, notServing []sdk.NodeID
	// last is the last refusal as not serving, which placement names when no node is left.
	last error
	// refusers are the nodes that refused as not serving themselves, each with its refusal.
	refusers []refusal
	// led are the nodes of notServing that did not refuse but led the message to a node that
	// did: a stale read of the record, or one of a Spot its owner has just closed. Placement
	// leaves them out while another node may take the Spot (reviveLed).
	led []sdk.NodeID
}

// refusal is a node's own refusal of a message as not serving.
type refusal struct {
	node sdk.NodeID
	err  error
}

// note records the refusal err of nodes and reports whether it is one that tries another node.
// The first of nodes is the one placement chose, the last the one that refused: the others led
// the message there.
func (r *refusals) note(err error, nodes ...sdk.NodeID) bool {
	switch {
	case atActivationCap(err):
		r.full = appendNew(r.full, nodes...)
	case errors.Is(err, sdk.ErrNotServing):
		refuser := nodes[len(nodes)-1]
		r.led = slices.DeleteFunc(r.led, func(n sdk.NodeID) bool { return n == refuser })
		for _, n := range nodes[:len(nodes)-1] {
			if n != refuser && !slices.Contains(r.notServing, n) {
				r.led = append(r.led, n)
			}
		}
		r.notServing = appendNew(r.notServing, nodes...)
		r.last = err
		// Only a node that a redirect or a read of the record led to is a refuser: the chosen
		// node's refusal turned down a creation, often for a moment (starting, a relocation
		// that may end Blocked), and says nothing of a Spot that serves there later.
		if n := len(nodes); n > 1 && nodes[n-1] != nodes[0] && r.refusalOf(nodes[n-1]) == nil {
			r.refusers = append(r.refusers, refusal{nodes[n-1], err})
		}
	default:
		return false
	}
	return true
}

// reviveLed takes the nodes that only led the message to a refuser back among those placement
// may choose, and reports whether there were any. With no other node left, such a node is
// asked again: its next read of the record finds the Spot released by an owner that closed it
// (and creates it), or leads to the same refuser, whose refusal is then the answer
// (refusalOf).
func (r *refusals) reviveLed() bool {
	if len(r.led) == 0 {
		return false
	}
	r.notServing = slices.DeleteFunc(r.notServing, func(n sdk.NodeID) bool { return slices.Contains(r.led, n) })
	r.led = nil
	return true
}

// refusalOf is node's own refusal as not serving, if it made one.
func (r *refusals) refusalOf(node sdk.NodeID) error {
	for _, f := range r.refusers {
		if f.node == node {
			return f.err
		}
	}
	return nil
}

func (r *refusals) count() int { return len(r.full) + len(r.notServing) }

// appendNew appends to s the nodes it does not hold yet.
func appendNew(s []sdk.NodeID, nodes ...sdk.NodeID) []sdk.NodeID {
	for _, n := range nodes {
		if n != "" && !slices.Contains(s, n) {
			s = append(s, n)
		}
	}
	return s
}

// firstHop is where a message for the valid target t starts, the route cache included when
// cache says so.
func (m *Mesh) firstHop(t sdk.Target, cache bool) hop {
	switch t.Kind() {
	case sdk.KindEntry:
		if t.Node() == m.cfg.Node {
			return hop{kind: hopHere}
		}
		return hop{kind: hopSend, node: t.Node()}
	case sdk.KindActor:
		if _, ok := m.cat.LocalActor(t); ok {
			return hop{kind: hopHere}
		}
	}
	if cache {
		// A cached Ready route: no store read (B6).
		if owner, ok := m.routes.get(t); ok && owner != m.cfg.Node {
			return hop{kind: hopSend, node: owner, cached: true}
		}
	}
	if t.CreateIntent() {
		return hop{kind: hopPlace}
	}
	return hop{kind: hopResolve}
}

// hereHop is the hop after h for a message whose next node is this one.
func (m *Mesh) hereHop(t sdk.Target, h hop) hop {
	if t.Kind() == sdk.KindEntry || t.Kind() == sdk.KindActor {
		return hop{kind: hopHere}
	}
	return hop{kind: hopResolve, placed: h.placed, chosen: h.chosen}
}

// resolveHop asks where the object t is, and answers the hop there.
func (m *Mesh) resolveHop(ctx context.Context, t sdk.Target) (hop, error) {
	if t.Kind() == sdk.KindActor {
		node, err := m.actorNode(ctx, t)
		if err != nil {
			return hop{}, err
		}
		if node == m.cfg.Node {
			return hop{kind: hopHere}, nil
		}
		return hop{kind: hopSend, node: node}, nil
	}
	mode := catalog.Plain
	if t.CreateIntent() {
		mode = catalog.Intent
	}
	route, err := m.cat.Resolve(ctx, t, mode)
	if node, moved := m.departedWhileRefusing(t, err); moved {
		return hop{kind: hopSend, node: node}, nil
	}
	if err != nil {
		return hop{}, err
	}
	if route.Local() {
		return hop{kind: hopHere, route: route}, nil
	}
	owner := route.Remote.Record.Owner.Node
	m.routes.put(t, owner)
	return hop{kind: hopSend, node: owner}, nil
}

// hereOutcome is what delivery to this node's activation left to do.
type hereOutcome uint8

const (
	// hereDone: the outcome is the caller's answer.
	hereDone hereOutcome = iota
	// hereRefused: an activation that is going (a Spot closing, an Actor that just left)
	// refused the message unrun; the router looks again.
	hereRefused
	// hereAbsent: the Actor is not in this node's index (yet); the router looks again.
	hereAbsent
)

// deliverHere runs the message on this node's activation of t.
func (m *Mesh) deliverHere(ctx context.Context, t sdk.Target, h hop, method string, req proto.Message, oneWay bool) (proto.Message, hereOutcome, error) {
	switch t.Kind() {
	case sdk.KindEntry:
		// Every refusal of the catalog goes through dispatched, which applies the
		// unhandled-message policy (I1); answers from a remote owner do not: the owner applied
		// its own.
		if oneWay {
			return nil, hereDone, m.dispatched(ctx, t, method, oneWay, m.cat.Send(ctx, t, method, req))
		}
		reply, err := m.cat.Call(ctx, t, method, req)
		return reply, hereDone, m.dispatched(ctx, t, method, oneWay, err)
	case sdk.KindActor:
		act, ok := m.cat.LocalActor(t)
		if !ok {
			return nil, hereAbsent, nil
		}
		reply, admitted, err := m.cat.DeliverActor(ctx, act, method, req, oneWay)
		if admitted || !(catalog.IsActorMoved(err) || errors.Is(err, catalog.ErrClosing)) {
			return reply, hereDone, m.dispatched(ctx, t, method, oneWay, err)
		}
		return nil, hereRefused, err
	}
	reply, admitted, err := m.cat.Deliver(ctx, h.route, method, req, oneWay)
	if admitted || !errors.Is(err, catalog.ErrClosing) {
		return reply, hereDone, m.dispatched(ctx, t, method, oneWay, err)
	}
	// Refused unrun because the Spot began closing after it was resolved: resolving again waits
	// for the close (intent) or answers not found (plain) (D4).
	return nil, hereRefused, err
}

// send sends the message to h.node and reads the reply: the outcome (refused says the node
// turned it away unrun), or, for a message that node redirected or that never left, the next
// hop. This is the one place that decides whether a message may go elsewhere (C3).
func (m *Mesh) send(ctx context.Context, t sdk.Target, h hop, method string, payload []byte, oneWay bool) (_ proto.Message, next *hop, refused bool, _ error) {
	op := wire.Op_OP_CALL
	if oneWay {
		op = wire.Op_OP_SEND
	}
	req := requestFor(ctx, t, op, method, payload)
	req.Generation, req.Follow = h.generation, h.held
	r, err := m.callOnce(ctx, h.node, req) // req is the transport's now
	if err != nil {
		// A full send queue, or the end of the caller's own context, says nothing of the
		// route: dropping it would send the next callers to the store while the node is
		// already loaded.
		var ce *sdk.CapacityError
		if t.Kind() != sdk.KindEntry && !errors.As(err, &ce) && !callerEnded(ctx) {
			m.routes.drop(t, h.node)
		}
		if h.cached && errors.Is(err, transport.ErrNotSent) {
			// The cached owner cannot be reached and the message never left: the store says
			// where the object is now (a node that shut down released it), as if nothing had
			// been cached.
			first := m.firstHop(t, false)
			return nil, &first, false, nil
		}
		return nil, nil, false, err
	}
	// What the reply says is copied or decoded before it goes back, with its payload's array:
	// the transport decoded it.
	defer wire.RecycleInboundReply(r)
	if r.Redirect != "" {
		// Refused unrun, with the node that holds the object now.
		node := sdk.NodeID(r.Redirect)
		m.routes.put(t, node)
		return nil, &hop{kind: hopSend, node: node, placed: h.placed, chosen: h.chosen, generation: r.Generation, held: r.Held}, false, nil
	}
	if r.Error != nil {
		err := wire.DecodeError(r.Error)
		if h.cached && r.Refused && errors.Is(err, sdk.ErrNotServing) {
			// The cached owner did not run it: it is closing, or not yet serving. The store
			// says where the object is now, as for a message that never left.
			m.routes.drop(t, h.node)
			first := m.firstHop(t, false)
			return nil, &first, false, nil
		}
		// Handler errors arrive as application errors, so these are the runtime's own answers.
		if errors.Is(err, sdk.ErrStaleRoute) || errors.Is(err, sdk.ErrOwnerUnavailable) {
			// The owner changed or is gone: forget the route; the message is not sent again (C3).
			m.routes.drop(t, h.node)
		}
		if errors.Is(err, sdk.ErrStaleRoute) && t.Kind() != sdk.KindEntry {
			err = m.explainStale(ctx, t, h.node, err)
		}
		return nil, nil, r.Refused, err
	}
	if r.Dropped {
		if !oneWay {
			// Only a one-way message is ever acknowledged as dropped: a peer that says so of a
			// request is broken, and the request may have run there.
			return nil, nil, false, fmt.Errorf("%w: %v %s: node %s answered the request as a dropped one-way message", sdk.ErrInvalidArgument, t, method, h.node)
		}
		// Dropped unrun as unhandled (I1): delivered, as the policy says, but it names no owner
		// (a create-intent message may be dropped by a node that holds nothing), so no route
		// is cached from it. A cached route stays: a plain message reaches the policy only on
		// a node that holds its object (C1).
		return nil, nil, false, nil
	}
	if t.Kind() != sdk.KindEntry && !h.cached {
		// The node that ran it owns it: the route for the next message (B6). A route read
		// from the cache is not written again: it is there still, or a newer one replaced it,
		// or it was dropped or evicted and the next message resolves it from the store.
		m.routes.put(t, h.node)
	}
	if oneWay {
		return nil, nil, false, nil
	}
	reply, err := m.decodeReply(t, method, r.Payload)
	return reply, nil, false, err
}

// atActivationCap reports whether err is a refusal at a node's activation cap: a creation that
// placement sent there, refused before anything ran, may go to another node.
func atActivationCap(err error) bool {
	var ce *sdk.CapacityError
	return errors.As(err, &ce) && ce.Where == sdk.CapacityActivationCap
}

// placed runs fn on the node that placement (or opts.Node) chooses for a new Spot. A node that
// refused at its active-object cap (its published count lagged) or as not serving (its
// published state lagged) is left out and the next is tried. Only a refusal counts: fn
// reports whether the request was turned away before anything ran, so a handler's error,
// whatever it wraps, never makes a message run twice (C3).
func (m *Mesh) placed(t sdk.Target, opts sdk.CallOptions, fn func(sdk.NodeID) (refused bool, err error)) error {
	if opts.Node != "" {
		if err := opts.Node.Validate(); err != nil {
			return fmt.Errorf("OnNode: %w", err)
		}
		_, err := fn(opts.Node)
		return err
	}
	var away refusals
	for {
		target, err := m.place(t.Type(), t.ID(), away)
		if err != nil {
			return err
		}
		refused, err := fn(target)
		if !refused || !away.note(err, target) {
			return err
		}
	}
}
