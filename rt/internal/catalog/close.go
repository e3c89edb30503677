package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/sdk"
)

var (
	// errAlreadyClosed: the Spot closed before this close request reached it.
	errAlreadyClosed = errors.New("catalog: spot already closed")
	// errNotQuiescent: idle cleanup found work on the Spot when it re-checked (D3, K10).
	errNotQuiescent = errors.New("catalog: spot is not quiescent")
	// errRelocated: a relocation unit moved the Spot to another node before the close began;
	// the close, if it is still wanted, goes there.
	errRelocated = errors.New("catalog: spot relocated")
)

// closeTxn is one close of one activation; concurrent closers of the same Spot share it (D3).
//
// A close is first pending: application admission is paused while the turn in progress and
// the queued work finish and the store takes the release. Callers that meet a pending close
// wait for its decision instead of being told the Spot is gone: if the store does not take the
// release, the Spot serves on and they are admitted after all.
type closeTxn struct {
	reason sdk.CloseReason
	from   context.Context // whose trace the close belongs to (a shutdown's)

	decideOnce sync.Once
	decided    chan struct{} // closed once the close is certain or abandoned

	done chan struct{} // closed when the close ended; err is its outcome
	err  error
}

func newCloseTxn(reason sdk.CloseReason) *closeTxn {
	return &closeTxn{reason: reason, decided: make(chan struct{}), done: make(chan struct{})}
}

// decide records that the close is certain or abandoned; only the first call counts.
func (tx *closeTxn) decide() { tx.decideOnce.Do(func() { close(tx.decided) }) }

// CloseTarget explicitly closes the User or Instance Spot t, which must be active on this node
// (D3). Concurrent closes of the same Spot are merged into one.
func (c *Catalog) CloseTarget(ctx context.Context, t sdk.Target) error {
	if t.Kind() == sdk.KindActor {
		act, ok := c.LocalActor(t)
		if !ok {
			return fmt.Errorf("%w: %v is not on node %s", ErrRemoteOwner, t, c.cfg.Node)
		}
		return c.CloseActor(ctx, act)
	}
	typ, err := c.routedType(t)
	if err != nil {
		return err
	}
	key := spotKey{typ.desc.Name, t.ID()}
	for range maxRounds {
		route, wait, err := c.local(ctx, key, Plain)
		if errors.Is(err, sdk.ErrNotFound) {
			// Closing already: join that close.
			if sp := c.spotAt(key); sp != nil {
				return c.joinClose(ctx, sp.base())
			}
			continue
		}
		if err != nil {
			return err
		}
		if wait {
			continue
		}
		if route.Local() {
			err := c.closeSpot(ctx, route.local, sdk.CloseExplicit, false)
			switch {
			case errors.Is(err, errAlreadyClosed):
				return nil
			case errors.Is(err, errNotQuiescent), errors.Is(err, errRelocated):
				continue // an idle cleanup gave up, or the Spot moved: look again
			}
			return err
		}
		res, err := c.store.Lookup(ctx, store.SpotKey{Type: key.typ, ID: key.id})
		if err != nil {
			return err
		}
		switch {
		case res.State == store.StateMissing:
			return fmt.Errorf("%w: %v", sdk.ErrNotFound, t)
		case res.Record.Owner != c.Owner():
			return fmt.Errorf("%w: %v is owned by %s", ErrRemoteOwner, t, res.Record.Owner.Node)
		}
		// Our record with no activation here: release what was left.
		if err := c.releaseLeaked(ctx, key, res.Record); err != nil {
			return err
		}
	}
	return fmt.Errorf("catalog: close %v did not settle", t)
}

func (c *Catalog) spotAt(key spotKey) ownedSpot {
	sh := c.slots.of(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if sl := sh.m[key]; sl != nil {
		return sl.spot
	}
	return nil
}

// cachedSpotAt is spotAt through the Spot cache: the path of every message to a Spot.
func (c *Catalog) cachedSpotAt(key spotKey) ownedSpot {
	h := keyHash(key)
	sh := c.slots.at(h)
	if sp := c.cache.get(h, key, sh); sp != nil {
		return sp
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	sl := sh.m[key]
	if sl == nil || sl.spot == nil {
		return nil
	}
	c.cache.fill(h, sl.spot, sh)
	return sl.spot
}

// pendingClose returns a's close in progress, or nil.
func (a *activation) pendingClose() *closeTxn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing
}

// joinClose waits for the close in progress on a, if any.
func (c *Catalog) joinClose(ctx context.Context, a *activation) error {
	tx := a.pendingClose()
	if tx == nil {
		return nil
	}
	select {
	case <-tx.done:
		return tx.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitClose waits until a's close ends, whatever its outcome: the caller then looks again.
func (c *Catalog) waitClose(ctx context.Context, a *activation) error {
	_ = c.joinClose(ctx, a)
	return ctx.Err()
}

// awaitDecision waits until a close in progress on a is certain or abandoned; it returns at
// once when none is.
func (c *Catalog) awaitDecision(ctx context.Context, a *activation) error {
	if _, err := c.awaitRelocation(ctx, a); err != nil {
		return err
	}
	tx := a.pendingClose()
	if tx == nil {
		return nil
	}
	select {
	case <-tx.decided:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AwaitClose waits until a close or a relocation unit in progress on the Spot t is certain or
// abandoned, so that a message refused with ErrClosing can be admitted again, told the Spot
// is gone, or follow it to where it moved.
func (c *Catalog) AwaitClose(ctx context.Context, t sdk.Target) error {
	if sp := c.spotAt(spotKey{t.Type(), t.ID()}); sp != nil {
		return c.awaitDecision(ctx, sp.base())
	}
	return nil
}

// closeSpot runs, or joins, the close transaction of one owned Spot (D3) and waits for it. idle
// marks idle cleanup: it aborts unless the Spot is quiescent when re-checked, where an explicit
// close stops admission and lets queued work finish first.
//
// A close that joins one in progress which then fails — an idle cleanup that found work, a
// release the store did not take — tries again on its own, unless it is an idle cleanup
// itself: a Shutdown or OwnerLost close must not be lost with the close it joined.
func (c *Catalog) closeSpot(ctx context.Context, sp ownedSpot, reason sdk.CloseReason, idle bool) error {
	return c.closeSpotOn(ctx, sp, reason, idle, c.bg.goRun)
}

// closeSpotOn is closeSpot whose close transaction, when it starts one, runs on a goroutine
// that run starts (beginCloseOn).
func (c *Catalog) closeSpotOn(ctx context.Context, sp ownedSpot, reason sdk.CloseReason, idle bool, run func(func()) bool) error {
	for {
		tx, err := c.beginCloseOn(ctx, sp, reason, idle, run)
		if err != nil {
			return err
		}
		select {
		case <-tx.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if tx.err == nil || idle || errors.Is(tx.err, errRelocated) || tx.reason == reason && !errors.Is(tx.err, errNotQuiescent) {
			return tx.err
		}
		if reason != sdk.CloseOwnerLost {
			// Another close failed first; one of this reason is tried at once only when the
			// Spot must end now (its lease ended). Otherwise give the store a moment.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// closeSelf starts the close of sp from its own turn and returns: the close waits for that
// turn to end, so waiting for the close there would never end. The close it started or joined
// is then seen through off the turn: one that failed (another closer's, an idle cleanup that
// found the turn running, a store that did not answer) is tried again as an explicit close,
// since the Spot was told its close was taken.
func (c *Catalog) closeSelf(sp ownedSpot) error {
	tx, err := c.beginClose(context.Background(), sp, sdk.CloseExplicit, false)
	if errors.Is(err, errAlreadyClosed) {
		return nil
	}
	if err != nil {
		return err
	}
	c.bg.goRun(func() {
		select {
		case <-tx.done:
		case <-c.ctx.Done():
			return
		}
		if tx.err == nil || errors.Is(tx.err, errRelocated) {
			return
		}
		err := c.closeSpot(c.ctx, sp, sdk.CloseExplicit, false)
		if err != nil && !errors.Is(err, errAlreadyClosed) && !errors.Is(err, errRelocated) && c.ctx.Err() == nil {
			c.log.Warn("a Spot's close of itself failed; it serves on", "spot", sp.Type(), "id", sp.ID(), "err", err)
		}
	})
	return nil
}

// beginClose starts the close transaction of sp, or returns the one in progress. The close is
// shared: one closer's cancellation ends only its own wait.
func (c *Catalog) beginClose(from context.Context, sp ownedSpot, reason sdk.CloseReason, idle bool) (*closeTxn, error) {
	return c.beginCloseOn(from, sp, reason, idle, c.bg.goRun)
}

// beginCloseOn is beginClose whose close transaction, when it starts one, runs on a goroutine
// that run starts: one of the catalog's background work (c.bg.goRun), or, once Close sealed
// that, one of Close's own (c.bg.goSealed).
func (c *Catalog) beginCloseOn(from context.Context, sp ownedSpot, reason sdk.CloseReason, idle bool, run func(func()) bool) (*closeTxn, error) {
	a := sp.base()
	a.mu.Lock()
	if tx := a.closing; tx != nil {
		a.mu.Unlock()
		return tx, nil
	}
	if a.current() == stateClosed {
		a.mu.Unlock()
		return nil, errAlreadyClosed
	}
	tx := newCloseTxn(reason)
	tx.from = from
	a.closing = tx
	a.mu.Unlock()

	started := run(func() {
		tx.err = c.runClose(sp, tx, idle)
		c.endClose(a, tx)
	})
	if !started {
		// The catalog has stopped: its force-stop ends the activation.
		tx.err = c.errStopping()
		c.endClose(a, tx)
	}
	return tx, nil
}

// endClose publishes the outcome of tx; a close that failed leaves the Spot open to the next.
func (c *Catalog) endClose(a *activation, tx *closeTxn) {
	if tx.err != nil && a.current() != stateClosed {
		a.mu.Lock()
		a.closing = nil
		a.mu.Unlock()
	}
	tx.decide()
	close(tx.done)
}

// releases pairs each close reason that releases a record with the tag the record carries while
// it is released (D5); any other reason releases as OwnerLost.
var releases = []struct {
	reason sdk.CloseReason
	tag    store.ReleaseTag
}{
	{sdk.CloseExplicit, store.ReleaseExplicitClose},
	{sdk.CloseIdleEvicted, store.ReleaseIdle},
	{sdk.CloseShutdown, store.ReleaseShutdown},
	{sdk.CloseCreationFailed, store.ReleaseCreationFailed},
}

// releaseTag is the tag a close for r releases the record with.
func releaseTag(r sdk.CloseReason) store.ReleaseTag {
	for _, p := range releases {
		if p.reason == r {
			return p.tag
		}
	}
	return store.ReleaseOwnerLost
}

// closeReason is the close reason a release tag stands for.
func closeReason(t store.ReleaseTag) sdk.CloseReason {
	for _, p := range releases {
		if p.tag == t {
			return p.reason
		}
	}
	return sdk.CloseOwnerLost
}

// runClose is the close transaction (D3): pause admission (re-checking quiescence for idle
// cleanup), let the turn in progress and the queued application work finish, mark the record
// Releasing, run the closing callback on the Spot's own queue, tear the activation down, and
// only then delete the record. Until the store takes the release the Spot is not closing: a
// store that cannot take it leaves the Spot serving. A Spot whose owner lease ended skips the
// store: its queued work is dropped unrun, its context cancelled, and then its callback runs
// with CloseOwnerLost.
func (c *Catalog) runClose(sp ownedSpot, tx *closeTxn, idle bool) error {
	a := sp.base()
	// A relocation unit in progress finishes first (F9): the Spot stays, or it closes there.
	if moved, err := c.awaitRelocation(c.hardCtx, a); moved != nil || err != nil {
		return errRelocated
	}
	if !a.exec.CloseApplication(idle) {
		return errNotQuiescent
	}
	if idle && a.memberCount.Load() != 0 {
		// An Actor joined after the scan chose the Spot (D2).
		a.exec.OpenApplication()
		return errNotQuiescent
	}
	if inst, ok := sp.(*instanceSpot); ok && idle {
		// Work may have run and ended since the scan chose the Spot: the timeout counts from
		// the end of the last (D2), and no work starts now that admission is paused.
		if since, _ := a.exec.IdleSince(); time.Duration(exec.Now()-since) < inst.idleTimeout() {
			a.exec.OpenApplication()
			return errNotQuiescent
		}
	}
	// The wait for the Spot's own code (its turn, its callbacks) and each store write have a
	// budget of OperationTimeout each, so that a callback that hangs does not leave the
	// release without time. The close's span is a child of the closer's (a shutdown's); the
	// node's forced stop ends every wait.
	bound := telemetry.WithTraceOf(c.hardCtx, tx.from)
	ctx, cancel := context.WithTimeout(bound, c.cfg.OperationTimeout)
	defer cancel()
	key := sp.storeKey()
	reason := tx.reason
	if reason == sdk.CloseOwnerLost || !a.turnAllowed() {
		c.endActivation(bound, sp, tx, sdk.CloseOwnerLost)
		c.retire(sp, sdk.CloseOwnerLost)
		return nil
	}
	if err := c.awaitTurnEnd(ctx, a); err != nil {
		a.exec.OpenApplication()
		return fmt.Errorf("close %s: %w", key, err)
	}
	rel, err := storeWrite(c, func(ctx context.Context) (store.Record, error) {
		return c.store.BeginRelease(ctx, key, sp.record(), releaseTag(reason))
	})
	// The callbacks have budgets of their own (endActivation): the wait for the turn and the
	// store's write may have spent the first, and the record is not deleted before the
	// callback ends unless it overruns its own (D3).
	cancel()
	switch {
	case errors.Is(err, store.ErrFenced):
		// The record is no longer this activation's: it ends here and the record is left to
		// whoever holds it now; the reconcile reads who that is.
		c.suspect(key)
		c.endActivation(bound, sp, tx, sdk.CloseOwnerLost)
		c.retire(sp, sdk.CloseOwnerLost)
		return nil
	case err != nil && !a.turnAllowed():
		// The owner lease ended while the store did not answer: the Spot ends here anyway.
		c.suspect(key)
		c.endActivation(bound, sp, tx, sdk.CloseOwnerLost)
		c.retire(sp, sdk.CloseOwnerLost)
		return nil
	case err != nil:
		// The store did not take the release: the Spot serves on; the close may be tried
		// again. A release whose outcome is unknown is checked by the reconcile.
		c.suspect(key)
		a.exec.OpenApplication()
		return fmt.Errorf("close %s: %w", key, err)
	}
	sp.setRecord(rel)
	c.endActivation(bound, sp, tx, reason)
	_, err = storeWrite(c, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.finishRelease(ctx, key, rel)
	})
	c.retire(sp, reason)
	return err
}

// storeWrite runs one store write of a shared operation with a budget of its own.
func storeWrite[T any](c *Catalog, write func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(c.hardCtx, c.cfg.OperationTimeout)
	defer cancel()
	return write(ctx)
}

// endActivation ends a Spot whose close is certain: the closing callback runs on its queue
// (after the context is cancelled and the queue dropped when the owner lease ended), then the
// executor and timers stop. bound ends it all (the node's forced stop); its Actors' callbacks
// and then its own each have a budget of OperationTimeout within it, counted from their start,
// so that neither the waits before them nor each other leave them without time (D3).
func (c *Catalog) endActivation(bound context.Context, sp ownedSpot, tx *closeTxn, reason sdk.CloseReason) {
	ctx := bound
	a := sp.base()
	key := sp.storeKey()
	if lvl := sdk.CurrentDiagnosticsLevel(); lvl != sdk.DiagnosticsLevelOff {
		var span *telemetry.Span
		ctx, span = c.tel.StartClose(ctx, lvl, a.typ.desc.Kind, key.Type, key.ID, reason)
		defer span.End(nil)
	}
	a.state.Store(uint32(stateClosing))
	tx.decide()
	budget := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, c.cfg.OperationTimeout)
	}
	notify := func() {
		cb, cancel := budget()
		defer cancel()
		c.notifyClose(cb, a, reason)
	}
	// Its Actors close first, with its reason; their records go with its own.
	if reason == sdk.CloseOwnerLost {
		a.exec.DropApplication(a.errLeaseEnded())
		c.closeMembers(ctx, a, reason, budget)
		a.teardown()
		notify()
	} else {
		c.closeMembers(ctx, a, reason, budget)
		notify()
		a.teardown()
	}
	a.exec.Close(fmt.Errorf("%w: %s/%q closed (%s)", sdk.ErrClosed, key.Type, key.ID, reason))
}

// retire removes a closed Spot from the catalog.
func (c *Catalog) retire(sp ownedSpot, reason sdk.CloseReason) {
	key := sp.storeKey()
	sk := spotKey{key.Type, key.ID}
	h := keyHash(sk)
	sh := c.slots.at(h)
	sh.lock()
	if sl := sh.m[sk]; sl != nil && sl.spot == sp {
		delete(sh.m, sk)
	}
	c.cache.forget(h, sp)
	sh.mu.Unlock()
	if inst, ok := sp.(*instanceSpot); ok {
		c.idle.remove(inst)
	}
	c.active.Add(-1)
	sp.base().state.Store(uint32(stateClosed))
	c.stats.closed(reason)
}

// finishRelease deletes the record, retrying a store that is briefly unavailable. A record left
// Releasing is finished by the reconcile or by the next caller that meets it here.
func (c *Catalog) finishRelease(ctx context.Context, key store.SpotKey, rel store.Record) error {
	backoff := 20 * time.Millisecond
	for {
		err := c.store.FinishRelease(ctx, key, rel)
		if err == nil || errors.Is(err, store.ErrFenced) {
			return nil
		}
		select {
		case <-ctx.Done():
			c.suspect(key)
			return fmt.Errorf("close %s: release: %w", key, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// awaitTurnEnd waits, bounded by ctx, until the turn in progress and the queued application
// work of a have finished; application admission must be closed.
func (c *Catalog) awaitTurnEnd(ctx context.Context, a *activation) error {
	done := make(chan struct{})
	if err := c.submitLifecycle(ctx, a, barrier(done)); err != nil {
		if errors.Is(err, exec.ErrAdmissionClosed) {
			return nil // the executor closed: nothing runs any more
		}
		if ctx.Err() != nil {
			// The lifecycle lane stayed full behind work that did not end.
			return fmt.Errorf("%w: %w", ErrWorkOutlastedClose, err)
		}
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrWorkOutlastedClose, ctx.Err())
	}
}

// submitLifecycle puts w on a's lifecycle lane after its queued application work, waiting for a
// place while the lane is full, bounded by ctx.
func (c *Catalog) submitLifecycle(ctx context.Context, a *activation, w exec.Work) error {
	for {
		err := a.exec.Submit(exec.Item{Lane: sdk.LaneLifecycle, AfterApplication: true}, w)
		if err == nil || errors.Is(err, exec.ErrAdmissionClosed) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the lifecycle lane stayed full: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// barrier is lifecycle work that marks the end of the application work queued before it.
type barrier chan struct{}

func (b barrier) Run()       { close(b) }
func (b barrier) Drop(error) { close(b) }

// notifyClose runs the Spot's CloseHandler with reason on its own queue, after the queued
// application work, and waits for it, bounded by ctx: no new work is taken meanwhile (D3). A
// callback that does not return in time is left running and the close goes on without it.
func (c *Catalog) notifyClose(ctx context.Context, a *activation, reason sdk.CloseReason) {
	if h, _ := a.impl.(sdk.CloseHandler); h != nil {
		c.notifyCloseOf(ctx, a, h, reason, nil)
	}
}

// notifyCloseOf runs h, the CloseHandler of the Spot a or of its Actor member (when set), on
// a's queue as notifyClose does.
func (c *Catalog) notifyCloseOf(ctx context.Context, a *activation, h sdk.CloseHandler, reason sdk.CloseReason, member *actor) {
	typ, id := a.typ.desc.Name, a.id
	if member != nil {
		typ, id = member.typ.desc.Name, member.id
	}
	done := make(chan struct{})
	if err := c.submitLifecycle(ctx, a, closeWork{ctx: ctx, a: a, member: member, handler: h, reason: reason, done: done, typ: typ, id: id}); err != nil {
		if !errors.Is(err, exec.ErrAdmissionClosed) {
			c.log.Error("closing callback not run", "type", typ, "id", id, "reason", reason, "err", err)
		}
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
		c.log.Error("closing callback did not return in time; the close goes on without it",
			"type", typ, "id", id, "reason", reason, "err", ctx.Err())
	}
}

// closeWork runs a CloseHandler on a Spot's queue: the Spot's own, or its Actor member's
// (typ/id).
type closeWork struct {
	ctx     context.Context
	a       *activation
	member  *actor
	handler sdk.CloseHandler
	reason  sdk.CloseReason
	done    chan struct{}
	typ, id string
}

func (w closeWork) Run() {
	defer close(w.done)
	defer func() {
		if v := recover(); v != nil {
			w.a.cat.log.Error("closing callback panicked", "type", w.typ, "id", w.id, "panic", v, "stack", string(debug.Stack()))
		}
	}()
	reason := w.reason
	if w.member != nil {
		reason = w.member.closingReason(reason)
	} else {
		reason = w.a.closingReason(reason)
	}
	mark := w.a.cat.markCallback(w.ctx)
	defer mark.end()
	w.handler.OnClose(mark, reason)
}

func (w closeWork) Drop(error) { close(w.done) }

// closeEntry closes an Entry Spot at the node's end, bounded by ctx. When its work outlasts
// ctx, or ctx ended before its close began, it stops the Spot without its closing callbacks
// and returns why.
func (c *Catalog) closeEntry(ctx context.Context, e *entrySpot) error {
	e.exec.CloseApplication(false)
	e.state.Store(uint32(stateClosing))
	err := ctx.Err()
	if err != nil {
		// The Spots closed before it spent the time: its own work is not the cause.
		err = fmt.Errorf("its close began after the time had run out: %w", err)
	} else {
		err = c.awaitTurnEnd(ctx, &e.activation)
	}
	if err == nil {
		hadActors := e.memberCount.Load() != 0
		c.closeMembers(ctx, &e.activation, sdk.CloseShutdown, func() (context.Context, context.CancelFunc) { return ctx, func() {} })
		c.notifyClose(ctx, &e.activation, sdk.CloseShutdown)
		if hadActors {
			c.releaseEntryActors(e)
		}
	}
	e.exec.Close(fmt.Errorf("%w: node %s closed", sdk.ErrClosed, c.cfg.Node))
	e.teardown()
	e.state.Store(uint32(stateClosed))
	return err
}

// releaseEntryActors deletes the records of the Actors of the Entry Spot e, which closes with
// its node. Records left behind are the reclaimer's once the node's lease ends.
func (c *Catalog) releaseEntryActors(e *entrySpot) {
	_, err := storeWrite(c, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.store.ReleaseHostActors(ctx, store.EntryHost(e.typ.desc.Name, c.Owner()))
	})
	if err != nil {
		c.log.Warn("could not release the Actors of an Entry Spot; the reclaimer will", "spot", e.typ.desc.Name, "err", err)
	}
}
