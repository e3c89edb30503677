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

// maxRedirects bounds the redirects one call follows; each is a request that was not run, so
// following it is no retry (C3).
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
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := m.throwUnhosted(t, method, oneWay); err != nil {
		return nil, err
	}
	if t.Kind() == sdk.KindEntry {
		if t.Node() == m.cfg.Node {
			reply, _, err := m.local(ctx, t, method, req, oneWay)
			return reply, err
		}
		reply, _, err := m.remote(ctx, t.Node(), t, method, req, oneWay)
		return reply, err
	}
	// A cached Ready route: no store read (B6).
	if owner, ok := m.routes.get(t); ok && owner != m.cfg.Node {
		reply, _, err := m.remote(ctx, owner, t, method, req, oneWay)
		if !errors.Is(err, transport.ErrNotSent) {
			return reply, err
		}
		// The cached owner cannot be reached and the message never left: the store says where
		// the Spot is now (a node that shut down released it), as if nothing had been cached.
	}
	if !t.CreateIntent() {
		reply, _, err := m.local(ctx, t, method, req, oneWay)
		return reply, err
	}
	// Create-intent: the Spot is created where placement says, unless it exists already.
	var reply proto.Message
	err := m.placed(t, opts, func(target sdk.NodeID) (refused bool, err error) {
		if target == m.cfg.Node {
			reply, refused, err = m.local(ctx, t, method, req, oneWay)
		} else {
			reply, refused, err = m.remote(ctx, target, t, method, req, oneWay)
		}
		return refused, err
	})
	return reply, err
}

// placed runs fn on the node that placement (or opts.Node) chooses for a new Spot. A node that
// refused at its active-object cap (its published count lagged) is left out and the next is
// tried. Only a refusal counts: fn reports whether the request was turned away before anything
// ran, so a handler's error, whatever it wraps, never makes a message run twice (C3).
func (m *Mesh) placed(t sdk.Target, opts sdk.CallOptions, fn func(sdk.NodeID) (refused bool, err error)) error {
	if opts.Node != "" {
		_, err := fn(opts.Node)
		return err
	}
	var full []sdk.NodeID
	for {
		target, err := m.place(t.Type(), t.ID(), full...)
		if err != nil {
			return err
		}
		refused, err := fn(target)
		var ce *sdk.CapacityError
		if !refused || !errors.As(err, &ce) || ce.Where != sdk.CapacityActivationCap {
			return err
		}
		full = append(full, target)
	}
}

// local runs the call on this node's catalog, creating on intent, and follows the store to a
// remote owner when the Spot is Ready elsewhere. refused says the message was turned away
// unrun: it may be sent elsewhere.
func (m *Mesh) local(ctx context.Context, t sdk.Target, method string, req proto.Message, oneWay bool) (_ proto.Message, refused bool, _ error) {
	// Every refusal of the catalog goes through dispatched, which applies the unhandled-message
	// policy (I1); answers from a remote owner do not: the owner applied its own.
	if t.Kind() == sdk.KindEntry {
		if oneWay {
			return nil, false, m.dispatched(ctx, t, method, oneWay, m.cat.Send(ctx, t, method, req))
		}
		reply, err := m.cat.Call(ctx, t, method, req)
		return reply, false, m.dispatched(ctx, t, method, oneWay, err)
	}
	mode := catalog.Plain
	if t.CreateIntent() {
		mode = catalog.Intent
	}
	for range maxRedirects {
		route, err := m.cat.Resolve(ctx, t, mode)
		if err != nil {
			return nil, true, m.dispatched(ctx, t, method, oneWay, err)
		}
		if !route.Local() {
			owner := route.Remote.Record.Owner.Node
			m.routes.put(t, owner)
			return m.remote(ctx, owner, t, method, req, oneWay)
		}
		reply, admitted, err := m.cat.Deliver(ctx, route, method, req, oneWay)
		if admitted || !errors.Is(err, catalog.ErrClosing) {
			return reply, !admitted, m.dispatched(ctx, t, method, oneWay, err)
		}
	}
	return nil, true, fmt.Errorf("%w: %v kept closing", sdk.ErrNotFound, t.Plain())
}

// remote sends the call to node and follows redirects to the Spot's owner. refused says the
// receiver turned the message away unrun.
func (m *Mesh) remote(ctx context.Context, node sdk.NodeID, t sdk.Target, method string, req proto.Message, oneWay bool) (_ proto.Message, refused bool, _ error) {
	payload, err := proto.Marshal(req)
	if err != nil {
		return nil, true, fmt.Errorf("%w: %v %s: cannot encode the message: %v", sdk.ErrInvalidArgument, t, method, err)
	}
	op := wire.Op_OP_CALL
	if oneWay {
		op = wire.Op_OP_SEND
	}
	for range maxRedirects {
		if node == m.cfg.Node {
			return m.local(ctx, t, method, req, oneWay)
		}
		r, err := m.call(ctx, node, requestFor(ctx, t, op, method, payload))
		if err != nil {
			// A full send queue says nothing of the route: dropping it would send the next
			// callers to the store while the node is already loaded.
			var ce *sdk.CapacityError
			if t.Kind() != sdk.KindEntry && !errors.As(err, &ce) {
				m.routes.drop(t, node)
			}
			return nil, false, err
		}
		if r.Redirect != "" {
			node = sdk.NodeID(r.Redirect)
			m.routes.put(t, node)
			continue
		}
		if r.Error != nil {
			err := wire.DecodeError(r.Error)
			// Handler errors arrive as application errors, so these are the runtime's own answers.
			if errors.Is(err, sdk.ErrStaleRoute) || errors.Is(err, sdk.ErrOwnerUnavailable) {
				// The owner changed or is gone: forget the route; the call is not retried (C3).
				m.routes.drop(t, node)
			}
			if errors.Is(err, sdk.ErrStaleRoute) && t.Kind() != sdk.KindEntry {
				err = m.explainStale(ctx, t, node, err)
			}
			return nil, r.Refused, err
		}
		if t.Kind() != sdk.KindEntry && r.Owner != "" {
			m.routes.put(t, sdk.NodeID(r.Owner))
		}
		if oneWay {
			return nil, false, nil
		}
		reply, err := m.decodeReply(t, method, r.Payload)
		return reply, false, err
	}
	return nil, true, fmt.Errorf("%w: %v: more than %d redirects", sdk.ErrStaleRoute, t, maxRedirects)
}

// call sends req to node. A node the membership watch has not reported yet — one that
// registered moments ago and owns a Spot this node just looked up — is waited for instead of
// refused; the request was not sent before, so sending it now is its only delivery.
func (m *Mesh) call(ctx context.Context, node sdk.NodeID, req *wire.Request) (*wire.Reply, error) {
	r, err := m.tr.Call(ctx, node, req)
	if !errors.Is(err, transport.ErrNoLink) {
		return r, err
	}
	if err := m.awaitMember(ctx, node); err != nil {
		return nil, err
	}
	return m.tr.Call(ctx, node, req)
}

// explainStale tells a caller whose route was stale whether the Spot still exists: a Spot
// closed since the route was cached answers sdk.ErrNotFound. The message is not sent again.
func (m *Mesh) explainStale(ctx context.Context, t sdk.Target, node sdk.NodeID, stale error) error {
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
	if err := proto.Unmarshal(payload, out); err != nil {
		return nil, fmt.Errorf("%w: %v %s: cannot decode the reply: %v", sdk.ErrInvalidArgument, t, method, err)
	}
	return out, nil
}

// requestFor builds the request of an operation on t, with ctx's trace context (I5).
func requestFor(ctx context.Context, t sdk.Target, op wire.Op, method string, payload []byte) *wire.Request {
	r := &wire.Request{
		Op: op, Kind: uint32(t.Kind()), Type: t.Type(), Id: t.ID(), Node: string(t.Node()),
		Intent: t.CreateIntent(), Method: method, Payload: payload,
	}
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
			err := m.cat.Create(ctx, t)
			var ce *sdk.CapacityError
			return errors.As(err, &ce), err
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
		r, err := m.call(ctx, owner, requestFor(ctx, t.Plain(), wire.Op_OP_CLOSE, "", nil))
		if err != nil {
			return err
		}
		m.routes.drop(t, owner)
		if r.Redirect != "" {
			continue
		}
		return wire.DecodeError(r.Error)
	}
	return fmt.Errorf("%w: close %v: the owner kept changing", sdk.ErrStaleRoute, t.Plain())
}
