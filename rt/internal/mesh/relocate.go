package mesh

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Relocation units between nodes (DESIGN §6): the source asks the target to make the Spot
// (OP_SPOT_PREPARE), commits, then tells it to serve (OP_SPOT_SETTLE) or to drop what it made
// (OP_SPOT_ABORT).

func spotRequest(op wire.Op, t sdk.Target) *wire.Request {
	return &wire.Request{Op: op, Kind: uint32(t.Kind()), Type: t.Type(), Id: t.ID()}
}

// PrepareSpot implements catalog.SpotPeers.
func (p actorPeers) PrepareSpot(ctx context.Context, node sdk.NodeID, in catalog.Arrival) (store.Owner, error) {
	body := &wire.SpotArrival{State: in.State, Methods: in.Methods, Token: in.Token}
	for _, m := range in.Members {
		body.Members = append(body.Members, &wire.MemberArrival{Type: m.Actor.Type(), Id: m.Actor.ID(), State: m.State})
	}
	b, err := proto.Marshal(body)
	if err != nil {
		return store.Owner{}, err
	}
	req := spotRequest(wire.Op_OP_SPOT_PREPARE, in.Spot)
	req.Payload = b
	r, err := p.m.call(ctx, node, req)
	if err != nil {
		return store.Owner{}, err
	}
	if r.Error != nil {
		return store.Owner{}, wire.DecodeError(r.Error)
	}
	var o wire.SpotOwner
	if err := proto.Unmarshal(r.Payload, &o); err != nil {
		return store.Owner{}, fmt.Errorf("%w: node %s answered a registration that does not decode: %v", sdk.ErrInvalidArgument, node, err)
	}
	if sdk.NodeID(o.Node) != node || o.Lease == 0 {
		return store.Owner{}, fmt.Errorf("%w: node %s answered the registration of %q", sdk.ErrInvalidArgument, node, o.Node)
	}
	return store.Owner{Node: node, Lease: o.Lease}, nil
}

// SettleSpot implements catalog.SpotPeers.
func (p actorPeers) SettleSpot(ctx context.Context, node sdk.NodeID, t sdk.Target, token uint64, rec store.Record) error {
	return p.spotOp(ctx, node, wire.Op_OP_SPOT_SETTLE, t, &wire.SpotSettle{Token: token, OwnerNode: string(rec.Owner.Node),
		OwnerLease: rec.Owner.Lease, Attempt: rec.Attempt, Generation: rec.Generation, Incarnation: rec.Incarnation, Revision: rec.Revision})
}

// AbortSpot implements catalog.SpotPeers.
func (p actorPeers) AbortSpot(ctx context.Context, node sdk.NodeID, t sdk.Target, token uint64) error {
	return p.spotOp(ctx, node, wire.Op_OP_SPOT_ABORT, t, &wire.SpotSettle{Token: token})
}

func (p actorPeers) spotOp(ctx context.Context, node sdk.NodeID, op wire.Op, t sdk.Target, body *wire.SpotSettle) error {
	b, err := proto.Marshal(body)
	if err != nil {
		return err
	}
	req := spotRequest(op, t)
	req.Payload = b
	r, err := p.m.call(ctx, node, req)
	if err != nil {
		return err
	}
	return wire.DecodeError(r.Error)
}

// handleSpotOp runs a relocation unit's request from its source.
func (m *Mesh) handleSpotOp(ctx context.Context, t sdk.Target, req *wire.Request, reply func(*wire.Reply)) {
	if t.Kind() != sdk.KindUser && t.Kind() != sdk.KindInstance || t.CreateIntent() {
		reply(refusedReply(fmt.Errorf("%w: %v relocates a User or Instance Spot, not %v", sdk.ErrInvalidArgument, req.Op, t)))
		return
	}
	switch req.Op {
	case wire.Op_OP_SPOT_PREPARE:
		var body wire.SpotArrival
		if err := proto.Unmarshal(req.Payload, &body); err != nil {
			reply(refusedReply(fmt.Errorf("%w: a relocation of %v that does not decode: %v", sdk.ErrInvalidArgument, t, err)))
			return
		}
		in := catalog.Arrival{Spot: t, State: body.State, Methods: body.Methods, Token: body.Token}
		for _, mb := range body.Members {
			in.Members = append(in.Members, catalog.MemberState{Actor: sdk.ActorTarget(mb.Type, mb.Id), State: mb.State})
		}
		m.slow(ctx, reply, func() {
			owner, err := m.cat.PrepareSpot(ctx, in)
			if err != nil {
				reply(refusedReply(err))
				return
			}
			b, err := proto.Marshal(&wire.SpotOwner{Node: string(owner.Node), Lease: owner.Lease})
			if err != nil {
				reply(refusedReply(err))
				return
			}
			reply(&wire.Reply{Owner: string(m.cfg.Node), Payload: b})
		})
	case wire.Op_OP_SPOT_SETTLE, wire.Op_OP_SPOT_ABORT:
		var body wire.SpotSettle
		if err := proto.Unmarshal(req.Payload, &body); err != nil {
			reply(refusedReply(fmt.Errorf("%w: a relocation of %v that does not decode: %v", sdk.ErrInvalidArgument, t, err)))
			return
		}
		if req.Op == wire.Op_OP_SPOT_ABORT {
			// Dropping runs the arrival's closing callback: off the stream's goroutine.
			m.slow(ctx, reply, func() {
				m.cat.AbortSpot(t, body.Token)
				reply(m.ownerReply(nil))
			})
			return
		}
		m.cat.SettleSpot(t, body.Token, store.Record{Kind: t.Kind(), Phase: store.PhaseReady,
			Owner:   store.Owner{Node: sdk.NodeID(body.OwnerNode), Lease: body.OwnerLease},
			Attempt: body.Attempt, Generation: body.Generation, Incarnation: body.Incarnation, Revision: body.Revision})
		reply(m.ownerReply(nil))
	}
}
