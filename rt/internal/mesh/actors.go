package mesh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Actors are routed to the node of the Spot they are a member of: the Actor's record names the
// Spot, and the Spot's record its owner (an Entry Spot's node is in its address). The node an
// Actor was last found on is cached like a Spot's owner; a node the Actor moved away from
// lately redirects to where it went, and one that never held it refuses the message unrun.

// pause waits a little longer each round, bounded by ctx.
func pause(ctx context.Context, round int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(round+1) * time.Millisecond):
		return nil
	}
}

// actorNode reads where the Actor t is: the node of the Spot its record names.
func (m *Mesh) actorNode(ctx context.Context, t sdk.Target) (sdk.NodeID, error) {
	loc, err := m.store.LookupActor(ctx, store.ActorKey{Type: t.Type(), ID: t.ID()})
	if err != nil {
		return "", err
	}
	if loc.Host.Kind == sdk.KindEntry {
		return loc.Host.Node, nil
	}
	res, err := m.store.Lookup(ctx, store.SpotKey{Type: loc.Host.Type, ID: loc.Host.ID})
	if err != nil {
		return "", err
	}
	if res.Record.Incarnation == loc.Host.Incarnation && res.State == store.StateUnavailable && res.Evidence == store.EvidenceOwnerLeaseEnded {
		// Its Spot's owner ended and the Spot is not released yet: unavailable, as the Spot
		// is, not missing (B3, K5).
		return "", fmt.Errorf("%w: %v: the lease of node %s, the owner of its Spot %s, has ended; it is released only by reclaim",
			sdk.ErrOwnerUnavailable, t, res.Record.Owner.Node, loc.Host)
	}
	if res.State != store.StateReady || res.Record.Incarnation != loc.Host.Incarnation {
		return "", fmt.Errorf("%w: %v: its Spot %s is gone", sdk.ErrNotFound, t, loc.Host)
	}
	return res.Record.Owner.Node, nil
}

// MoveActor moves the Actor actor into the Spot to; the node the Actor is on runs the move.
func (m *Mesh) MoveActor(ctx context.Context, actor, to sdk.Target, _ sdk.CallOptions) error {
	if err := actor.Validate(); err != nil {
		return err
	}
	if actor.Kind() != sdk.KindActor {
		return fmt.Errorf("%w: MoveActor moves an Actor, and %v is not one", sdk.ErrInvalidArgument, actor)
	}
	if err := to.Validate(); err != nil {
		return err
	}
	if !to.Kind().IsSpot() {
		return fmt.Errorf("%w: an Actor moves into a Spot, and %v is not one", sdk.ErrInvalidArgument, to)
	}
	payload, err := proto.Marshal(placeOf(to, nil))
	if err != nil {
		return err
	}
	return m.onActor(ctx, actor, "move", func(act catalog.LocalActorRef) error { return m.cat.MoveActor(ctx, act, to) },
		&wire.Request{Op: wire.Op_OP_ACTOR_MOVE, Kind: uint32(sdk.KindActor), Type: actor.Type(), Id: actor.ID(), Payload: payload})
}

// closeActor explicitly closes the Actor t on the node it is on.
func (m *Mesh) closeActor(ctx context.Context, t sdk.Target) error {
	return m.onActor(ctx, t, "close", func(act catalog.LocalActorRef) error { return m.cat.CloseActor(ctx, act) },
		requestFor(ctx, t, wire.Op_OP_CLOSE, "", nil))
}

// onActor runs an operation on the Actor t where it is: local on this node, else req to the
// node its record names, following it as long as it moves. Each attempt sends a copy of req:
// a request is never queued twice, whatever an earlier attempt's reply said.
func (m *Mesh) onActor(ctx context.Context, t sdk.Target, what string, local func(catalog.LocalActorRef) error, req *wire.Request) error {
	for round := range maxRedirects * 4 {
		if act, ok := m.cat.LocalActor(t); ok {
			err := local(act)
			if !catalog.IsActorMoved(err) {
				return err
			}
			// It left this node: its record says where it is now.
		}
		node, err := m.actorNode(ctx, t)
		if err != nil {
			return err
		}
		if node == m.cfg.Node {
			if err := pause(ctx, round); err != nil {
				return err
			}
			continue
		}
		r, err := m.call(ctx, node, proto.CloneOf(req))
		if err != nil {
			return err
		}
		if r.Redirect != "" || r.Refused && errors.Is(wire.DecodeError(r.Error), sdk.ErrStaleRoute) {
			continue // it moved before the request came: look again
		}
		return wire.DecodeError(r.Error)
	}
	return fmt.Errorf("%w: %s %v: its location kept changing", sdk.ErrStaleRoute, what, t)
}

// handleActorOp serves a peer's operation on the Actor t other than a message.
func (m *Mesh) handleActorOp(ctx context.Context, t sdk.Target, req *wire.Request, reply func(*wire.Reply)) {
	var place wire.ActorPlace
	if req.Op != wire.Op_OP_CLOSE {
		if err := proto.Unmarshal(req.Payload, &place); err != nil {
			reply(refusedReply(fmt.Errorf("%w: %v for %v: cannot decode its payload: %v", sdk.ErrInvalidArgument, req.Op, t, err)))
			return
		}
	}
	switch req.Op {
	case wire.Op_OP_ACTOR_SETTLE:
		m.cat.SettleArrival(t, place.Token)
		reply(m.ownerReply(nil))
		return
	case wire.Op_OP_ACTOR_ABORT:
		m.cat.AbortArrival(t, place.Token)
		reply(m.ownerReply(nil))
		return
	}
	spot, err := spotOf(&place)
	if err != nil && req.Op != wire.Op_OP_CLOSE {
		reply(refusedReply(err))
		return
	}
	m.slow(ctx, reply, func() {
		switch req.Op {
		case wire.Op_OP_ACTOR_PREPARE:
			host, err := m.cat.PrepareArrival(ctx, t, spot, place.State, place.Token)
			if err != nil {
				reply(refusedReply(err))
				return
			}
			b, err := proto.Marshal(hostOf(host))
			if err != nil {
				m.cat.AbortArrival(t, place.Token)
				reply(refusedReply(err))
				return
			}
			reply(&wire.Reply{Payload: b})
		case wire.Op_OP_ACTOR_MOVE, wire.Op_OP_CLOSE:
			act, ok := m.cat.LocalActor(t)
			if !ok {
				reply(m.notHere(t))
				return
			}
			if req.Op == wire.Op_OP_CLOSE {
				err = m.cat.CloseActor(ctx, act)
			} else {
				err = m.cat.MoveActor(ctx, act, spot)
			}
			if catalog.IsActorMoved(err) {
				reply(m.notHere(t))
				return
			}
			if err != nil {
				reply(&wire.Reply{Error: wire.EncodeError(err)})
				return
			}
			reply(m.ownerReply(nil))
		}
	})
}

// notHere refuses an operation on the Actor t, which is not on this node: a redirect to where
// it moved lately, or a stale route.
func (m *Mesh) notHere(t sdk.Target) *wire.Reply {
	if node, ok := m.cat.Departed(t); ok {
		return &wire.Reply{Redirect: string(node), Refused: true}
	}
	return refusedReply(fmt.Errorf("%w: node %s does not hold %v", sdk.ErrStaleRoute, m.cfg.Node, t))
}

// placeOf encodes the Spot t, and an Actor's state, for the wire.
func placeOf(t sdk.Target, state []byte) *wire.ActorPlace {
	return &wire.ActorPlace{Kind: uint32(t.Kind()), Type: t.Type(), Id: t.ID(), Node: string(t.Node()), Intent: t.CreateIntent(), State: state}
}

// spotOf decodes the Spot of an ActorPlace, refusing anything malformed or not a Spot.
func spotOf(p *wire.ActorPlace) (sdk.Target, error) {
	t, err := targetOf(&wire.Request{Kind: p.Kind, Type: p.Type, Id: p.Id, Node: p.Node, Intent: p.Intent})
	if err == nil && !t.Kind().IsSpot() {
		err = fmt.Errorf("%w: an Actor moves into a Spot, not a %s", sdk.ErrInvalidArgument, t.Kind())
	}
	return t, err
}

func hostOf(h store.Host) *wire.ActorHost {
	return &wire.ActorHost{Kind: uint32(h.Kind), Type: h.Type, Id: h.ID, Node: string(h.Node), Lease: h.Lease,
		Incarnation: h.Incarnation, OwnerNode: string(h.Owner.Node), OwnerLease: h.Owner.Lease,
		Phase: uint32(h.Phase), Revision: h.Revision}
}

func hostFrom(h *wire.ActorHost) store.Host {
	return store.Host{
		HostRef: store.HostRef{Kind: sdk.SpotKind(h.GetKind()), Type: h.GetType(), ID: h.GetId(), Node: sdk.NodeID(h.GetNode()),
			Lease: h.GetLease(), Incarnation: h.GetIncarnation()},
		Owner: store.Owner{Node: sdk.NodeID(h.GetOwnerNode()), Lease: h.GetOwnerLease()},
		Phase: store.Phase(h.GetPhase()), Revision: h.GetRevision(),
	}
}

// actorPeers is how this node's catalog reaches other nodes for the moves of its Actors.
type actorPeers struct{ m *Mesh }

var _ catalog.Peers = actorPeers{}

func actorRequest(op wire.Op, actor sdk.Target) *wire.Request {
	return &wire.Request{Op: op, Kind: uint32(sdk.KindActor), Type: actor.Type(), Id: actor.ID()}
}

// PrepareArrival implements catalog.Peers.
func (p actorPeers) PrepareArrival(ctx context.Context, node sdk.NodeID, actor, host sdk.Target, state []byte, token uint64) (store.Host, error) {
	req := actorRequest(wire.Op_OP_ACTOR_PREPARE, actor)
	place := placeOf(host, state)
	place.Token = token
	b, err := proto.Marshal(place)
	if err != nil {
		return store.Host{}, err
	}
	req.Payload = b
	r, err := p.m.call(ctx, node, req)
	if err != nil {
		return store.Host{}, err
	}
	if r.Error != nil {
		return store.Host{}, wire.DecodeError(r.Error)
	}
	var h wire.ActorHost
	if err := proto.Unmarshal(r.Payload, &h); err != nil {
		return store.Host{}, fmt.Errorf("%w: node %s answered a Spot fence that does not decode: %v", sdk.ErrInvalidArgument, node, err)
	}
	return hostFrom(&h), nil
}

// SettleArrival implements catalog.Peers.
func (p actorPeers) SettleArrival(ctx context.Context, node sdk.NodeID, actor sdk.Target, token uint64) error {
	return p.simple(ctx, node, wire.Op_OP_ACTOR_SETTLE, actor, token)
}

// AbortArrival implements catalog.Peers.
func (p actorPeers) AbortArrival(ctx context.Context, node sdk.NodeID, actor sdk.Target, token uint64) error {
	return p.simple(ctx, node, wire.Op_OP_ACTOR_ABORT, actor, token)
}

func (p actorPeers) simple(ctx context.Context, node sdk.NodeID, op wire.Op, actor sdk.Target, token uint64) error {
	req := actorRequest(op, actor)
	b, err := proto.Marshal(&wire.ActorPlace{Token: token})
	if err != nil {
		return err
	}
	req.Payload = b
	r, err := p.m.call(ctx, node, req)
	if err != nil {
		return err
	}
	return wire.DecodeError(r.Error)
}

// Follow implements catalog.Peers.
func (p actorPeers) Follow(ctx context.Context, node sdk.NodeID, actor sdk.Target, method string, msg proto.Message, oneWay bool) (proto.Message, error) {
	payload, err := proto.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v %s: cannot encode the message: %v", sdk.ErrInvalidArgument, actor, method, err)
	}
	op := wire.Op_OP_CALL
	if oneWay {
		op = wire.Op_OP_SEND
	}
	// The message was admitted once, before the move: a refusal for want of room on the way
	// (the receiver's inbound budget, this node's send queue) is waited out, within ctx. Each
	// attempt is a request of its own: one is never queued twice, whatever a reply said.
	var r *wire.Reply
	for {
		req := requestFor(ctx, actor, op, method, payload)
		req.Follow = true
		r, err = p.m.call(ctx, node, req)
		var ce *sdk.CapacityError
		busy := errors.Is(err, sdk.ErrInboundBudget) || errors.As(err, &ce) && ce.Where == sdk.CapacitySendQueue
		if err == nil && r.Error != nil && r.Refused {
			busy = errors.Is(wire.DecodeError(r.Error), sdk.ErrInboundBudget)
		}
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, wire.DecodeError(r.Error)
	}
	if r.Redirect != "" {
		return nil, fmt.Errorf("%w: %v left node %s before the message that followed it came", sdk.ErrStaleRoute, actor, node)
	}
	if oneWay {
		return nil, nil
	}
	return p.m.decodeReply(actor, method, r.Payload)
}
