package mesh

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// maxRedirects bounds the redirects, and the refusals of nodes that no longer own the Spot,
// that an explicit close follows; each is a request that was not run, so following it is no
// retry (C3).
const maxRedirects = 4

// Call routes a request to t's owner and returns its reply.
func (m *Mesh) Call(ctx context.Context, t sdk.Target, method string, req proto.Message, opts sdk.CallOptions) (proto.Message, error) {
	// I3: the level is read once, as the caller's operation starts; Off costs this load only.
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		ctx, span := m.cfg.Telemetry.StartClient(ctx, lvl, telemetry.OpCall, t, method)
		reply, err := m.invoke(ctx, t, method, req, false, opts)
		span.End(err)
		return reply, err
	}
	return m.invoke(ctx, t, method, req, false, opts)
}

// Send routes a one-way message to t's owner; it returns once the owner admitted it.
func (m *Mesh) Send(ctx context.Context, t sdk.Target, method string, msg proto.Message, opts sdk.CallOptions) error {
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		ctx, span := m.cfg.Telemetry.StartClient(ctx, lvl, telemetry.OpSend, t, method)
		_, err := m.invoke(ctx, t, method, msg, true, opts)
		span.End(err)
		return err
	}
	_, err := m.invoke(ctx, t, method, msg, true, opts)
	return err
}

func (m *Mesh) invoke(ctx context.Context, t sdk.Target, method string, req proto.Message, oneWay bool, opts sdk.CallOptions) (proto.Message, error) {
	if req == nil || !req.ProtoReflect().IsValid() {
		return nil, fmt.Errorf("%w: %v %s: nil message", sdk.ErrInvalidArgument, t, method)
	}
	if err := m.throwBeforeSend(t, method, oneWay); err != nil {
		return nil, err
	}
	// The hot path: the Spot is active on this node. Only a valid target can be found there,
	// so validation waits for the paths that go further.
	if route, ok := m.cat.LocalSpot(t); ok {
		reply, admitted, err := m.cat.Deliver(ctx, route, method, req, oneWay)
		if admitted || !errors.Is(err, catalog.ErrClosing) {
			return reply, m.dispatched(ctx, t, method, oneWay, err)
		}
	} else if act, ok := m.cat.LocalActor(t); ok {
		// The Actor's hot path: it is a member of a Spot active on this node.
		reply, admitted, err := m.cat.DeliverActor(ctx, act, method, req, oneWay)
		if admitted || !(catalog.IsActorMoved(err) || errors.Is(err, catalog.ErrClosing)) {
			return reply, m.dispatched(ctx, t, method, oneWay, err)
		}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := m.cat.CheckRequest(t.Type(), method, req); err != nil {
		return nil, err
	}
	if t.Kind() != sdk.KindActor {
		if err := m.throwUnhosted(t, method, oneWay); err != nil {
			return nil, err
		}
	}
	return m.route(ctx, t, method, req, oneWay, opts)
}

// call sends req to node. A node the membership watch has not reported yet — one that
// registered moments ago and owns a Spot this node just looked up — is waited for instead of
// refused; the request was not sent before, so sending it now is its only delivery.
func (m *Mesh) call(ctx context.Context, node sdk.NodeID, req *wire.Request) (*wire.Reply, error) {
	return m.callVia(ctx, node, req, false)
}

// callOnce is call for a request that the transport reuses once it is sent
// (transport.CallOnce): the caller must not touch req after it returns.
func (m *Mesh) callOnce(ctx context.Context, node sdk.NodeID, req *wire.Request) (*wire.Reply, error) {
	return m.callVia(ctx, node, req, true)
}

func (m *Mesh) callVia(ctx context.Context, node sdk.NodeID, req *wire.Request, once bool) (*wire.Reply, error) {
	r, err := m.transportCall(ctx, node, req, once)
	if !errors.Is(err, transport.ErrNoLink) {
		return r, err
	}
	// req was never queued, and may be sent now.
	if err := m.awaitMember(ctx, node); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		// Not sent: a route cached to a node that left is resolved again from the store.
		return nil, fmt.Errorf("%w (%w)", err, transport.ErrNotSent)
	}
	return m.transportCall(ctx, node, req, once)
}

func (m *Mesh) transportCall(ctx context.Context, node sdk.NodeID, req *wire.Request, once bool) (*wire.Reply, error) {
	if once {
		return m.tr.CallOnce(ctx, node, req)
	}
	return m.tr.Call(ctx, node, req)
}

// explainStale tells a caller whose route was stale whether the Spot still exists: a Spot
// closed since the route was cached answers sdk.ErrNotFound. The message is not sent again.
func (m *Mesh) explainStale(ctx context.Context, t sdk.Target, node sdk.NodeID, stale error) error {
	if t.Kind() == sdk.KindActor {
		if _, err := m.store.LookupActor(ctx, store.ActorKey{Type: t.Type(), ID: t.ID()}); errors.Is(err, sdk.ErrNotFound) {
			return fmt.Errorf("%w: %v: it closed since its route to %s was learnt; the message did not run", sdk.ErrNotFound, t, node)
		}
		return stale
	}
	res, err := m.store.Lookup(ctx, store.SpotKey{Type: t.Type(), ID: t.ID()})
	if err == nil && res.State == store.StateMissing {
		return fmt.Errorf("%w: %v: it closed since its route to %s was learnt; the message did not run", sdk.ErrNotFound, t.Plain(), node)
	}
	return stale
}

func (m *Mesh) decodeReply(t sdk.Target, method string, payload []byte) (proto.Message, error) {
	desc := t.Desc()
	if desc == nil {
		desc = m.cat.TypeDesc(t.Type())
	}
	if desc == nil {
		return nil, errNoDecoder(t, method)
	}
	md := desc.Method(method)
	if md == nil || md.NewReply == nil {
		return nil, errNoDecoder(t, method)
	}
	out := md.NewReply()
	if err := decodeNew(payload, out); err != nil {
		return nil, fmt.Errorf("%w: %v %s: cannot decode the reply: %v", sdk.ErrInvalidArgument, t, method, err)
	}
	return out, nil
}

// decodeNew decodes b into m, a message its descriptor has just made: empty, so proto.Unmarshal's
// first step, clearing m through reflection, is skipped.
func decodeNew(b []byte, m proto.Message) error {
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(b, m)
}

// requestFor builds the request of an operation on t, with ctx's trace context (I5).
func requestFor(ctx context.Context, t sdk.Target, op wire.Op, method string, payload []byte) *wire.Request {
	r := wire.NewRequest()
	r.Op, r.Kind, r.Type, r.Id, r.Node = op, uint32(t.Kind()), t.Type(), t.ID(), string(t.Node())
	r.Intent, r.Method, r.Payload = t.CreateIntent(), method, payload
	telemetry.Inject(ctx, r)
	return r
}

// Create explicitly creates the User Spot t where placement (or opts.Node) says (A2).
func (m *Mesh) Create(ctx context.Context, t sdk.Target, opts sdk.CallOptions) error {
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		ctx, span := m.cfg.Telemetry.StartClient(ctx, lvl, telemetry.OpCreate, t, "")
		err := m.create(ctx, t, opts)
		span.End(err)
		return err
	}
	return m.create(ctx, t, opts)
}

func (m *Mesh) create(ctx context.Context, t sdk.Target, opts sdk.CallOptions) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Kind() != sdk.KindUser {
		return fmt.Errorf("%w: only User Spots are created explicitly, %v is not one (A2)", sdk.ErrInvalidArgument, t)
	}
	return m.placed(t, opts, func(target sdk.NodeID) (refused bool, err error) {
		if target == m.cfg.Node {
			// At its cap, or not serving (a relocation begun that its state does not show
			// yet): refused before the factory ran, as a remote node's refusal is.
			err := m.cat.Create(ctx, t)
			var ce *sdk.CapacityError
			return errors.As(err, &ce) || errors.Is(err, sdk.ErrNotServing), err
		}
		r, err := m.call(ctx, target, requestFor(ctx, t, wire.Op_OP_CREATE, "", nil))
		if err != nil {
			return false, err
		}
		if r.Error != nil {
			return r.Refused, wire.DecodeError(r.Error)
		}
		m.routes.put(t, target)
		return false, nil
	})
}

// CloseSpot explicitly closes the User or Instance Spot t on its owner (D3).
func (m *Mesh) CloseSpot(ctx context.Context, t sdk.Target, _ sdk.CallOptions) error {
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		ctx, span := m.cfg.Telemetry.StartClient(ctx, lvl, telemetry.OpClose, t, "")
		err := m.closeSpot(ctx, t)
		span.End(err)
		return err
	}
	return m.closeSpot(ctx, t)
}

func (m *Mesh) closeSpot(ctx context.Context, t sdk.Target) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Kind() == sdk.KindActor {
		return m.closeActor(ctx, t)
	}
	if t.Kind() == sdk.KindEntry {
		return fmt.Errorf("%w: an Entry Spot closes only with its node (A2)", sdk.ErrInvalidArgument)
	}
	for range maxRedirects {
		err := m.cat.CloseTarget(ctx, t.Plain())
		if !errors.Is(err, catalog.ErrRemoteOwner) {
			return err
		}
		res, lerr := m.store.Lookup(ctx, store.SpotKey{Type: t.Type(), ID: t.ID()})
		if lerr != nil {
			return lerr
		}
		if res.State == store.StateMissing {
			return fmt.Errorf("%w: %v", sdk.ErrNotFound, t.Plain())
		}
		owner := res.Record.Owner.Node
		if res.State == store.StateUnavailable && res.Evidence == store.EvidenceOwnerLeaseEnded {
			// No node owns it now, whichever process has the owner's ID since (B3, K5).
			return fmt.Errorf("%w: close %v: the lease of node %s, its owner, has ended; it is released only by reclaim",
				sdk.ErrOwnerUnavailable, t.Plain(), owner)
		}
		r, err := m.call(ctx, owner, requestFor(ctx, t.Plain(), wire.Op_OP_CLOSE, "", nil))
		if err != nil {
			return err
		}
		m.routes.drop(t, owner)
		err = wire.DecodeError(r.Error)
		if r.Redirect != "" || r.Refused && errors.Is(err, sdk.ErrStaleRoute) {
			// Refused unrun: that node does not own the Spot (any more; a relocation may have
			// moved it). The store says where it is now.
			continue
		}
		return err
	}
	return fmt.Errorf("%w: close %v: the owner kept changing", sdk.ErrStaleRoute, t.Plain())
}
