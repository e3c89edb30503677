package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// The unhandled-message policy (I1). A message is unhandled when it reaches a node that knows
// no handler for it: the catalog (a local caller's dispatch) or the handler (a peer's request)
// refuses it with sdk.ErrUnhandled before it is admitted to any queue. That node applies its
// own policy, per family:
//
//	           Request (Call)                      Send (one-way)
//	ReplyError refused: ErrUnhandled               refused: Send returns ErrUnhandled
//	LogAndDrop Warn log; no reply: the call ends   Warn log; Send returns nil
//	           with its context, at most Hold
//	Drop       as LogAndDrop, no log               as LogAndDrop, no log
//	Throw      refused before sending when the     as Request
//	           descriptor or the membership shows
//	           nobody handles it; else ReplyError
//	           and an Error log
//
// A message refused by a peer is never judged again by its sender: the peer applied its
// policy. Placement's "no node hosts this type" reaches no node and is not a dispatch: it
// stays an error under every action.

// A published message (the Publish family) is unhandled on a node that has no subscriber of
// its channel taking it from that publisher, or whose subscriber has no such method: it
// follows the rules of Send above. Under Throw a publication on a channel that no node
// subscribes to, as the membership shows, is refused before it is sent.

// UnhandledStats counts unhandled messages.
type UnhandledStats struct {
	// Requests, Sends and Publishes count the messages this node found unhandled, as the
	// dispatcher of a local call or as the receiver of a peer's message, per family.
	Requests, Sends, Publishes int64
	// Dropped counts those of them that were dropped (LogAndDrop, Drop).
	Dropped int64
	// NotSent counts the messages this node refused to send under Throw, because the
	// target's descriptor or the membership showed that no node handles them.
	NotSent int64
}

type unhandledCounters struct {
	requests, sends, publishes, dropped, notSent atomic.Int64
}

// UnhandledStats returns the node's unhandled-message counters.
func (m *Mesh) UnhandledStats() UnhandledStats {
	c := &m.unhandledCount
	return UnhandledStats{Requests: c.requests.Load(), Sends: c.sends.Load(), Publishes: c.publishes.Load(),
		Dropped: c.dropped.Load(), NotSent: c.notSent.Load()}
}

// submission is a family of the unhandled-message policy (I1).
type submission uint8

const (
	familyRequest submission = iota
	familySend
	familyPublish
)

func familyOf(oneWay bool) submission {
	if oneWay {
		return familySend
	}
	return familyRequest
}

func (f submission) String() string {
	return [...]string{"Request", "Send", "Publish"}[f]
}

func (m *Mesh) unhandledAction(f submission) sdk.UnhandledDispatchAction {
	switch f {
	case familySend:
		return m.cfg.Unhandled.Send
	case familyPublish:
		return m.cfg.Unhandled.Publish
	}
	return m.cfg.Unhandled.Request
}

// unhandled counts and logs a message for t this node found unhandled (err wraps
// sdk.ErrUnhandled) and reports whether the policy drops it; otherwise it is refused with err.
func (m *Mesh) unhandled(t sdk.Target, method string, oneWay bool, from sdk.NodeID, err error) (drop bool) {
	return m.unhandledAs(familyOf(oneWay), func() []any {
		a := []any{"spot", t.Type(), "kind", t.Kind().String(), "method", method}
		if t.Kind() == sdk.KindEntry {
			return append(a, "target_node", string(t.Node()))
		}
		return append(a, "id", t.ID())
	}, from, err)
}

// unhandledAs counts and logs an unhandled message of family f, described by what, and
// reports whether the policy drops it.
func (m *Mesh) unhandledAs(f submission, what func() []any, from sdk.NodeID, err error) (drop bool) {
	switch f {
	case familySend:
		m.unhandledCount.sends.Add(1)
	case familyPublish:
		m.unhandledCount.publishes.Add(1)
	default:
		m.unhandledCount.requests.Add(1)
	}
	action := m.unhandledAction(f)
	attrs := func() []any {
		a := append([]any{"family", f.String()}, what()...)
		if from != "" {
			a = append(a, "from", string(from))
		}
		return append(a, "err", err)
	}
	switch action {
	case sdk.UnhandledDispatchActionLogAndDrop:
		m.log.Warn("unhandled message dropped", attrs()...)
		m.unhandledCount.dropped.Add(1)
		return true
	case sdk.UnhandledDispatchActionDrop:
		m.unhandledCount.dropped.Add(1)
		return true
	case sdk.UnhandledDispatchActionThrow:
		m.log.Error("unhandled message refused", attrs()...)
	}
	return false
}

// dispatched applies the policy to err, the outcome of dispatching a message on this node's
// catalog: an unhandled message is refused with err, or dropped — a one-way message then
// counts as delivered and a request waits, with no reply, for its context or the hold bound.
// Any other outcome is returned as is.
func (m *Mesh) dispatched(ctx context.Context, t sdk.Target, method string, oneWay bool, err error) error {
	if err == nil || !errors.Is(err, sdk.ErrUnhandled) || !m.unhandled(t, method, oneWay, "", err) {
		return err
	}
	if oneWay {
		return nil
	}
	return m.withhold(ctx)
}

// withhold is a dropped request's wait for the reply that never comes: it ends with ctx, after
// the hold bound (so that a caller without a deadline is not left waiting for ever), or when
// the mesh closes.
func (m *Mesh) withhold(ctx context.Context) error {
	timer := time.NewTimer(m.cfg.UnhandledHold)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return m.errNoReply()
	case <-m.ctx.Done():
		return fmt.Errorf("%w: node %s is closing", sdk.ErrClosed, m.cfg.Node)
	}
}

func (m *Mesh) errNoReply() error {
	return fmt.Errorf("%w: no reply within %v", context.DeadlineExceeded, m.cfg.UnhandledHold)
}

// refuseUnhandled answers a peer's message that this node found unhandled, as the policy says:
// refused with err, or dropped — a one-way message is acknowledged as delivered, a request's
// reply is withheld until its context ends (the caller's deadline or cancellation, or the
// stream's end) or the hold bound passes. A plain message to a User or Instance Spot, or to an
// Actor, that this node does not hold came along a stale route: it is refused as such first
// (C1), so that the sender finds the owner, which may know the handler.
func (m *Mesh) refuseUnhandled(ctx context.Context, from sdk.NodeID, t sdk.Target, method string, oneWay bool, err error, reply func(*wire.Reply)) {
	if k := t.Kind(); (k == sdk.KindUser || k == sdk.KindInstance || k == sdk.KindActor) && !t.CreateIntent() {
		if stale := m.cat.CheckOwner(t); stale != nil {
			reply(m.admitReply(stale))
			return
		}
	}
	m.answerUnhandled(ctx, m.unhandled(t, method, oneWay, from, err), oneWay, err, reply)
}

// answerUnhandled answers a peer's unhandled message: refused with err, or, when drop, a
// one-way message acknowledged and a request's reply withheld.
func (m *Mesh) answerUnhandled(ctx context.Context, drop, oneWay bool, err error, reply func(*wire.Reply)) {
	if !drop {
		reply(refusedReply(err))
		return
	}
	if oneWay {
		// Delivered as far as the sender knows, but said to be dropped: this node may not own
		// the object, so the sender takes no route from it.
		reply(&wire.Reply{Dropped: true})
		return
	}
	if m.held.Add(1) > maxHeldUnhandled {
		// A peer that floods the node with unknown requests does not make it hold each one.
		m.held.Add(-1)
		reply(refusedReply(m.errNoReply()))
		return
	}
	var once sync.Once
	answer := func(err error) {
		once.Do(func() {
			m.held.Add(-1)
			reply(refusedReply(err))
		})
	}
	timer := time.AfterFunc(m.cfg.UnhandledHold, func() { answer(m.errNoReply()) })
	// The stream's end ends ctx too, so neither the timer nor this outlives the mesh.
	context.AfterFunc(ctx, func() {
		timer.Stop()
		answer(ctx.Err())
	})
}

// maxHeldUnhandled bounds the dropped requests of peers whose replies a node withholds at once;
// past it they are answered at once as if their hold had passed.
const maxHeldUnhandled = 4096

// maxMethodName bounds the method name of a peer's request.
const maxMethodName = 256

// throwBeforeSend applies Throw on the sending side: a message that the target's descriptor
// shows no handler for is refused here, unsent.
func (m *Mesh) throwBeforeSend(t sdk.Target, method string, oneWay bool) error {
	if m.unhandledAction(familyOf(oneWay)) != sdk.UnhandledDispatchActionThrow {
		return nil
	}
	if d := t.Desc(); d != nil && d.Name == t.Type() && d.Method(method) == nil {
		m.unhandledCount.notSent.Add(1)
		return fmt.Errorf("%w: spot type %s has no method %q in its descriptor; the message was not sent", sdk.ErrUnhandled, t.Type(), method)
	}
	return nil
}

// throwUnhosted applies Throw on the sending side for a message no node of the mesh can
// handle, as this node sees the membership: no Object Server hosts its type, or, for an Entry
// target, the addressed node does not.
func (m *Mesh) throwUnhosted(t sdk.Target, method string, oneWay bool) error {
	if m.unhandledAction(familyOf(oneWay)) != sdk.UnhandledDispatchActionThrow || m.hostedSomewhere(t) {
		return nil
	}
	m.unhandledCount.notSent.Add(1)
	if t.Kind() == sdk.KindEntry {
		return fmt.Errorf("%w: node %s hosts no Entry Spot type %s; %s was not sent", sdk.ErrUnhandled, t.Node(), t.Type(), method)
	}
	return fmt.Errorf("%w: no Object Server of the mesh hosts spot type %s; %s was not sent", sdk.ErrUnhandled, t.Type(), method)
}

// hostedSomewhere reports whether a member may handle t. A node this node does not know of
// yet gets the benefit of the doubt.
func (m *Mesh) hostedSomewhere(t sdk.Target) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if t.Kind() == sdk.KindEntry {
		n, ok := m.members[t.Node()]
		return !ok || slices.Contains(n.Desc.GetSpotTypes(), t.Type())
	}
	for _, n := range m.members {
		if n.Desc.GetRoles()&RoleObjectServer != 0 && slices.Contains(n.Desc.GetSpotTypes(), t.Type()) {
			return true
		}
	}
	return false
}
