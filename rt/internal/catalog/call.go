package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/wire"
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
		e, md, err := c.entryMethod(t, method, oneWay, req)
		if err != nil {
			return nil, err
		}
		reply, _, err := c.deliver(ctx, &e.activation, md, req, oneWay)
		return reply, err
	}
	if t.Kind() == sdk.KindActor {
		act, ok := c.LocalActor(t)
		if !ok {
			return nil, fmt.Errorf("%w: %v is not on node %s", ErrRemoteOwner, t, c.cfg.Node)
		}
		reply, _, err := c.DeliverActor(ctx, act, method, req, oneWay)
		return reply, err
	}
	mode := Plain
	if t.CreateIntent() {
		mode = Intent
	}
	for range maxRounds {
		route, err := c.Resolve(ctx, t, mode)
		if err != nil {
			return nil, err
		}
		if !route.Local() {
			return nil, fmt.Errorf("%w: %v is Ready on %s", ErrRemoteOwner, t, route.Remote.Record.Owner.Node)
		}
		reply, admitted, err := c.Deliver(ctx, route, method, req, oneWay)
		if admitted || !errors.Is(err, ErrClosing) {
			return reply, err
		}
		// Refused unrun because the Spot began closing after it was resolved: the next round
		// waits for the close (intent) or answers not found (plain) (D4).
	}
	return nil, fmt.Errorf("catalog: %v: did not settle in %d rounds", t, maxRounds)
}

// Deliver runs method on the Spot that route names, which must be local. admitted says whether
// the message entered the Spot's queue: once it did, err is the message's outcome and the
// message must never be sent again (C3); a message refused unrun (admitted false) may go
// elsewhere. A refusal because the Spot is closing is ErrClosing, after the close was decided.
func (c *Catalog) Deliver(ctx context.Context, route Route, method string, req proto.Message, oneWay bool) (reply proto.Message, admitted bool, err error) {
	if !route.Local() {
		return nil, false, ErrRemoteOwner
	}
	md, err := c.method(route.local.base().typ, method, oneWay, req)
	if err != nil {
		return nil, false, err
	}
	return c.deliver(ctx, route.local.base(), md, req, oneWay)
}

func (c *Catalog) entryMethod(t sdk.Target, method string, oneWay bool, req proto.Message) (*entrySpot, *sdk.MethodDesc, error) {
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
	md, err := c.method(e.typ, method, oneWay, req)
	return e, md, err
}

// method finds typ's method name for a message (oneWay) or a request, and checks that req,
// when given, is the method's request message.
func (c *Catalog) method(typ *spotType, name string, oneWay bool, req proto.Message) (*sdk.MethodDesc, error) {
	m, ok := typ.methods[name]
	md := m.desc
	if !ok {
		return nil, fmt.Errorf("%w: spot type %s has no method %q", sdk.ErrUnhandled, typ.desc.Name, name)
	}
	if md.OneWay != oneWay {
		if md.OneWay {
			return nil, fmt.Errorf("%w: %s.%s is one-way: use Send", sdk.ErrInvalidArgument, typ.desc.Name, name)
		}
		return nil, fmt.Errorf("%w: %s.%s is request/reply: use Call", sdk.ErrInvalidArgument, typ.desc.Name, name)
	}
	if req != nil {
		if err := m.check(typ.desc.Name, req); err != nil {
			return nil, err
		}
	}
	return md, nil
}

// deliver admits one message to a's application lane and, for a request, waits for the reply.
// An owned Spot is admitted only while the owner lease it runs under is certainly valid (C1);
// the object's generation is never checked (C2). admitted tells a refusal before the queue from
// the message's own outcome.
func (c *Catalog) deliver(ctx context.Context, a *activation, md *sdk.MethodDesc, req proto.Message, oneWay bool) (proto.Message, bool, error) {
	if c.stopping.Load() && a.current() == stateClosed {
		if a.guard == nil {
			return nil, false, c.errStopping() // an Entry Spot closes only with its node
		}
		// The node's shutdown closed the Spot after it was resolved: refused unrun, as a close
		// of any other cause refuses, so that the caller resolves again, which creates it
		// elsewhere on intent or answers not found (D4).
		return nil, false, ErrClosing
	}
	if oneWay {
		admitted, err := c.send(ctx, a, md, req)
		return nil, admitted, err
	}
	// A request is checked for the lease when its turn comes, right after.
	if a.ownTurn(ctx) {
		return nil, false, errSelfRequest(a, md)
	}
	k := newCall(false)
	k.ctx, k.a, k.md, k.req, k.oneWay = ctx, a, md, req, false
	// A request that finds the Spot idle runs at once on its caller's goroutine, never queued:
	// it needs no permit of the job queue, which bounds the jobs that wait.
	company := a.enter(ctx)
	defer a.leave()
	it := exec.Item{Lane: sdk.LaneApplication, Payload: int64(proto.Size(req)), Activity: true, Inline: true, InlineOnly: true, Company: company}
	err := a.exec.Submit(it, k)
	if err == exec.ErrNotInline {
		reserved, perr := c.cfg.Meter.Acquire(ctx, nestedJob)
		if perr != nil {
			k.release()
			return nil, false, perr
		}
		k.permit, k.reserved = true, reserved
		it.Inline, it.InlineOnly = false, false
		err = a.exec.Submit(it, k)
	}
	if err != nil {
		k.release()
		return nil, false, c.refusal(ctx, err, a, md)
	}
	return await(ctx, k)
}

// send admits a one-way message to a's application lane, and reports whether it did. A lease
// known to be lost refuses it now, so that its sender learns of the refusal; the turn checks
// the lease against the clock when it comes (C1).
func (c *Catalog) send(ctx context.Context, a *activation, md *sdk.MethodDesc, req proto.Message) (bool, error) {
	if !a.admissionAllowed() {
		return false, c.errLeaseNotValid()
	}
	it := exec.Item{Lane: sdk.LaneApplication, Payload: int64(proto.Size(req)), Activity: true}
	reserved, err := c.cfg.Meter.Acquire(ctx, nestedJob)
	if err != nil {
		return false, err
	}
	if err := a.exec.SubmitMessage(it, exec.Message{Ctx: ctx, Method: md, Req: req, Reserved: reserved}); err != nil {
		c.cfg.Meter.Return(reserved)
		return false, c.refusal(ctx, err, a, md)
	}
	return true, nil
}

// await waits for the outcome of the admitted request k.
func await(ctx context.Context, k *call) (proto.Message, bool, error) {
	select {
	case <-k.done:
	case <-ctx.Done():
		select {
		case <-k.done: // it ran (inline, or just now): its outcome is the answer
		default:
			// The call is abandoned to the runner; it is not reused.
			return nil, true, ctx.Err()
		}
	}
	reply, err := k.reply, k.err
	k.release()
	if errors.Is(err, errActorMoved) {
		// It did not run: the Actor left this node just as it came.
		return nil, false, err
	}
	return reply, true, err
}

// errSelfRequest refuses a request that a Spot's own turn makes of the Spot: it would wait
// for the turn that waits for it.
func errSelfRequest(a *activation, md *sdk.MethodDesc) error {
	return fmt.Errorf("%w: %s.%s on %s/%q is a request of the Spot to itself from its own turn, which would wait for that turn to end: call the method directly, or Send",
		sdk.ErrInvalidArgument, a.typ.desc.Name, md.Name, a.typ.desc.Kind, a.id)
}

// refusal describes why a's queue refused a message. A queue closed by a close transaction
// answers ErrClosing once the close is decided, so that the caller looks again: the Spot either
// serves on or is closing for certain.
func (c *Catalog) refusal(ctx context.Context, err error, a *activation, md *sdk.MethodDesc) error {
	if err != exec.ErrAdmissionClosed {
		return describeRefusal(err, a, md)
	}
	if a.guard == nil {
		return c.errStopping() // an Entry Spot closes only with its node
	}
	if a.ownTurn(ctx) {
		// The close or relocation waits for this very turn: it cannot be waited for here.
		return fmt.Errorf("%w: %s.%s on %s/%q from the Spot's own turn: the Spot is closing or moving", sdk.ErrClosed, a.typ.desc.Name, md.Name, a.typ.desc.Kind, a.id)
	}
	if werr := c.awaitDecision(ctx, a); werr != nil {
		return werr
	}
	return ErrClosing
}

// message is what the turn of a message needs of it: its sender's context, its Spot, method
// and request, and its Actor if it is for one; and whether the job queue's permit that the
// message holds, if it holds one, is a reserved supply permit.
type message struct {
	ctx      context.Context
	a        *activation
	md       *sdk.MethodDesc
	req      proto.Message
	actor    *actor // set for a message to an Actor; a's queue is its host Spot's
	oneWay   bool
	reserved bool
	// ownCtx says ctx is the context of the peer's request this message is: its turn's
	// identity lives in it (requestTurn).
	ownCtx bool
}

// Answer receives the outcome of a message that a peer sent: the handler's reply, or the error
// the message ended with.
type Answer interface {
	Answer(reply proto.Message, err error)
}

// AnswerFunc is a function that receives a message's outcome as an Answer.
type AnswerFunc func(reply proto.Message, err error)

// Answer calls f(reply, err); a nil f drops the outcome.
func (f AnswerFunc) Answer(reply proto.Message, err error) {
	if f != nil {
		f(reply, err)
	}
}

// call is one request or one-way message on a Spot's queue, with what answers it.
type call struct {
	message
	reply proto.Message
	err   error
	done  chan struct{} // buffered: Run never blocks
	// onDone, when set, receives the outcome instead of done (a request from a peer).
	onDone Answer
	// permit says the call holds a permit of the application job queue (a reserved supply
	// permit if message.reserved) until it ends; inbound is the Core HWM charge of a peer's
	// message while it is in the lane, which the call keeps until it ends for a one-way message
	// (kept).
	permit  bool
	inbound int64
	kept    *capacity.Charge
	// For a message to an Actor: seq is its admission order among the Actor's messages;
	// counted says it is in the Actor's queued count; follow marks a message that follows the
	// Actor from its old Spot.
	seq     uint64
	counted bool
	follow  bool
	// ackHeld marks a one-way message its Actor's move held whose sender is not answered
	// yet: acknowledge answers it (onDone, or ack for a sender on this node) once it is
	// admitted where it runs, or ends unrun.
	ackHeld bool
	ack     chan error
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// newCall returns a call record for a message. A request's comes from callPool: its caller
// usually runs it inline and returns it on the same processor, where the pool is cheapest. A
// one-way message's is allocated: it is released by the Spot's runner, most often on another
// processor, and a pool round trip across processors costs more than the allocation.
func newCall(oneWay bool) *call {
	if oneWay {
		return &call{}
	}
	return callPool.Get().(*call)
}

// release puts the call back in the pool, after returning what it holds if it never ran. A
// charge it kept goes back to the stream that read the request, which returns it with the
// refusal, or keeps it for the next admission of the same message.
func (k *call) release() {
	if k.kept != nil {
		k.kept.Unkeep()
		k.kept = nil
	}
	k.settle()
	k.ctx, k.a, k.md, k.req, k.reply, k.err, k.onDone, k.actor = nil, nil, nil, nil, nil, nil, nil, nil
	k.seq, k.counted, k.follow, k.ackHeld, k.ack, k.ownCtx = 0, false, false, false, nil, false
	if k.done != nil {
		callPool.Put(k)
	}
}

// settle returns the permit and the Core HWM bytes the call holds, once: when its job ends
// (finish), or when it was never admitted (release). A request abandoned by its caller is never
// released, so its job's end must return them.
func (k *call) settle() {
	if k.permit || k.inbound != 0 {
		m := k.a.cat.cfg.Meter
		if k.permit {
			m.Return(k.reserved)
		}
		if k.inbound != 0 {
			m.InLane(-k.inbound)
		}
		if k.kept != nil {
			k.kept.Release()
		}
		k.permit, k.reserved, k.inbound, k.kept = false, false, 0, nil
	}
}

// nestedJob reports whether a job is made by a running turn: a one-way message's or a timer's,
// or a request's that began while the job queue was busy (run). Such a job never waits for a
// permit, which its own caller may hold.
func nestedJob(ctx context.Context) bool { return turnOf(ctx) != nil || nestedRequestTurn(ctx) }

// Run implements exec.Work. A message runs only if its Spot's owner lease is still certainly
// valid when its turn comes (C1) and, for a request, its caller is still waiting. A one-way
// message's handler gets a context that ends when the Spot ends; a request's, its caller's.
func (k *call) Run() {
	if k.actor != nil && !k.actor.mayRun(k) {
		return // held to follow the Actor, or ended unrun
	}
	k.runThen(k.ranOnRunner)
}

// ranOnRunner finishes a call whose turn ran. A call that holds a permit was queued, so it ran
// on its Spot's runner, which takes the permit over (jobEnded); an Actor's message keeps its
// own, since its Actor may have moved to another Spot's queue.
func (k *call) ranOnRunner(reply proto.Message, err error) {
	if !k.permit || k.actor != nil {
		k.finish(reply, err)
		return
	}
	// The job keeps its permit until it is answered or logged, as a handler keeps its own
	// while it runs; k may be reused once finished.
	a, reserved := k.a, k.reserved
	k.permit, k.reserved = false, false
	defer a.jobEnded(reserved) // even if finish panics
	k.finish(reply, err)
}

// runThen runs the turn and hands its outcome to finish, once. A panic outside the handler
// (which invoke recovers) still ends the message with ErrHandlerPanicked, so that its permit
// and charge return and a caller gets an answer; finish runs outside this guard, so that a
// message is never finished twice, even when finish itself fails. What the error names is
// read first: a finished message may be reused.
func (m *message) runThen(finish func(proto.Message, error)) {
	ran := false
	_, typ, _ := m.object()
	method := m.md.Name
	defer func() {
		if !ran {
			finish(nil, fmt.Errorf("%w: %s.%s: the runtime failed around the handler", sdk.ErrHandlerPanicked, typ, method))
		}
	}()
	reply, err := m.run()
	ran = true
	finish(reply, err)
}

// turnChecked, when set, runs after a turn's lease check let it start and before anything
// else of the turn: where a pause of the process would fall. Only tests set it.
var turnChecked atomic.Pointer[func()]

// run runs the turn and returns its outcome. A one-way message's turn gets a Spot context.
func (m *message) run() (proto.Message, error) {
	checked, ok := m.a.checkTurn()
	if !ok || m.actor != nil && !m.actor.leaseHeld() {
		return nil, m.a.errLeaseEnded()
	}
	if hook := turnChecked.Load(); hook != nil {
		(*hook)()
	}
	ctx := m.ctx
	callers := false
	switch {
	case m.oneWay, bare(ctx):
		// A context of the Spot's own: it ends when the Spot ends, and a request made with it
		// of the Spot itself is recognised.
		ctx = m.a.turnContext(m.ctx)
	default:
		if err := errAt(ctx, checked); err != nil {
			return nil, err // the caller gave up while it was queued
		}
		callers = true
	}
	m.a.beginTurn(checked)
	// I3: the level is read once, as the turn starts; a change during the turn applies to the
	// next one. Off costs this load and nothing else: the turn's context stays as it is.
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		return m.runObserved(ctx, lvl, callers)
	}
	if callers {
		return m.invokeAsRequestTurn(ctx)
	}
	return m.invoke(ctx)
}

// errAt is ctx's error with its deadline checked at now, the reading of the clock that the
// turn's lease check has just taken. A peer's request context answers for that reading
// (transport's ErrAt) rather than reading the clock again; any other context answers Err.
func errAt(ctx context.Context, now time.Time) error {
	if c, ok := ctx.(interface{ ErrAt(time.Time) error }); ok {
		return c.ErrAt(now)
	}
	return ctx.Err()
}

// invokeAsRequestTurn runs a request's handler with ctx under the turn's identity, by which a
// request made with its context (or one derived from it) of its own Spot is recognised. While
// the job queue is busy, the jobs the turn makes are known as nested: they never wait for
// permits it holds itself. The identity leaves the activation however the turn ends.
func (m *message) invokeAsRequestTurn(ctx context.Context) (proto.Message, error) {
	ctx, turn := requestTurn(ctx, m.a.cat.cfg.Meter.Busy(), m.ownCtx)
	m.a.turn.Store(uintptr(unsafe.Pointer(turn)))
	defer func() {
		m.a.turn.Store(0)
		runtime.KeepAlive(turn) // its address is the turn's identity until here
	}()
	return m.invoke(ctx)
}

// runObserved runs the turn inside its telemetry at lvl: the handler's context carries the
// turn's server span, so that the calls it makes are the span's children (I5).
func (m *message) runObserved(ctx context.Context, lvl sdk.DiagnosticsLevel, callers bool) (proto.Message, error) {
	a := m.a
	kind, typ, id := m.object()
	traced, span := a.cat.tel.StartTurn(ctx, lvl, kind, typ, id, m.md.Name, m.oneWay)
	req := m.req
	var reply proto.Message
	var err error
	if callers {
		// The handler's calls get client spans, contexts derived from its own, which carry
		// the turn's identity.
		reply, err = m.invokeAsRequestTurn(traced)
	} else {
		reply, err = m.invoke(traced)
	}
	span.EndTurn(err, req, reply)
	return reply, err
}

// invoke runs the handler; a panic becomes the caller's ErrHandlerPanicked.
func (m *message) invoke(ctx context.Context) (reply proto.Message, err error) {
	m.a.cat.stats.turns.add(m.a.exec.Stripe())
	defer func() {
		if v := recover(); v != nil {
			_, typ, id := m.object()
			m.a.cat.log.Error("handler panicked", "type", typ, "id", id, "method", m.md.Name,
				"panic", v, "stack", string(debug.Stack()))
			reply, err = nil, fmt.Errorf("%w: %s.%s: %v", sdk.ErrHandlerPanicked, typ, m.md.Name, v)
		}
	}()
	impl := m.a.impl
	if m.actor != nil {
		impl = m.actor.impl
	}
	reply, err = m.md.Invoke(impl, ctx, m.req)
	if err != nil {
		err = wire.HandlerError(err)
	} else if !m.md.OneWay && (reply == nil || !reply.ProtoReflect().IsValid()) {
		// A handler that answered nil: the caller gets an empty reply, as a remote caller does.
		reply = m.md.NewReply()
	}
	return reply, err
}

// object names what the message is for: its Actor, or its Spot.
func (m *message) object() (sdk.SpotKind, string, string) {
	if act := m.actor; act != nil {
		return sdk.KindActor, act.typ.desc.Name, act.id
	}
	return m.a.typ.desc.Kind, m.a.typ.desc.Name, m.a.id
}

// Drop implements exec.Work.
func (k *call) Drop(err error) {
	if k.counted {
		k.counted = false
		k.actor.queued.Add(-1)
	}
	k.finish(nil, err)
}

// acknowledge answers the sender of a held one-way message, once: it was admitted where it
// runs (err nil), or ended unrun (err). Nothing for any other message.
func (k *call) acknowledge(err error) {
	if answer := k.detachAnswer(); answer != nil {
		answer(err)
	}
}

// detachAnswer takes the answer of a held one-way message's sender out of k, so that it can be
// given once k is in a lane again, without touching k (which may have run by then); nil for
// any other message.
func (k *call) detachAnswer() func(error) {
	if !k.ackHeld {
		return nil
	}
	k.ackHeld = false
	if done := k.onDone; done != nil {
		k.onDone = nil
		return func(err error) { done.Answer(nil, err) }
	}
	if ack := k.ack; ack != nil {
		k.ack = nil
		return func(err error) { ack <- err }
	}
	return nil
}

func (k *call) finish(reply proto.Message, err error) {
	k.settle()
	k.acknowledge(err) // a held one-way message that followed to another node, or was dropped
	if k.onDone != nil && !k.oneWay {
		done := k.onDone
		k.release()
		done.Answer(reply, err)
		return
	}
	if k.oneWay {
		if err != nil {
			k.logOneWayFailure(err)
		}
		k.release()
		return
	}
	k.reply, k.err = reply, err
	k.done <- struct{}{}
}

// oneWayOf makes again the one-way message m to a: a local one-way message travels by value
// in its Spot's lane (exec.Message), so that sending one allocates nothing, and its runner
// holds it on its own stack while it runs; it holds a permit of the job queue until its job
// ends. A call's record (160 bytes) also answers requests, peers and Actors' moves.
func oneWayOf(a *activation, m *exec.Message) message {
	return message{ctx: m.Ctx, a: a, md: m.Method, req: m.Req, oneWay: true, reserved: m.Reserved}
}

// RunMessage implements exec.Owner: as a call's, a one-way message's turn runs only if the
// Spot's owner lease is still certainly valid (C1), and its handler gets a context that ends
// when the Spot ends. Nobody waits for its outcome: a failure is logged.
func (a *activation) RunMessage(m exec.Message) {
	msg := oneWayOf(a, &m)
	msg.runThen(func(_ proto.Message, err error) {
		// The job keeps its permit until its log is written, as a handler keeps its own
		// while it runs: permits that the runner holds back are of jobs that ended.
		defer a.jobEnded(msg.reserved)
		if err != nil {
			msg.logOneWayFailure(err)
		}
	})
}

// DropMessage implements exec.Owner: the message's permit returns and the reason it did not
// run is logged.
func (a *activation) DropMessage(m exec.Message, err error) {
	msg := oneWayOf(a, &m)
	a.cat.cfg.Meter.Return(msg.reserved)
	if err != nil {
		msg.logOneWayFailure(err)
	}
}

// permitBatch is how many job permits of ended jobs a Spot's runner returns together.
const permitBatch = 16

// jobEnded takes over the job permit of a message whose turn ended on a's runner: the runner
// returns such permits permitBatch at a time and when its run ends (RunEnd), so that a job
// writes the node's count of permits in use, which both processors write, once rather than
// twice. A handler that blocks holds fewer than permitBatch of them back; a job that waits
// for a permit meanwhile, or a stream's reader that waits for intake to resume, has the meter
// reclaim them (reclaimHeld). Only the runner calls it.
func (a *activation) jobEnded(reserved bool) {
	m := a.cat.cfg.Meter
	if reserved || m == nil {
		m.Return(reserved)
		return
	}
	if a.ended.Add(1) >= permitBatch {
		m.ReturnMany(a.ended.Swap(0))
	}
}

// BeforeItem lists a where the meter's reclaim finds it, when its runner is about to start an
// item, which may block, while it holds permits back.
func (a *activation) BeforeItem() {
	if !a.listed.Load() && a.ended.Load() > 0 {
		a.cat.holders.add(a)
	}
}

// RunEnd returns the permits that a's runner held back, at the end of its run, and lets go of
// the last sender's context.
func (a *activation) RunEnd() {
	a.sent = nil
	if n := a.ended.Swap(0); n > 0 {
		a.cat.cfg.Meter.ReturnMany(n)
	}
	if a.listed.Load() {
		a.cat.holders.remove(a)
	}
}

// Panicked logs a panic of a's work, which its executor contained.
func (a *activation) Panicked(v any, stack []byte) { a.cat.execPanic(v, stack) }

// holders are the activations whose runners may hold permits of ended jobs back while they
// run an item, in stripes by their executors' stripes, so that runners on different
// processors seldom write the same lock.
type holders struct {
	stripes [16]holderStripe
}

type holderStripe struct {
	mu  sync.Mutex
	set map[*activation]struct{}
	_   [128 - 16]byte // a stripe's own cache lines
}

func (h *holders) of(a *activation) *holderStripe {
	return &h.stripes[a.exec.Stripe()%uint32(len(h.stripes))]
}

func (h *holders) add(a *activation) {
	st := h.of(a)
	st.mu.Lock()
	if st.set == nil {
		st.set = make(map[*activation]struct{})
	}
	st.set[a] = struct{}{}
	a.listed.Store(true)
	st.mu.Unlock()
}

func (h *holders) remove(a *activation) {
	st := h.of(a)
	st.mu.Lock()
	delete(st.set, a)
	a.listed.Store(false)
	st.mu.Unlock()
}

// reclaimHeld returns the permits that runners hold back now, for the meter (SetReclaim): a
// job waits for a permit, or a stream's reader for intake to resume, longer than a handler
// should take, and the permits may be held by a runner whose handler blocks.
func (c *Catalog) reclaimHeld() {
	var n int64
	for i := range c.holders.stripes {
		st := &c.holders.stripes[i]
		st.mu.Lock()
		for a := range st.set {
			n += a.ended.Swap(0)
		}
		st.mu.Unlock()
	}
	c.cfg.Meter.ReturnMany(n)
}

// logOneWayFailure reports a one-way message that failed or did not run: nobody waits for it.
func (m *message) logOneWayFailure(err error) {
	log := m.a.cat.log
	_, typ, id := m.object()
	attrs := []any{"type", typ, "id", id, "method", m.md.Name, "err", err}
	if errors.Is(err, sdk.ErrStaleRoute) || errors.Is(err, sdk.ErrClosed) {
		log.Debug("one-way message dropped unrun", attrs...)
		return
	}
	log.Warn("one-way handler failed", attrs...)
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
// request; a one-way message is acknowledged by Admit's own return. Every error Admit returns
// is a refusal: the message did not run. ErrClosing says a close of the Spot is being decided:
// wait for it with AwaitClose, then admit again. ErrCreating says this node is creating the
// Spot: wait for the creation with AwaitCreation, then admit again; Admit itself never waits.
func (c *Catalog) Admit(ctx context.Context, t sdk.Target, method string, req proto.Message, size int, oneWay bool, done Answer) error {
	return c.admit(ctx, t, method, req, size, oneWay, false, done)
}

// admit is Admit; follow marks a message that the relocation of the Spot held, which enters the
// lane without the lane's limits and without a job permit (E5).
func (c *Catalog) admit(ctx context.Context, t sdk.Target, method string, req proto.Message, size int, oneWay, follow bool, done Answer) error {
	if t.Kind() == sdk.KindEntry {
		e, md, err := c.entryMethod(t, method, oneWay, req)
		if err != nil {
			return err
		}
		if !e.turnAllowed() {
			return c.errLeaseNotValid()
		}
		if err := c.submit(ctx, &e.activation, nil, md, req, size, oneWay, false, done); err != nil {
			if errors.Is(err, exec.ErrAdmissionClosed) {
				return c.errStopping() // an Entry Spot closes only with its node
			}
			return err
		}
		return nil
	}
	typ, err := c.ownedType(t)
	if err != nil {
		return err
	}
	key := spotKey{typ.desc.Name, t.ID()}
	sp, creating := c.cachedSpotAt(key), false
	if sp == nil {
		sp, creating = c.slotOf(key)
	}
	if sp == nil && creating {
		// B7: the creation here may have committed Ready already, and the peer routed by that
		// record, before the activation was registered here. The message is not refused but
		// waits for the creation, off the caller's goroutine.
		return ErrCreating
	}
	if sp == nil {
		if moved := c.departed(t); moved != nil {
			return moved // a relocation moved it lately: the sender follows it (Message Follow)
		}
		// The peer's route names this node: if a record of ours says so too, it has no
		// activation behind it and the reconcile releases it (B8).
		c.suspect(store.SpotKey{Type: key.typ, ID: key.id})
		return fmt.Errorf("%w: node %s does not own %v", sdk.ErrStaleRoute, c.cfg.Node, t.Plain())
	}
	a := sp.base()
	if !a.turnAllowed() {
		// Created under an owner lease that has ended: it owns nothing any more (C1).
		if _, err := c.beginClose(context.Background(), sp, sdk.CloseOwnerLost, false); err != nil && !errors.Is(err, errAlreadyClosed) {
			c.log.Warn("a Spot of an ended owner lease could not be closed", "spot", key.typ, "id", key.id, "err", err)
		}
		return c.errLeaseNotValid()
	}
	switch a.current() {
	case stateActive:
	case stateRelocating:
		return ErrClosing // wait for the unit's outcome, then admit again
	default:
		return fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, t.Plain())
	}
	md, err := c.method(typ, method, oneWay, nil)
	if err != nil {
		return err
	}
	err = c.submit(ctx, a, nil, md, req, size, oneWay, follow, done)
	if errors.Is(err, exec.ErrAdmissionClosed) {
		if st := a.current(); st == stateActive || st == stateRelocating {
			return ErrClosing
		}
		return fmt.Errorf("%w: %v is closing", sdk.ErrNotFound, t.Plain())
	}
	return err
}

// DeliverAsync runs method on the local Spot of route like Deliver, but reports a request's
// outcome to done instead of waiting; a one-way message is acknowledged by its return. Every
// error it returns is a refusal: the message did not run.
func (c *Catalog) DeliverAsync(ctx context.Context, route Route, method string, req proto.Message, size int, oneWay bool, done Answer) error {
	if !route.Local() {
		return ErrRemoteOwner
	}
	md, err := c.method(route.local.base().typ, method, oneWay, nil)
	if err != nil {
		return err
	}
	if !route.local.base().turnAllowed() {
		return c.errLeaseNotValid()
	}
	err = c.submit(ctx, route.local.base(), nil, md, req, size, oneWay, false, done)
	if errors.Is(err, exec.ErrAdmissionClosed) {
		return ErrClosing
	}
	return err
}

// submit admits one message with a completion callback; a refusal is returned as is. act, when
// set, is the Actor of a the message is for; follow marks a message that follows it. Its caller
// has just found the owner lease certainly valid (turnAllowed), so that a message is refused,
// unrun, by a lease known to have ended; its turn checks the lease again (C1).
func (c *Catalog) submit(ctx context.Context, a *activation, act *actor, md *sdk.MethodDesc, req proto.Message, size int, oneWay, follow bool, done Answer) error {
	m := c.cfg.Meter
	k := newCall(oneWay)
	k.ctx, k.a, k.md, k.req, k.oneWay = ctx, a, md, req, oneWay
	if !follow {
		// A message that follows an Actor was admitted once already, before its move: it is
		// not refused now for want of a permit or of room in the lane (E5).
		reserved, err := m.Acquire(ctx, nestedJob)
		if err != nil {
			k.release()
			return err
		}
		k.permit, k.reserved = true, reserved
	}
	// A one-way message's done answers its sender only if its Actor's move holds it
	// (acknowledge); otherwise the sender is answered as soon as this returns.
	k.onDone, k.ownCtx = done, !oneWay && done != nil && ownContext(ctx, done)
	if m != nil {
		inbound := capacity.Request(size)
		if ch := capacity.ChargeOf(ctx); oneWay && ch != nil {
			// The peer is acknowledged as soon as this returns: the call keeps the request's
			// charge, against the Core HWM and its stream's share, until its job ends. The
			// stream bounds what its messages keep (E6): past that, this one is refused.
			if !ch.Keep() {
				k.release()
				return errKeptShare(a, md, size)
			}
			k.kept = ch
		}
		m.InLane(inbound)
		k.inbound = inbound
	}
	it := exec.Item{Lane: sdk.LaneApplication, Payload: int64(size), Activity: true, Unbounded: follow}
	var err2 error
	if act != nil {
		k.actor, k.follow = act, follow
		_, err2 = act.admit(k, it, true)
		if err2 == errHeld {
			if oneWay {
				return ErrHeld // done answers the sender
			}
			return nil
		}
	} else {
		err2 = a.exec.Submit(it, k)
	}
	if err2 != nil {
		k.release()
		if err2 == exec.ErrAdmissionClosed {
			return err2
		}
		return describeRefusal(err2, a, md)
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

// CheckRequest refuses req for method of the type named typ when this node registered that
// type and the method takes another message: a peer would decode req's bytes into its own
// request message and run the handler on what came out.
func (c *Catalog) CheckRequest(typ, method string, req proto.Message) error {
	if t, ok := c.types[typ]; ok {
		if m, ok := t.methods[method]; ok {
			return m.check(typ, req)
		}
	}
	return nil
}

// CheckOwner answers, for a peer's message to the User or Instance Spot or the Actor t along a
// route, whether this node holds t (C1): nil when t is here in any state (a Spot being created,
// active, relocating or closing; an Actor in the index whose move out of this node has not
// committed); otherwise the refusal that Admit or AdmitActor gives such a route, a MovedError
// for an object that moved lately or sdk.ErrStaleRoute. It reads no store. A message this node
// knows no handler for meets it first, so that the route is found stale before the
// unhandled-message policy drops the message at a node that does not hold its object.
func (c *Catalog) CheckOwner(t sdk.Target) error {
	if t.Kind() == sdk.KindActor {
		if act, ok := c.LocalActor(t); ok {
			if act.movedAway() {
				return &MovedError{Node: act.movedTo}
			}
			return nil
		}
		if node, moved := c.Departed(t); moved {
			return &MovedError{Node: node}
		}
		return fmt.Errorf("%w: node %s does not hold %v", sdk.ErrStaleRoute, c.cfg.Node, t)
	}
	key := spotKey{t.Type(), t.ID()}
	if sp, creating := c.slotOf(key); sp != nil || creating {
		return nil
	}
	if moved := c.departed(t); moved != nil {
		return moved
	}
	if typ, ok := c.types[key.typ]; ok && typ.desc.Kind == t.Kind() {
		c.suspect(store.SpotKey{Type: key.typ, ID: key.id}) // as Admit does (B8)
	}
	return fmt.Errorf("%w: node %s does not own %v", sdk.ErrStaleRoute, c.cfg.Node, t.Plain())
}

// LocalSpot returns the route to t when t is active on this node: the hot path of a call,
// without any store read.
func (c *Catalog) LocalSpot(t sdk.Target) (Route, bool) {
	k := t.Kind()
	if k != sdk.KindUser && k != sdk.KindInstance {
		return Route{}, false
	}
	sp := c.cachedSpotAt(spotKey{t.Type(), t.ID()})
	// The owner lease is not checked here: every turn checks it when it starts, and reading the
	// clock twice per call costs more than a call that finds it ended.
	if sp == nil || sp.Kind() != k || sp.base().current() != stateActive {
		return Route{}, false
	}
	return Route{local: sp}, true
}

// errKeptShare refuses a peer's one-way message for a that its stream cannot keep: the
// messages of that peer queued or running at this node's consumers hold half its stream's
// share of the Core HWM, and this one would pass it (E6).
func errKeptShare(a *activation, md *sdk.MethodDesc, size int) error {
	return fmt.Errorf("%w: %s.%s on %s/%q: the one-way message of %d bytes was not queued: its peer's messages queued on this node hold half that peer's share of the inbound budget",
		sdk.ErrInboundBudget, a.typ.desc.Name, md.Name, a.typ.desc.Kind, a.id, size)
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
