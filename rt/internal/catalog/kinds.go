package catalog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// The three kinds are three types (A3): entrySpot, userSpot and instanceSpot share the
// activation base, and each kind's rules live on its own type. Only *userSpot and
// *instanceSpot are owned spots (records in the Location Store, explicit close); only
// *instanceSpot has an idle timeout and a place in the idle scan (D7).

// activation is what every kind has: the object, its serial executor, its timers.
type activation struct {
	cat  *Catalog
	typ  *spotType
	id   string
	exec *exec.Executor
	impl any
	// guard is the lease guard of the registration the activation was created under; nil for
	// an Entry Spot, which owns no record and runs under whatever registration its node holds.
	// Every turn checks it first (C1).
	guard *store.LeaseGuard
	// fence is set before an owned activation serves its first turn and never changes after.
	fence sdk.Fence
	// turn is the identity of the context of the request whose turn runs now, or 0.
	turn atomic.Uintptr
	// turnStart is the wall-clock instant, in Unix nanoseconds, at which the latest turn was
	// let start (TurnStart); 0 before the first.
	turnStart atomic.Int64

	state atomic.Uint32 // activationState
	// callers counts the requests of this node's callers in the Spot's delivery, from before
	// they try to run inline until they return: running, queued, waiting for their outcome, or
	// yielded after an inline run. More than one means that callers whose calls a turn
	// answered may wait for a processor behind one that runs its calls inline.
	callers atomic.Int32
	// ended is the job permits of messages whose turns ended, held back by the Spot's runner
	// to be returned together (jobEnded). The runner adds to it; the runner, or the meter's
	// reclaim (Catalog.reclaimHeld), takes it all. listed says that a is in the catalog's
	// holders, where the reclaim finds it: the runner lists a before it starts an item while
	// it holds permits back, and takes it out when its run ends.
	ended  atomic.Int64
	listed atomic.Bool
	// sent is the Spot context of the last turn whose sender's context carried something: the
	// next one-way message of the same sender context takes it again instead of a new one (it
	// never changes once made, so a handler may keep it). Only turns touch it, one at a time,
	// and the end of the run drops it (RunEnd), so that an idle Spot keeps no sender's context.
	// A run that never ends, under steady load, keeps the last one-way sender's context (a
	// remote sender's holds its stream) until it does: one context per busy Spot.
	sent *spotCtx

	mu      sync.Mutex
	log     *slog.Logger    // made on first use
	ctx     context.Context // made on first use: cancelled at close
	cancel  context.CancelFunc
	torn    bool                    // teardown ran: the context is done for good
	client  sdk.Client              // made on first use
	bare    atomic.Pointer[spotCtx] // made on first use: the context of turns whose sender's carries nothing
	timers  map[*spotTimer]struct{}
	closing *closeTxn // the close in progress, merged by every closer (D3)
	// relocating is the relocation unit in progress on this node as its source; restored is
	// the state an arrival brought (RestoredState).
	relocating *relocation
	restored   []byte
	// members are the Actors that are members of the Spot here; memberCount is their number,
	// read by the idle scan (D2).
	members     map[*actor]struct{}
	memberCount atomic.Int32
}

type activationState uint32

const (
	stateActive activationState = iota
	// stateRelocating: a relocation unit moves the Spot; messages wait for its outcome.
	stateRelocating
	stateClosing
	stateClosed
)

func (a *activation) current() activationState { return activationState(a.state.Load()) }

// Type implements sdk.SpotContext.
func (a *activation) Type() string { return a.typ.desc.Name }

// ID implements sdk.SpotContext.
func (a *activation) ID() string { return a.id }

// Node implements sdk.SpotContext.
func (a *activation) Node() sdk.NodeID { return a.cat.cfg.Node }

// Client implements sdk.SpotContext. The Client knows the Spot it belongs to, so that the
// Spot's own handler can close the Spot without waiting for its own turn to end.
func (a *activation) Client() sdk.Client {
	if a.cat.client == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client == nil {
		a.client = spotClient{Client: a.cat.client, a: a}
	}
	return a.client
}

// Fence implements sdk.SpotContext. An Entry Spot's follows its node's registration.
func (a *activation) Fence() sdk.Fence {
	if a.guard == nil {
		reg := a.cat.registration()
		return sdk.Fence{Epoch: reg.Revision(), Lease: reg.Owner().Lease}
	}
	return a.fence
}

// turnAllowed reports whether a turn may start now (C1): an owned Spot runs only while the
// owner lease it was created under is certainly valid, an Entry Spot only while its node holds
// a certainly valid lease — after the node registers again it runs again, but never while
// another process may hold the node's identity. The check reads the monotonic clock, so work
// queued before a pause of the process does not run after it.
func (a *activation) turnAllowed() bool {
	_, ok := a.checkTurn()
	return ok
}

// checkTurn is turnAllowed, which also returns its reading of the clock: the turn's start
// (beginTurn) if it starts. The guard it checks reads the clock (LeaseGuard.ValidNow), so the
// reading is never older than an Entry Spot's guard of a registration made meanwhile.
func (a *activation) checkTurn() (time.Time, bool) {
	if a.guard == nil {
		return a.cat.registration().Guard().ValidNow()
	}
	now, ok := a.guard.ValidNow()
	return now, unfenced || ok
}

// beginTurn records at, the clock reading of the lease check that let a turn start, as the
// turn's start (TurnStart): the lease certainly held then, even if the process paused before
// the turn's first line.
func (a *activation) beginTurn(at time.Time) { a.turnStart.Store(at.UnixNano()) }

// closingReason is the reason a closing callback of a Spot or of one of its Actors gets when
// its turn comes: reason while the owner lease holds, and the callback's turn starts then;
// CloseOwnerLost once the lease may have ended (a pause of the process while the close
// waited), so that the callback does not save state as if it still owned the object.
func (a *activation) closingReason(reason sdk.CloseReason) sdk.CloseReason {
	checked, ok := a.checkTurn()
	if !ok {
		return sdk.CloseOwnerLost
	}
	a.beginTurn(checked)
	return reason
}

// TurnStart implements sdk.SpotContext.
func (a *activation) TurnStart() time.Time {
	if n := a.turnStart.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// admissionAllowed reports whether a message may still be queued for a turn, without reading
// the clock: it fails once the owner lease is known lost, which the keep-alive records when
// the guard's deadline passes — after a pause of the process, only once its goroutine runs
// again. A message admitted before that is refused at its turn by turnAllowed, which reads the
// clock: this check only tells a sender early.
func (a *activation) admissionAllowed() bool {
	if a.guard == nil {
		return !a.cat.registration().Guard().Lost()
	}
	return unfenced || !a.guard.Lost()
}

// errLeaseNotValid refuses a message that a lease not certainly valid keeps from being queued.
func (c *Catalog) errLeaseNotValid() error {
	return fmt.Errorf("%w: node %s's owner lease is not certainly valid", sdk.ErrStaleRoute, c.cfg.Node)
}

// errLeaseEnded answers work that did not run because the owner lease ended first.
func (a *activation) errLeaseEnded() error {
	return fmt.Errorf("%w: %s/%q did not run: node %s's owner lease ended", sdk.ErrStaleRoute, a.typ.desc.Name, a.id, a.cat.cfg.Node)
}

// Logger implements sdk.SpotContext.
func (a *activation) Logger() *slog.Logger {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.log == nil {
		a.log = a.cat.log.With("spot", a.typ.desc.Name, "id", a.id)
	}
	return a.log
}

// context returns the activation's context, cancelled when it closes.
func (a *activation) context() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx == nil {
		a.ctx, a.cancel = context.WithCancel(a.cat.ctx)
		if a.torn {
			a.cancel()
		}
	}
	return a.ctx
}

// ownTurn reports whether ctx is a turn of a's own: the context of the request running now, or
// of a one-way message or timer of a, or one derived from that. A request of a's with it would
// wait for the turn that makes it.
func (a *activation) ownTurn(ctx context.Context) bool {
	if id := a.turn.Load(); id != 0 && id == requestTurnOf(ctx) {
		return true
	}
	return turnOf(ctx) == a
}

// enter counts a request with ctx among a's callers until it calls leave, and reports whether
// the request has company (exec.Item.Company): other callers are in a's delivery, and ctx is
// not a turn's. A caller inside a turn never yields, since its own Spot's callers would wait
// with it.
func (a *activation) enter(ctx context.Context) (company bool) {
	return hasCompany(a.callers.Add(1), ctx)
}

// leave ends what enter began, when the request returns.
func (a *activation) leave() { a.callers.Add(-1) }

// hasCompany reports whether a request with ctx, one of n callers in a Spot's delivery, has
// company.
func hasCompany(n int32, ctx context.Context) bool {
	return n > 1 && turnOf(ctx) == nil && requestTurnOf(ctx) == 0
}

// isTorn reports whether teardown ran.
func (a *activation) isTorn() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.torn
}

// teardown stops the timers, ends the Actors still members (their records go with the
// Spot's) and cancels the activation's context.
func (a *activation) teardown() {
	a.mu.Lock()
	timers := a.timers
	a.timers = nil
	a.torn = true
	cancel := a.cancel
	a.mu.Unlock()
	for t := range timers {
		t.Stop()
	}
	for _, act := range a.memberList() {
		// A member left to its move is its move's to end, unless the node stops: the move's
		// wait for its outcome ends then, before or after this.
		if !act.committed.Load() && (!act.leftToMove.Load() || a.cat.ctx.Err() != nil) {
			a.cat.endActor(context.Background(), a, act, sdk.CloseOwnerLost, false) // the Spot is gone already
		}
	}
	if cancel != nil {
		cancel()
	}
}

// entrySpot is an Entry Spot: made at node start, one per Entry type per node, never moved,
// never closed but by the node's end (A2, A4).
type entrySpot struct {
	activation
}

// Kind implements sdk.SpotContext.
func (*entrySpot) Kind() sdk.SpotKind { return sdk.KindEntry }

// ownedSpot is a Spot with a record in the Location Store: a User or an Instance Spot.
type ownedSpot interface {
	sdk.SpotContext
	base() *activation
	record() store.Record
	setRecord(store.Record)
	storeKey() store.SpotKey
	own() *owned
}

// owned is what User and Instance Spots add to the activation base: their record.
type owned struct {
	activation
	recMu sync.Mutex
	rec   store.Record
	// self is the Spot this is the base of, which the Spot cache hands out; cachedAt is the
	// version of its shard when the cache last took it from the index (spotCache).
	self     ownedSpot
	cachedAt atomic.Uint64
}

func (o *owned) base() *activation { return &o.activation }

func (o *owned) own() *owned { return o }

func (o *owned) record() store.Record {
	o.recMu.Lock()
	defer o.recMu.Unlock()
	return o.rec
}

func (o *owned) setRecord(r store.Record) {
	o.recMu.Lock()
	o.rec = r
	o.recMu.Unlock()
}

func (o *owned) storeKey() store.SpotKey { return store.SpotKey{Type: o.typ.desc.Name, ID: o.id} }

// userSpot is a User Spot: made only by an explicit create, never idle-evicted (A2, D7).
type userSpot struct {
	owned
}

// Kind implements sdk.SpotContext.
func (*userSpot) Kind() sdk.SpotKind { return sdk.KindUser }

// instanceSpot is an Instance Spot: made by the first create-intent call, evicted when idle
// (A2, D1–D7).
type instanceSpot struct {
	owned
	// idleIndex is the Spot's place in the idle scan's list (-1 when absent); guarded by the
	// scanner's lock.
	idleIndex int
}

// Kind implements sdk.SpotContext.
func (*instanceSpot) Kind() sdk.SpotKind { return sdk.KindInstance }

// idleTimeout is the type's timeout, or the node's when the type sets none; ≤ 0 disables.
func (s *instanceSpot) idleTimeout() time.Duration {
	return s.typ.idleTimeout(s.cat.cfg.InstanceSpotIdleTimeout)
}

// evictable reports whether the Spot is an idle-cleanup candidate now (D2, D8): no pending or
// running work, no Actor membership, not relocating, and no activity for the timeout.
func (s *instanceSpot) evictable(now int64) bool {
	d := s.idleTimeout()
	if d <= 0 || s.current() != stateActive || s.memberCount.Load() != 0 {
		return false
	}
	since, quiescent := s.exec.IdleSince()
	return quiescent && time.Duration(now-since) >= d
}
