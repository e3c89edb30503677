package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/exec"
	"github.com/zlink-go/zlink/sdk"
)

// Call sends req to method of t on this node and waits for the reply. A Spot owned by another
// node answers ErrRemoteOwner; the mesh routes such calls instead.
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
	reply, err := c.deliver(ctx, rt.local.base(), md, req, oneWay, true)
	if errors.Is(err, exec.ErrAdmissionClosed) {
		return nil, ErrClosing
	}
	return reply, err
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
	if c.stopping.Load() && a.current() == stateClosed {
		return nil, c.errStopping()
	}
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
		return nil, describeRefusal(err, a, md)
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
	// onDone, when set, receives the outcome instead of done (a request from a peer).
	onDone func(proto.Message, error)
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (k *call) release() {
	k.ctx, k.a, k.md, k.req, k.reply, k.err, k.onDone = nil, nil, nil, nil, nil, nil, nil
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
	if k.onDone != nil {
		done := k.onDone
		k.release()
		done(reply, err)
		return
	}
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

// Admit admits a request that a peer sent along a route to this node (C1): it runs only if
// the Spot is active here and, for an owned Spot, this node's owner lease is certainly valid;
// otherwise the answer is sdk.ErrStaleRoute and nothing runs. It never reads the store and
// never creates. The object's generation is not checked (C2). done gets the outcome of a
// request; a one-way message is acknowledged by Admit's own return.
func (c *Catalog) Admit(ctx context.Context, t sdk.Target, method string, req proto.Message, size int, oneWay bool, done func(proto.Message, error)) error {
	if t.Kind() == sdk.KindEntry {
		e, md, err := c.entryMethod(t, method, oneWay)
		if err != nil {
			return err
		}
		return c.submit(ctx, &e.activation, md, req, size, oneWay, false, done)
	}
	typ, err := c.ownedType(t)
	if err != nil {
		return err
	}
	sp := c.spotAt(spotKey{typ.desc.Name, t.ID()})
	if sp == nil {
		return fmt.Errorf("%w: node %s does not own %v", sdk.ErrStaleRoute, c.cfg.Node, t.Plain())
	}
	if sp.base().current() != stateActive {
		return fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, t.Plain())
	}
	md, err := c.method(typ, method, oneWay)
	if err != nil {
		return err
	}
	err = c.submit(ctx, sp.base(), md, req, size, oneWay, true, done)
	if errors.Is(err, exec.ErrAdmissionClosed) {
		return fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, t.Plain())
	}
	return err
}

// DeliverAsync runs method on the local Spot of rt like Deliver, but reports a request's
// outcome to done instead of waiting; a one-way message is acknowledged by its return.
func (c *Catalog) DeliverAsync(ctx context.Context, rt Route, method string, req proto.Message, size int, oneWay bool, done func(proto.Message, error)) error {
	if !rt.Local() {
		return ErrRemoteOwner
	}
	md, err := c.method(rt.local.base().typ, method, oneWay)
	if err != nil {
		return err
	}
	return c.submit(ctx, rt.local.base(), md, req, size, oneWay, true, done)
}

// submit admits one message with a completion callback.
func (c *Catalog) submit(ctx context.Context, a *activation, md *sdk.MethodDesc, req proto.Message, size int, oneWay, fenced bool, done func(proto.Message, error)) error {
	if fenced && !c.reg.Guard().Valid() {
		return fmt.Errorf("%w: node %s's owner lease is not certainly valid", sdk.ErrStaleRoute, c.cfg.Node)
	}
	k := callPool.Get().(*call)
	k.ctx, k.a, k.md, k.req, k.oneWay = ctx, a, md, req, oneWay
	if !oneWay {
		k.onDone = done
	} else if ctx.Done() != nil {
		k.ctx = context.WithoutCancel(ctx)
	}
	if err := a.exec.Submit(exec.Item{Lane: sdk.LaneApplication, Payload: int64(size), Activity: true}, k); err != nil {
		k.release()
		return describeRefusal(err, a, md)
	}
	return nil
}

// TypeDesc returns the descriptor of a Spot type registered on this node, or nil.
func (c *Catalog) TypeDesc(name string) *sdk.SpotDesc {
	if t, ok := c.types[name]; ok {
		return t.desc
	}
	return nil
}

// LocalSpot returns the route to t when t is active on this node: the hot path of a call,
// without any store read.
func (c *Catalog) LocalSpot(t sdk.Target) (Route, bool) {
	k := t.Kind()
	if k != sdk.KindUser && k != sdk.KindInstance {
		return Route{}, false
	}
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil || sp.Kind() != k || sp.base().current() != stateActive {
		return Route{}, false
	}
	return Route{local: sp}, true
}

// describeRefusal names the refused message in a full lane's error (E6). The detail's text is
// built only if someone reads it.
func describeRefusal(err error, a *activation, md *sdk.MethodDesc) error {
	// exec returns its refusal unwrapped: a type assertion spares a pushed-back sender the
	// reflection of errors.As.
	if qf, ok := err.(*sdk.QueueFullError); ok {
		qf.Where = a.typ.desc.Name + "." + md.Name + " on " + a.typ.desc.Kind.String() + "/" + strconv.Quote(a.id)
	}
	return err
}
