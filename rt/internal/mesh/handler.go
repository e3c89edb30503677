package mesh

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Handle implements transport.Handler: it runs a request a peer sent.
//
// A request along a route (no intent) is admitted only if this node owns the Spot and its
// owner lease is certainly valid; otherwise it ends with sdk.ErrStaleRoute and nothing runs
// (C1, C3). One that finds the Spot being created on this node waits for the creation: it is
// admitted once the Spot is Ready, and refused unrun if the creation fails. A request with
// create-intent, sent here by placement, runs the activation state machine here: it creates the
// Spot, or answers a redirect to the Spot's Ready owner without running anything.
//
// A reply says apart a refusal — the request did not run and never will (Reply.Refused) — and
// the outcome of a request that was admitted, so that the caller sends a request elsewhere only
// when it was refused (C3).
func (m *Mesh) Handle(ctx context.Context, from sdk.NodeID, req *wire.Request, rep transport.Replier) {
	if !m.started.Load() {
		rep.Reply(refusedReply(fmt.Errorf("%w: node %s is starting", sdk.ErrNotServing, m.cfg.Node)))
		return
	}
	if len(req.Method) > maxMethodName {
		// Refused before anything logs or counts it: a peer does not choose the size of our logs.
		rep.Reply(refusedReply(fmt.Errorf("%w: a method name of %d bytes (at most %d)", sdk.ErrInvalidArgument, len(req.Method), maxMethodName)))
		return
	}
	// The caller's trace continues here (I5): the turn's span, or the activation's, is a child
	// of the caller's span. Off reads nothing of it.
	if sdk.CurrentDiagnosticsLevel() != sdk.DiagnosticsLevelOff {
		ctx = telemetry.Extract(ctx, req)
	}
	if req.Op == wire.Op_OP_CALL || req.Op == wire.Op_OP_SEND {
		// A message, as every call is, answers through rep itself: no function is made to
		// reply with.
		t, err := targetOf(req)
		if err != nil {
			rep.Reply(refusedReply(err))
			return
		}
		m.handleMessage(ctx, from, t, req, rep)
		return
	}
	m.handleOp(ctx, from, req, rep.Reply)
}

// handleOp runs a request of any operation but a message's.
func (m *Mesh) handleOp(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
	switch req.Op {
	case wire.Op_OP_CHANNEL_CALL, wire.Op_OP_CHANNEL_SEND, wire.Op_OP_PUBLISH:
		if err := sdk.ValidateID("channel name", req.Type); err != nil {
			reply(refusedReply(err))
			return
		}
		if req.Op == wire.Op_OP_PUBLISH {
			m.handlePublish(ctx, from, req, reply)
			return
		}
		m.handleChannel(ctx, from, req, reply)
		return
	}
	t, err := targetOf(req)
	if err != nil {
		reply(refusedReply(err))
		return
	}
	switch req.Op {
	case wire.Op_OP_ACTOR_MOVE, wire.Op_OP_ACTOR_PREPARE, wire.Op_OP_ACTOR_SETTLE, wire.Op_OP_ACTOR_ABORT:
		if t.Kind() != sdk.KindActor {
			reply(refusedReply(fmt.Errorf("%w: %v is for an Actor, not %v", sdk.ErrInvalidArgument, req.Op, t)))
			return
		}
		m.handleActorOp(ctx, t, req, reply)
	case wire.Op_OP_SPOT_PREPARE, wire.Op_OP_SPOT_SETTLE, wire.Op_OP_SPOT_ABORT:
		m.handleSpotOp(ctx, t, req, reply)
	case wire.Op_OP_CLOSE:
		if t.Kind() == sdk.KindActor {
			m.handleActorOp(ctx, t, req, reply)
			return
		}
		m.slow(ctx, reply, func() {
			err := m.cat.CloseTarget(ctx, t)
			if errors.Is(err, catalog.ErrRemoteOwner) {
				reply(refusedReply(fmt.Errorf("%w: node %s does not own %v", sdk.ErrStaleRoute, m.cfg.Node, t)))
				return
			}
			reply(m.ownerReply(err))
		})
	case wire.Op_OP_CREATE:
		m.slow(ctx, reply, func() {
			err := m.cat.Create(ctx, t)
			if errors.Is(err, sdk.ErrCreationFailed) {
				// The factory ran: whatever it did, the request was not refused unrun.
				reply(&wire.Reply{Error: wire.EncodeError(err)})
				return
			}
			reply(m.ownerReply(err))
		})
	case wire.Op_OP_RECONCILE:
		m.cat.Suspect(t)
		reply(m.ownerReply(nil))
	default:
		reply(refusedReply(fmt.Errorf("%w: unknown operation %v", sdk.ErrInvalidArgument, req.Op)))
	}
}

func (m *Mesh) handleMessage(ctx context.Context, from sdk.NodeID, t sdk.Target, req *wire.Request, rep transport.Replier) {
	oneWay, method := req.Op == wire.Op_OP_SEND, req.Method
	if t.Kind() == sdk.KindEntry && t.Node() != m.cfg.Node {
		// Another node's Entry Spot, reached by that node's endpoint (its process ended, and
		// this one took its address): not an owner here (C1), whatever types this node hosts.
		rep.Reply(refusedReply(fmt.Errorf("%w: node %s is not node %s, which %v is on", sdk.ErrStaleRoute, m.cfg.Node, t.Node(), t)))
		return
	}
	// A message this node knows no handler for is found here, before anything reads the
	// store or a queue, and follows the node's policy (I1).
	desc := m.cat.TypeDesc(t.Type())
	if desc == nil {
		m.refuseUnhandled(ctx, from, t, method, oneWay,
			fmt.Errorf("%w: spot type %s is not registered on node %s", sdk.ErrUnhandled, t.Type(), m.cfg.Node), rep.Reply)
		return
	}
	if (t.Kind() == sdk.KindActor) != (desc.Kind == sdk.KindActor) {
		m.refuseUnhandled(ctx, from, t, method, oneWay,
			fmt.Errorf("%w: type %s on node %s is %s, addressed as %s", sdk.ErrUnhandled, t.Type(), m.cfg.Node, desc.Kind, t.Kind()), rep.Reply)
		return
	}
	if t.Kind() == sdk.KindEntry && desc.Kind != sdk.KindEntry {
		m.refuseUnhandled(ctx, from, t, method, oneWay,
			fmt.Errorf("%w: no Entry Spot type %s on node %s", sdk.ErrUnhandled, t.Type(), m.cfg.Node), rep.Reply)
		return
	}
	md := desc.Method(method)
	if md == nil {
		m.refuseUnhandled(ctx, from, t, method, oneWay,
			fmt.Errorf("%w: spot type %s has no method %q", sdk.ErrUnhandled, t.Type(), method), rep.Reply)
		return
	}
	msg := md.NewRequest()
	if err := decodeNew(req.Payload, msg); err != nil {
		rep.Reply(refusedReply(fmt.Errorf("%w: %s.%s: cannot decode the request: %v", sdk.ErrInvalidArgument, t.Type(), method, err)))
		return
	}
	size, gen, follow := len(req.Payload), req.Generation, req.Follow
	// Nothing reads the request after this: what it said is copied or decoded.
	recycleRequest(req)
	// The transport's Replier answers a message's outcome itself: no function is made for it.
	var done catalog.Answer = rep
	if oneWay && t.Kind() == sdk.KindActor {
		// Called only for a message a move held: one that ended unrun because the Actor left
		// is refused, with a redirect to where it went when that is known.
		done = catalog.AnswerFunc(func(_ proto.Message, err error) {
			if !catalog.IsActorMoved(err) {
				rep.Answer(nil, err)
				return
			}
			if node, moved := m.cat.Departed(t); moved {
				err = &catalog.MovedError{Node: node}
			}
			rep.Reply(m.admitReply(err))
		})
	}
	if t.Kind() == sdk.KindActor {
		err := m.cat.AdmitActor(ctx, t, method, msg, size, oneWay, follow, done)
		if errors.Is(err, catalog.ErrClosing) {
			// Its Spot is in a relocation unit: wait for its outcome off the stream's
			// goroutine, then admit here or redirect to where the Actor went.
			m.slow(ctx, rep.Reply, func() {
				if err := m.cat.AwaitActorHost(ctx, t); err != nil {
					rep.Reply(refusedReply(err))
					return
				}
				err := m.cat.AdmitActor(ctx, t, method, msg, size, oneWay, follow, done)
				if errors.Is(err, catalog.ErrClosing) {
					err = fmt.Errorf("%w: %v: its Spot is closing", sdk.ErrNotFound, t)
				}
				if errors.Is(err, catalog.ErrHeld) {
					return // its Actor moves: done answers once it is admitted where it runs
				}
				if err != nil || oneWay {
					rep.Reply(m.admitReply(err))
				}
			})
			return
		}
		if errors.Is(err, catalog.ErrHeld) {
			return // its Actor moves: done answers once it is admitted where it runs
		}
		if err != nil || oneWay {
			rep.Reply(m.admitReply(err))
		}
		return
	}
	if !t.CreateIntent() || t.Kind() == sdk.KindEntry {
		err := m.admit(ctx, t, method, msg, size, oneWay, gen, follow, done)
		if errors.Is(err, catalog.ErrClosing) || errors.Is(err, catalog.ErrCreating) {
			// A close or a relocation of the Spot is being decided, or this node is creating it
			// or receiving it (B7): wait for it off the stream's goroutine.
			m.slow(ctx, rep.Reply, func() {
				m.admitLater(ctx, t, method, msg, size, oneWay, gen, follow, err, done, rep.Reply)
			})
			return
		}
		if err != nil || oneWay {
			rep.Reply(m.admitReply(err))
		}
		return
	}
	// Create-intent: an active Spot here takes it at once; anything else resolves off the
	// stream's goroutine.
	if route, ok := m.cat.LocalSpot(t); ok {
		err := m.cat.DeliverAsync(ctx, route, method, msg, size, oneWay, done)
		if !errors.Is(err, catalog.ErrClosing) {
			if err != nil || oneWay {
				rep.Reply(m.ownerReply(err))
			}
			return
		}
	}
	m.slow(ctx, rep.Reply, func() {
		for range maxRedirects {
			route, err := m.cat.Resolve(ctx, t, catalog.Intent)
			if node, moved := m.departedWhileRefusing(t, err); moved {
				rep.Reply(&wire.Reply{Redirect: string(node), Refused: true})
				return
			}
			if err != nil {
				rep.Reply(refusedReply(err))
				return
			}
			if !route.Local() {
				rep.Reply(&wire.Reply{Redirect: string(route.Remote.Record.Owner.Node), Refused: true})
				return
			}
			err = m.cat.DeliverAsync(ctx, route, method, msg, size, oneWay, done)
			if errors.Is(err, catalog.ErrClosing) {
				// A close is being decided: wait for it, then the Spot serves on or is created
				// again after the close (D4).
				_ = m.cat.AwaitClose(ctx, t)
				continue
			}
			if err != nil || oneWay {
				rep.Reply(m.ownerReply(err))
			}
			return
		}
		rep.Reply(refusedReply(fmt.Errorf("%w: %v kept closing", sdk.ErrNotFound, t.Plain())))
	})
}

// departedWhileRefusing reports where the Spot t went when this node refused to create it as
// not serving (err: it relocates or closes, or its lease is not certainly valid) and the Spot
// moved from here lately to a node still in the mesh: a relocation moved it, perhaps while the
// message waited for the move's outcome, and the message follows it there rather than fail.
// Where it went is a hint, not the record: that node serves the Spot, sends the message on
// where the Spot went next, or, when the Spot has closed since, creates it there as the
// caller's intent asks. A node that has left is no hint: the refusal stands, and the caller
// looks again.
func (m *Mesh) departedWhileRefusing(t sdk.Target, err error) (sdk.NodeID, bool) {
	if !errors.Is(err, sdk.ErrNotServing) {
		return "", false
	}
	node, moved := m.cat.Departed(t)
	if !moved {
		return "", false
	}
	m.mu.RLock()
	_, member := m.members[node]
	m.mu.RUnlock()
	return node, member
}

// admitLater admits a message that Admit refused with ErrClosing or ErrCreating (refused) once
// what it met is settled. A close being decided: the Spot serves on and takes it, or is closing
// and the message is refused unrun. A creation here (B7): the Spot is Ready and takes it, or the
// creation failed and the message is refused unrun. The caller's deadline bounds each wait.
func (m *Mesh) admitLater(ctx context.Context, t sdk.Target, method string, msg proto.Message, size int, oneWay bool, gen uint64, held bool,
	refused error, done catalog.Answer, reply func(*wire.Reply)) {
	for range maxRedirects {
		var err error
		if errors.Is(refused, catalog.ErrCreating) {
			err = m.cat.AwaitCreation(ctx, t)
		} else {
			err = m.cat.AwaitClose(ctx, t)
		}
		if err != nil {
			reply(refusedReply(err))
			return
		}
		err = m.admit(ctx, t, method, msg, size, oneWay, gen, held, done)
		if errors.Is(err, catalog.ErrClosing) || errors.Is(err, catalog.ErrCreating) {
			refused = err
			continue
		}
		if err != nil || oneWay {
			r := m.admitReply(err)
			// It waited here for a relocation unit that moved its Spot: the relocation held it.
			r.Held = r.Redirect != "" && r.Generation > 0
			reply(r)
		}
		return
	}
	reply(refusedReply(fmt.Errorf("%w: %v kept closing or being created", sdk.ErrNotFound, t.Plain())))
}

// admit admits a message along a route; one that follows a relocated Spot (gen > 0) only
// where the Spot holds that generation or a later one (C2), and one its relocation held
// without the lane's limits.
func (m *Mesh) admit(ctx context.Context, t sdk.Target, method string, msg proto.Message, size int, oneWay bool, gen uint64, held bool, done catalog.Answer) error {
	if gen > 0 && t.Kind() != sdk.KindEntry {
		return m.cat.AdmitFollow(ctx, t, gen, held, method, msg, size, oneWay, done)
	}
	return m.cat.Admit(ctx, t, method, msg, size, oneWay, done)
}

// admitReply answers a message that was admitted (err nil) or refused unrun: a refusal for an
// object that moved from here lately is a redirect to where it went (Message Follow).
func (m *Mesh) admitReply(err error) *wire.Reply {
	var moved *catalog.MovedError
	if errors.As(err, &moved) {
		return &wire.Reply{Redirect: string(moved.Node), Generation: moved.Generation, Refused: true}
	}
	return m.ownerReply(err)
}

// slow runs fn on a goroutine of the mesh's pool, owned by the mesh: work that may wait on the
// store.
// At most MaxSlowRequests run at once; the peer's stream waits for a place (its later requests
// wait with it), and a request whose context ends first is refused with
// ErrCapacityExceeded{Scheduler}: a peer that floods a node with creations slows itself down,
// not the node's lease or its other peers' calls.
func (m *Mesh) slow(ctx context.Context, reply func(*wire.Reply), fn func()) {
	select {
	case m.slowSlots <- struct{}{}:
	default:
		// Every slot is taken: the stream is not read until one frees, which its peer is told
		// meanwhile, so that it does not take the stream for one that has stopped reading.
		err := capacity.AsReader(ctx, func(c context.Context) error {
			select {
			case m.slowSlots <- struct{}{}:
				return nil
			case <-c.Done():
				return c.Err()
			case <-m.ctx.Done():
				return errMeshClosed
			}
		})
		switch {
		case errors.Is(err, errMeshClosed):
			reply(refusedReply(fmt.Errorf("%w: node %s is closing", sdk.ErrNotServing, m.cfg.Node)))
			return
		case err != nil:
			reply(refusedReply(fmt.Errorf("node %s is busy: %w", m.cfg.Node, &sdk.CapacityError{Where: sdk.CapacityScheduler, Limit: int64(cap(m.slowSlots))})))
			return
		}
	}
	// Pooled: a creation's calls through the etcd client would grow a new goroutine's stack
	// by copying, two or three times per request.
	m.wg.Add(1)
	m.slowPool.Go(func() {
		defer m.wg.Done()
		defer func() { <-m.slowSlots }()
		fn()
	})
}

// errMeshClosed ends a wait for a slot of the slow pool when the mesh closes.
var errMeshClosed = errors.New("mesh: closed")

// recycleRequest gives a peer's request, which the transport decoded, back for reuse with its
// payload's array; tests see what goes back through it.
var recycleRequest = wire.RecycleInboundRequest

// ownerReply answers a request that this node admitted (err nil) or refused unrun.
func (m *Mesh) ownerReply(err error) *wire.Reply {
	if err != nil {
		return refusedReply(err)
	}
	return &wire.Reply{}
}

// refusedReply answers a request that did not run and never will.
func refusedReply(err error) *wire.Reply {
	return &wire.Reply{Error: wire.EncodeError(err), Refused: true}
}

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
	case sdk.KindActor:
		t = sdk.ActorTarget(req.Type, req.Id)
	default:
		return t, fmt.Errorf("%w: request for unknown spot kind %d", sdk.ErrInvalidArgument, req.Kind)
	}
	return t, t.Validate()
}
