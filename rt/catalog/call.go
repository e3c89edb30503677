package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/exec"
	"github.com/zlink-go/zlink/sdk"
)

// Call sends req to method of t on this node and waits for the reply. A Spot owned by another
// node answers ErrRemoteOwner (wrapped with its Route by CallRoute's callers).
func (c *Catalog) Call(ctx context.Context, t sdk.Target, method string, req proto.Message) (proto.Message, error) {
	return c.invoke(ctx, t, method, req, false)
}

// Send delivers msg to the one-way method of t on this node: it returns once the message is
// admitted to the Spot's queue.
func (c *Catalog) Send(ctx context.Context, t sdk.Target, method string, msg proto.Message) error {
	_, err := c.invoke(ctx, t, method, msg, true)
	return err
}

func (c *Catalog) invoke(ctx context.Context, t sdk.Target, method string, req proto.Message, oneWay bool) (proto.Message, error) {
	if req == nil || !req.ProtoReflect().IsValid() {
		return nil, fmt.Errorf("%w: %v %s: nil message", sdk.ErrInvalidArgument, t, method)
	}
	if t.Kind() == sdk.KindEntry {
		e, md, err := c.entryMethod(t, method, oneWay)
		if err != nil {
			return nil, err
		}
		return c.deliver(ctx, &e.activation, md, req, oneWay, false)
	}
	mode := Plain
	if t.CreateIntent() {
		mode = Intent
	}
	for range maxRounds {
		rt, err := c.Resolve(ctx, t, mode)
		if err != nil {
			return nil, err
		}
		if !rt.Local() {
			return nil, fmt.Errorf("%w: %v is Ready on %s", ErrRemoteOwner, t, rt.Remote.Record.Owner.Node)
		}
		md, err := c.method(rt.local.base().typ, method, oneWay)
		if err != nil {
			return nil, err
		}
		reply, err := c.deliver(ctx, rt.local.base(), md, req, oneWay, true)
		if !errors.Is(err, exec.ErrAdmissionClosed) {
			return reply, err
		}
		// The Spot began closing after it was resolved: the next round waits for the close
		// (intent) or answers not found (plain) (D4).
	}
	return nil, fmt.Errorf("catalog: %v: did not settle in %d rounds", t, maxRounds)
}

// Deliver runs method on the Spot that route names, which must be local.
func (c *Catalog) Deliver(ctx context.Context, rt Route, method string, req proto.Message, oneWay bool) (proto.Message, error) {
	if !rt.Local() {
		return nil, ErrRemoteOwner
	}
	md, err := c.method(rt.local.base().typ, method, oneWay)
	if err != nil {
		return nil, err
	}
	return c.deliver(ctx, rt.local.base(), md, req, oneWay, true)
}

func (c *Catalog) entryMethod(t sdk.Target, method string, oneWay bool) (*entrySpot, *sdk.MethodDesc, error) {
	if err := t.Validate(); err != nil {
		return nil, nil, err
	}
	if t.Node() != c.cfg.Node {
		return nil, nil, fmt.Errorf("%w: %v is on another node", ErrRemoteOwner, t)
	}
	e, ok := c.entries[t.Type()]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no Entry Spot type %s on node %s", sdk.ErrUnhandled, t.Type(), c.cfg.Node)
	}
	md, err := c.method(e.typ, method, oneWay)
	return e, md, err
}

func (c *Catalog) method(typ *spotType, name string, oneWay bool) (*sdk.MethodDesc, error) {
	md, ok := typ.methods[name]
	if !ok {
		return nil, fmt.Errorf("%w: spot type %s has no method %s", sdk.ErrUnhandled, typ.desc.Name, name)
	}
	if md.OneWay != oneWay {
		if md.OneWay {
			return nil, fmt.Errorf("%w: %s.%s is one-way: use Send", sdk.ErrInvalidArgument, typ.desc.Name, name)
		}
		return nil, fmt.Errorf("%w: %s.%s is request/reply: use Call", sdk.ErrInvalidArgument, typ.desc.Name, name)
	}
	return md, nil
}

// deliver admits one message to a's application lane and, for a request, waits for the reply.
// An owned Spot is admitted only while this node's owner lease is certainly valid (C1); the
// object's generation is never checked (C2).
func (c *Catalog) deliver(ctx context.Context, a *activation, md *sdk.MethodDesc, req proto.Message, oneWay, fenced bool) (proto.Message, error) {
	if fenced && !c.reg.Guard().Valid() {
		return nil, fmt.Errorf("%w: node %s's owner lease is not certainly valid", sdk.ErrStaleRoute, c.cfg.Node)
	}
	k := callPool.Get().(*call)
	k.ctx, k.a, k.md, k.req, k.oneWay = ctx, a, md, req, oneWay
	if oneWay && ctx.Done() != nil {
		// An admitted one-way message runs even if the sender's context ends after Send.
		k.ctx = context.WithoutCancel(ctx)
	}
	err := a.exec.Submit(exec.Item{Lane: sdk.LaneApplication, Payload: int64(proto.Size(req)), Activity: true, Inline: !oneWay}, k)
	if err != nil {
		k.release()
		if errors.Is(err, exec.ErrAdmissionClosed) {
			return nil, err
		}
		return nil, fmt.Errorf("%s.%s on %s/%q: %w", a.typ.desc.Name, md.Name, a.typ.desc.Kind, a.id, err)
	}
	if oneWay {
		return nil, nil
	}
	select {
	case <-k.done:
		reply, err := k.reply, k.err
		k.release()
		return reply, err
	case <-ctx.Done():
		// The call is abandoned to the runner; it is not reused.
		return nil, ctx.Err()
	}
}

// call is one request or one-way message on a Spot's queue.
type call struct {
	ctx    context.Context
	a      *activation
	md     *sdk.MethodDesc
	req    proto.Message
	reply  proto.Message
	err    error
	oneWay bool
	done   chan struct{} // buffered: Run never blocks
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (k *call) release() {
	k.ctx, k.a, k.md, k.req, k.reply, k.err = nil, nil, nil, nil, nil, nil
	callPool.Put(k)
}

// Run implements exec.Work.
func (k *call) Run() {
	if err := k.ctx.Err(); err != nil {
		k.finish(nil, err) // the caller gave up while it was queued
		return
	}
	defer func() {
		if v := recover(); v != nil {
			k.a.cat.log.Error("handler panicked", "spot", k.a.typ.desc.Name, "id", k.a.id, "method", k.md.Name,
				"panic", v, "stack", string(debug.Stack()))
			k.finish(nil, fmt.Errorf("%w: %s.%s: %v", sdk.ErrHandlerPanicked, k.a.typ.desc.Name, k.md.Name, v))
		}
	}()
	reply, err := k.md.Invoke(k.a.impl, k.ctx, k.req)
	k.finish(reply, err)
}

// Drop implements exec.Work.
func (k *call) Drop(err error) { k.finish(nil, err) }

func (k *call) finish(reply proto.Message, err error) {
	if k.oneWay {
		if err != nil {
			k.a.cat.log.Warn("one-way handler failed", "spot", k.a.typ.desc.Name, "id", k.a.id, "method", k.md.Name, "err", err)
		}
		k.release()
		return
	}
	k.reply, k.err = reply, err
	k.done <- struct{}{}
}

// Create explicitly creates the User Spot t on this node (A2).
func (c *Catalog) Create(ctx context.Context, t sdk.Target) error {
	if t.Kind() != sdk.KindUser {
		return fmt.Errorf("%w: only User Spots are created explicitly, %v is not one (A2)", sdk.ErrInvalidArgument, t)
	}
	_, err := c.Resolve(ctx, t, ExplicitCreate)
	return err
}
