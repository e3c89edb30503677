package mesh

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/catalog"
	"github.com/zlink-go/zlink/rt/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Handle implements transport.Handler: it runs a request a peer sent.
//
// A request along a route (no intent) is admitted only if this node owns the Spot and its
// owner lease is certainly valid; otherwise it ends with sdk.ErrStaleRoute and nothing runs
// (C1, C3). A request with create-intent, sent here by placement, runs the activation state
// machine here: it creates the Spot, or answers a redirect to the Spot's Ready owner without
// running anything.
func (m *Mesh) Handle(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
	if !m.started.Load() {
		reply(errorReply(fmt.Errorf("%w: node %s is starting", sdk.ErrNotServing, m.cfg.Node)))
		return
	}
	t, err := targetOf(req)
	if err != nil {
		reply(errorReply(err))
		return
	}
	switch req.Op {
	case wire.Op_OP_CALL, wire.Op_OP_SEND:
		m.handleMessage(ctx, t, req, reply)
	case wire.Op_OP_CREATE:
		m.slow(func() { reply(m.ownerReply(m.cat.Create(ctx, t))) })
	case wire.Op_OP_CLOSE:
		m.slow(func() {
			err := m.cat.CloseTarget(ctx, t)
			if errors.Is(err, catalog.ErrRemoteOwner) {
				reply(errorReply(fmt.Errorf("%w: node %s does not own %v", sdk.ErrStaleRoute, m.cfg.Node, t)))
				return
			}
			reply(m.ownerReply(err))
		})
	default:
		reply(errorReply(fmt.Errorf("%w: unknown operation %v", sdk.ErrInvalidArgument, req.Op)))
	}
}

func (m *Mesh) handleMessage(ctx context.Context, t sdk.Target, req *wire.Request, reply func(*wire.Reply)) {
	oneWay := req.Op == wire.Op_OP_SEND
	desc := m.cat.TypeDesc(t.Type())
	if desc == nil {
		reply(errorReply(fmt.Errorf("%w: spot type %s is not registered on node %s", sdk.ErrUnhandled, t.Type(), m.cfg.Node)))
		return
	}
	md := desc.Method(req.Method)
	if md == nil {
		reply(errorReply(fmt.Errorf("%w: spot type %s has no method %s", sdk.ErrUnhandled, t.Type(), req.Method)))
		return
	}
	msg := md.NewRequest()
	if err := proto.Unmarshal(req.Payload, msg); err != nil {
		reply(errorReply(fmt.Errorf("%w: %s.%s: cannot decode the request: %v", sdk.ErrInvalidArgument, t.Type(), req.Method, err)))
		return
	}
	size := len(req.Payload)
	done := func(out proto.Message, err error) { reply(m.messageReply(out, err)) }
	if !t.CreateIntent() || t.Kind() == sdk.KindEntry {
		err := m.cat.Admit(ctx, t, req.Method, msg, size, oneWay, done)
		if err != nil || oneWay {
			reply(m.ownerReply(err))
		}
		return
	}
	// Create-intent: an active Spot here takes it at once; anything else resolves off the
	// stream's goroutine.
	if rt, ok := m.cat.LocalSpot(t); ok {
		err := m.cat.DeliverAsync(ctx, rt, req.Method, msg, size, oneWay, done)
		if !errors.Is(err, catalog.ErrClosing) {
			if err != nil || oneWay {
				reply(m.ownerReply(err))
			}
			return
		}
	}
	m.slow(func() {
		for range maxRedirects {
			rt, err := m.cat.Resolve(ctx, t, catalog.Intent)
			if err != nil {
				reply(errorReply(err))
				return
			}
			if !rt.Local() {
				reply(&wire.Reply{Redirect: string(rt.Remote.Record.Owner.Node)})
				return
			}
			err = m.cat.DeliverAsync(ctx, rt, req.Method, msg, size, oneWay, done)
			if errors.Is(err, catalog.ErrClosing) {
				continue // closed meanwhile: wait for the close and create again (D4)
			}
			if err != nil || oneWay {
				reply(m.ownerReply(err))
			}
			return
		}
		reply(errorReply(fmt.Errorf("%w: %v kept closing", sdk.ErrNotFound, t.Plain())))
	})
}

// slow runs fn on a goroutine of its own, owned by the mesh: work that may wait on the store.
func (m *Mesh) slow(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

func (m *Mesh) messageReply(out proto.Message, err error) *wire.Reply {
	if err != nil {
		return errorReply(err)
	}
	r := &wire.Reply{Owner: string(m.cfg.Node)}
	if out != nil && out.ProtoReflect().IsValid() {
		b, merr := proto.Marshal(out)
		if merr != nil {
			return errorReply(fmt.Errorf("%w: cannot encode the reply: %v", sdk.ErrInvalidArgument, merr))
		}
		r.Payload = b
	}
	return r
}

func (m *Mesh) ownerReply(err error) *wire.Reply {
	if err != nil {
		return errorReply(err)
	}
	return &wire.Reply{Owner: string(m.cfg.Node)}
}

func errorReply(err error) *wire.Reply { return &wire.Reply{Error: wire.EncodeError(err)} }

// targetOf rebuilds the target of a request, refusing anything malformed.
func targetOf(req *wire.Request) (sdk.Target, error) {
	var t sdk.Target
	switch sdk.SpotKind(req.Kind) {
	case sdk.KindEntry:
		t = sdk.EntryTarget(req.Type, sdk.NodeID(req.Node))
	case sdk.KindUser:
		t = sdk.UserTarget(req.Type, req.Id)
	case sdk.KindInstance:
		if req.Intent {
			t = sdk.InstanceIntent(req.Type, req.Id)
		} else {
			t = sdk.InstanceTarget(req.Type, req.Id)
		}
	default:
		return t, fmt.Errorf("%w: request for unknown spot kind %d", sdk.ErrInvalidArgument, req.Kind)
	}
	return t, t.Validate()
}
