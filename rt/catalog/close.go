package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/zlink-go/zlink/rt/exec"
	"github.com/zlink-go/zlink/rt/store"
	"github.com/zlink-go/zlink/sdk"
)

var (
	// errAlreadyClosed: the Spot closed before this close request reached it.
	errAlreadyClosed = errors.New("catalog: spot already closed")
	// errNotQuiescent: idle cleanup found work on the Spot when it re-checked (D3, K10).
	errNotQuiescent = errors.New("catalog: spot is not quiescent")
)

// closeTxn is one close of one activation; concurrent closers of the same Spot share it (D3).
type closeTxn struct {
	done   chan struct{}
	reason sdk.CloseReason
	err    error
}

// CloseTarget explicitly closes the User or Instance Spot t, which must be active on this node
// (D3). Concurrent closes of the same Spot are merged into one.
func (c *Catalog) CloseTarget(ctx context.Context, t sdk.Target) error {
	typ, err := c.ownedType(t)
	if err != nil {
		return err
	}
	key := spotKey{typ.desc.Name, t.ID()}
	for range maxRounds {
		rt, wait, err := c.local(ctx, key, Plain)
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
		if rt.Local() {
			err := c.closeSpot(ctx, rt.local, sdk.CloseExplicit, false)
			if errors.Is(err, errAlreadyClosed) {
				return nil
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
		case res.Record.Owner != c.owner:
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

// joinClose waits for the close in progress on a, if any.
func (c *Catalog) joinClose(ctx context.Context, a *activation) error {
	a.mu.Lock()
	tx := a.closing
	a.mu.Unlock()
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

// closeSpot runs, or joins, the close transaction of one owned Spot (D3). idle marks idle
// cleanup: it aborts unless the Spot is quiescent when re-checked, where an explicit close
// stops admission and lets queued work finish first.
func (c *Catalog) closeSpot(ctx context.Context, sp ownedSpot, reason sdk.CloseReason, idle bool) error {
	a := sp.base()
	a.mu.Lock()
	if tx := a.closing; tx != nil {
		a.mu.Unlock()
		select {
		case <-tx.done:
			return tx.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if a.current() == stateClosed {
		a.mu.Unlock()
		return errAlreadyClosed
	}
	tx := &closeTxn{done: make(chan struct{}), reason: reason}
	a.closing = tx
	a.mu.Unlock()

	// The close is shared: one closer's cancellation ends only its own wait.
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		tx.err = c.runClose(sp, reason, idle)
		if tx.err != nil && a.current() != stateClosed {
			a.mu.Lock()
			a.closing = nil
			a.mu.Unlock()
		}
		close(tx.done)
	}()
	select {
	case <-tx.done:
		return tx.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func releaseTag(r sdk.CloseReason) store.ReleaseTag {
	switch r {
	case sdk.CloseExplicit:
		return store.ReleaseExplicitClose
	case sdk.CloseIdleEvicted:
		return store.ReleaseIdle
	case sdk.CloseShutdown:
		return store.ReleaseShutdown
	case sdk.CloseCreationFailed:
		return store.ReleaseCreationFailed
	}
	return store.ReleaseOwnerLost
}

// runClose is the close transaction: stop admission (re-checking quiescence for idle
// cleanup), mark the record Releasing, run the closing callback on the Spot's own queue after
// its queued application work, tear the activation down, and only then delete the record (D3).
func (c *Catalog) runClose(sp ownedSpot, reason sdk.CloseReason, idle bool) error {
	a := sp.base()
	if !a.exec.CloseApplication(idle) {
		return errNotQuiescent
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.cfg.OperationTimeout)
	defer cancel()
	key := sp.storeKey()
	a.state.Store(uint32(stateClosing))
	rel, err := c.store.BeginRelease(ctx, key, sp.record(), releaseTag(reason))
	fenced := errors.Is(err, store.ErrFenced)
	if err != nil && !fenced {
		// The store cannot take the release now: the Spot serves on; the close may be retried.
		a.state.Store(uint32(stateActive))
		a.exec.OpenApplication()
		return fmt.Errorf("close %s: %w", key, err)
	}
	if fenced {
		// The record is no longer this activation's (the owner lease ended): the Spot closes
		// here and the record is left to whoever holds it now.
		reason = sdk.CloseOwnerLost
	} else {
		sp.setRecord(rel)
	}
	c.notifyClose(ctx, a, reason)
	a.exec.Close(fmt.Errorf("%w: %s/%q closed (%s)", sdk.ErrClosed, key.Type, key.ID, reason))
	a.teardown()
	if !fenced {
		err = c.finishRelease(ctx, key, rel)
	}
	sh := c.slots.of(spotKey{key.Type, key.ID})
	sh.mu.Lock()
	delete(sh.m, spotKey{key.Type, key.ID})
	sh.mu.Unlock()
	if inst, ok := sp.(*instanceSpot); ok {
		c.idle.remove(inst)
	}
	c.active.Add(-1)
	a.state.Store(uint32(stateClosed))
	c.stats.closed(reason)
	return err
}

// finishRelease deletes the record, retrying a store that is briefly unavailable. A record left
// Releasing is finished by the next caller that meets it here.
func (c *Catalog) finishRelease(ctx context.Context, key store.SpotKey, rel store.Record) error {
	backoff := 20 * time.Millisecond
	for {
		err := c.store.FinishRelease(ctx, key, rel)
		if err == nil || errors.Is(err, store.ErrFenced) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("close %s: release: %w", key, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// notifyClose runs the Spot's CloseHandler with reason on its own queue, after the queued
// application work, and waits for it: no new work is taken meanwhile (D3).
func (c *Catalog) notifyClose(ctx context.Context, a *activation, reason sdk.CloseReason) {
	h, _ := a.impl.(sdk.CloseHandler)
	done := make(chan struct{})
	w := closeWork{a: a, handler: h, reason: reason, done: done}
	for {
		err := a.exec.Submit(exec.Item{Lane: sdk.LaneLifecycle, AfterApplication: true}, w)
		if err == nil {
			break
		}
		if errors.Is(err, exec.ErrAdmissionClosed) {
			close(done)
			break
		}
		// The lifecycle lane is full: wait for a place.
		select {
		case <-ctx.Done():
			c.log.Error("closing callback not run: lifecycle lane stayed full", "spot", a.typ.desc.Name, "id", a.id)
			return
		case <-time.After(time.Millisecond):
		}
	}
	<-done
}

// closeWork runs a CloseHandler on the Spot's queue.
type closeWork struct {
	a       *activation
	handler sdk.CloseHandler
	reason  sdk.CloseReason
	done    chan struct{}
}

func (w closeWork) Run() {
	defer close(w.done)
	if w.handler == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			w.a.cat.log.Error("closing callback panicked", "spot", w.a.typ.desc.Name, "id", w.a.id, "panic", v, "stack", string(debug.Stack()))
		}
	}()
	w.handler.OnClose(w.a.context(), w.reason)
}

func (w closeWork) Drop(error) { close(w.done) }

// closeEntry closes an Entry Spot at the node's end.
func (c *Catalog) closeEntry(ctx context.Context, e *entrySpot) {
	e.exec.CloseApplication(false)
	e.state.Store(uint32(stateClosing))
	c.notifyClose(ctx, &e.activation, sdk.CloseShutdown)
	e.exec.Close(fmt.Errorf("%w: node %s closed", sdk.ErrClosed, c.cfg.Node))
	e.teardown()
	e.state.Store(uint32(stateClosed))
}
