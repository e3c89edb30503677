package rt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/mesh"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// relocationOp is the host's one relocation in progress; every caller with the same mode and
// effective target version shares it (F10).
type relocationOp struct {
	mode     sdk.RelocationMode
	version  int64
	deadline time.Time
	done     chan struct{}
	result   sdk.RelocationResult
	// stop ends the start of new units: a shutdown began (F9).
	stop context.CancelFunc
	ctx  context.Context
	// work bounds the units under way: the relocation's deadline, or half the time a shutdown
	// leaves if that comes first (shutdownBy). A shutdown does not end it, so they finish (F9).
	work        context.Context
	endWork     context.CancelFunc
	mu          sync.Mutex
	shutdownCap *time.Timer // ends work halfway to a shutdown's deadline
	ended       bool        // the relocation has its result: no cap is set any more
	total       atomic.Int64
	moved       atomic.Int64
	gone        atomic.Int64 // units whose object closed before it moved
	logged      atomic.Int64 // the last tenth of the units logged
	// storeAnswers looks once whether etcd answers, for the reason of a relocation that ran
	// out of time.
	storeAnswers func() bool
	// reg is the registration the relocation began under: when its owner lease ends, the
	// objects still here close with it (C1) instead of moving.
	reg *store.Registration
	// initial are the units here when it began, taken before reg: one that left before the
	// relocation listed it (the end of reg's lease closed it first) did not move either.
	initial []unit
}

// Relocate moves this node's live objects, with their state, to other nodes of the mesh, so
// that the node can be taken down for maintenance (PlannedMaintenance: to nodes of its own
// application version) or replaced by a newer version (RollingUpdate: to nodes of exactly
// TargetApplicationVersion, which must be greater than this node's). Every User and Instance
// Spot moves with its Actors, and every Actor of an Entry Spot moves to the Entry Spot of the
// same type on its target; Entry Spots themselves stay. Each object moves as one unit: no
// message is lost or runs twice, messages that meet it wait and then run where it is, and
// messages sent along old routes follow it.
//
// The error is for arguments the mode does not take and for a nil ctx, before anything starts,
// and for the caller's own wait ending (see below). Every other outcome is the result:
// Relocated when every object moved (the node is then Relocated: it keeps its connections,
// takes no new application work, and Shutdown closes only its infrastructure), or Blocked with
// the reason, in which case what did not move serves here again and the node is Serving, or in
// Error if it failed meanwhile. While it runs the node is Relocating: it creates and receives
// no objects, and its status carries the deadline. Without an eligible target the relocation
// waits for one until its deadline (Deadline, or Config.RelocationDeadline). One wait may
// outlast the deadline: a unit whose commit was sent and whose answer was lost waits until etcd
// tells whether it took, since serving the object here again could make two of it.
//
// Calls with the same mode and target version share one relocation and its result; a call
// with another one while it runs gets Blocked with OperationInProgress. ctx ends only this
// caller's wait. A shutdown during the relocation lets the units under way finish, within half
// the time it leaves, starts no other, and the relocation ends Blocked with ShutdownRequested.
//
// Called from a Spot's handler, closing callback or OnActivate, with the context it got,
// Relocate starts (or joins) the relocation and returns at once with an error saying so: the
// relocation waits for that very handler, or the creation that runs OnActivate, to end before
// its Spot moves or is gone. Status and ObserveRuntime tell its result.
func (h *Host) Relocate(ctx context.Context, opts sdk.RelocationOptions) (sdk.RelocationResult, error) {
	if ctx == nil {
		return sdk.RelocationResult{}, errNilContext("Relocate")
	}
	version, err := opts.EffectiveTarget(h.cfg.ApplicationVersion)
	if err != nil {
		return sdk.RelocationResult{}, err
	}
	op, res := h.beginRelocation(opts, version)
	if op == nil {
		return res, nil
	}
	if err := h.notFromATurn(ctx, "Relocate", "relocation"); err != nil {
		return sdk.RelocationResult{}, err
	}
	select {
	case <-op.done:
		return op.result, nil
	case <-ctx.Done():
		select {
		case <-op.done: // it ended as the wait did: its result, as Shutdown answers
			return op.result, nil
		default:
		}
		return sdk.RelocationResult{}, fmt.Errorf("rt: stopped waiting for node %s's relocation (it goes on): %w", h.cfg.NodeID, context.Cause(ctx))
	}
}

// beginRelocation joins the relocation in progress or starts one; op is nil when the answer
// res is known at once.
func (h *Host) beginRelocation(opts sdk.RelocationOptions, version int64) (*relocationOp, sdk.RelocationResult) {
	blocked := func(r sdk.RelocationReason) sdk.RelocationResult {
		return sdk.RelocationResult{Mode: opts.Mode, TargetApplicationVersion: version, Outcome: sdk.RelocationOutcomeBlocked, Reason: r}
	}
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	if op := h.lc.relocation; op != nil {
		select {
		case <-op.done:
			// Relocated is final: the node stays Relocated, or fails or stops after it.
			if op.result.Outcome == sdk.RelocationOutcomeRelocated && op.mode == opts.Mode && op.version == version {
				return nil, op.result // the same operation ended: its terminal result (F10)
			}
		default:
			if op.mode == opts.Mode && op.version == version {
				return op, sdk.RelocationResult{}
			}
			return nil, blocked(sdk.RelocationReasonOperationInProgress)
		}
	}
	switch {
	case h.lc.shutdown != nil:
		return nil, blocked(sdk.RelocationReasonShutdownRequested)
	case h.runtimeState() == sdk.RuntimeStateRelocated:
		return nil, blocked(sdk.RelocationReasonOperationInProgress)
	case h.runtimeState() != sdk.RuntimeStateServing:
		return nil, blocked(sdk.RelocationReasonRuntimeNotReady)
	case !h.cfg.Roles.Has(RoleObjectServer):
		return nil, blocked(sdk.RelocationReasonRelocationDisabled)
	}
	within := opts.Deadline
	if within <= 0 {
		within = h.cfg.RelocationDeadline
	}
	op := &relocationOp{mode: opts.Mode, version: version, deadline: time.Now().Add(within), done: make(chan struct{})}
	op.result = sdk.RelocationResult{Mode: opts.Mode, TargetApplicationVersion: version}
	op.ctx, op.stop = context.WithDeadline(context.Background(), op.deadline)
	op.work, op.endWork = context.WithDeadline(context.Background(), op.deadline)
	op.storeAnswers = sync.OnceValue(func() bool {
		ctx, cancel := context.WithTimeout(h.stopCtx, time.Second)
		defer cancel()
		return h.store.Answers(ctx)
	})
	op.initial = h.units()
	op.reg = h.reg.Load()
	h.lc.relocation = op
	h.lc.relocResult = nil
	h.lc.deadline = copyOf(&op.deadline) // the statuses' own: none of them reaches op's
	h.lc.unsafeUntil = time.Time{}
	h.lc.unitsOpen++ // the relocation itself: SafeToShutdown is false until it has ended
	h.catalog.SetRelocating(true)
	h.setStateLocked(sdk.RuntimeStateRelocating)
	h.relocations.Go(func() { h.runRelocation(op) })
	return op, sdk.RelocationResult{}
}

// runRelocation moves the units, then ends the relocation with its result.
func (h *Host) runRelocation(op *relocationOp) {
	defer op.endWork()
	defer op.stop()
	pctx, cancel := context.WithTimeout(op.ctx, drainPublishTimeout)
	if err := h.mesh.Publish(pctx); err != nil {
		h.log.Warn("could not tell the peers that the node relocates; they see it at the next publication", "err", err)
	}
	cancel()
	reason := h.relocateAll(op)
	h.endRelocation(op, reason)
}

// shutdownBy starts no more units and lets those under way finish within half the time left
// until deadline, a shutdown's that began (F9): a unit that cannot finish then rolls back, and
// its Spot keeps the other half to close.
func (op *relocationOp) shutdownBy(deadline time.Time) {
	op.stop()
	op.mu.Lock()
	defer op.mu.Unlock()
	within := time.Until(deadline) / 2
	if !op.ended && op.shutdownCap == nil && time.Now().Add(within).Before(op.deadline) {
		op.shutdownCap = time.AfterFunc(within, op.endWork)
	}
}

// endRelocation publishes the result of op: Relocated, or Blocked and Serving again (F7).
func (h *Host) endRelocation(op *relocationOp, reason sdk.RelocationReason) {
	op.mu.Lock()
	op.ended = true
	if op.shutdownCap != nil {
		op.shutdownCap.Stop()
	}
	op.mu.Unlock()
	op.result.Reason = reason
	op.result.Outcome = sdk.RelocationOutcomeRelocated
	if reason != sdk.RelocationReasonNone {
		op.result.Outcome = sdk.RelocationOutcomeBlocked
	}
	h.log.Info("relocation ended", "outcome", op.result.Outcome, "reason", reason, "moved", op.moved.Load(), "units", op.total.Load())
	h.lc.mu.Lock()
	result := op.result
	h.lc.relocResult = &result
	h.lc.unitsOpen--
	h.lc.unsafeUntil = h.lc.lastCommit.Add(h.cfg.RelocationResendWindow)
	if h.lc.shutdown == nil {
		h.lc.deadline = nil
	}
	switch {
	case h.lc.shutdown != nil:
		// The shutdown goes on from here; its own states follow.
	case h.lc.failure != nil:
		// The node failed meanwhile: it stays in Error, taking no work, until it is shut down.
	case reason == sdk.RelocationReasonNone:
		h.setStateLocked(sdk.RuntimeStateRelocated)
	default:
		h.catalog.SetRelocating(false)
		h.setStateLocked(sdk.RuntimeStateServing)
	}
	h.publishRuntimeLocked()
	h.lc.mu.Unlock()
	close(op.done)
	h.scheduleSafe()
	pctx, cancel := context.WithTimeout(h.stopCtx, drainPublishTimeout)
	defer cancel()
	_ = h.mesh.Publish(pctx)
}

// relocateAll moves every unit, as often as new ones appear, until none is left or the
// relocation must stop; it returns the Blocked reason, or None.
func (h *Host) relocateAll(op *relocationOp) sdk.RelocationReason {
	if reason := h.pinnedReason(); reason != sdk.RelocationReasonNone {
		return reason
	}
	// The units here at the start that no round listed yet: each is moved or counted gone once
	// listed; one never listed left the node unmoved.
	unlisted := make(map[sdk.Target]struct{}, len(op.initial))
	for _, u := range op.initial {
		unlisted[u.t] = struct{}{}
	}
	op.initial = nil
	for {
		// Unsettled first: whatever it no longer sees has shown itself, among the units.
		unsettled := h.catalog.Unsettled()
		if f := h.betweenReads.Load(); f != nil {
			(*f)()
		}
		units := h.units()
		for _, u := range units {
			delete(unlisted, u.t)
		}
		if len(units) == 0 && unsettled {
			// A creation or arrival that began before the node turned Relocating: what it
			// brings is a unit too, once it shows itself (F7: every object moves).
			select {
			case <-op.ctx.Done():
				return h.stopReason(op)
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if len(units) == 0 {
			// Nothing left: every unit moved, unless a shutdown (which stops the relocation
			// before it closes anything) closed what was left, or the end of the owner lease
			// did, which the store decided: those objects did not move (F7).
			left := op.gone.Load() + int64(len(unlisted))
			if h.shuttingDown() && left > 0 {
				return sdk.RelocationReasonShutdownRequested
			}
			if left > 0 && op.reg.Cause() != nil { // its owner lease ended
				return sdk.RelocationReasonStoreUnavailable
			}
			if op.moved.Load() == 0 {
				return h.awaitAnyTarget(op)
			}
			return sdk.RelocationReasonNone
		}
		if op.ctx.Err() != nil {
			return h.stopReason(op)
		}
		op.total.Add(int64(len(units)))
		if reason := h.moveUnits(op, units); reason != sdk.RelocationReasonNone {
			return reason
		}
	}
}

// pinnedReason is StateIncompatible while an object of a pinned type is active here.
func (h *Host) pinnedReason() sdk.RelocationReason {
	for _, t := range h.catalog.LocalSpots() {
		if h.catalog.Pinned(t) {
			return sdk.RelocationReasonStateIncompatible
		}
	}
	for a := range h.catalog.EntryActors() {
		if h.catalog.ActorPinned(a) {
			return sdk.RelocationReasonStateIncompatible
		}
	}
	return sdk.RelocationReasonNone
}

// unit is one relocation unit: a User or Instance Spot with its Actors, or an Actor of an
// Entry Spot (whose Spot is entry).
type unit struct {
	t     sdk.Target
	entry sdk.Target
}

func (h *Host) units() []unit {
	var out []unit
	for _, t := range h.catalog.LocalSpots() {
		out = append(out, unit{t: t})
	}
	for a, e := range h.catalog.EntryActors() {
		out = append(out, unit{t: a, entry: e})
	}
	return out
}

// moveUnits moves units with bounded parallelism; it returns the first Blocked reason.
func (h *Host) moveUnits(op *relocationOp, units []unit) sdk.RelocationReason {
	var (
		mu     sync.Mutex
		reason = sdk.RelocationReasonNone
		wg     sync.WaitGroup
		sem    = make(chan struct{}, h.cfg.RelocationParallelism)
	)
	for _, u := range units {
		mu.Lock()
		stop := reason != sdk.RelocationReasonNone
		mu.Unlock()
		if stop {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-op.ctx.Done():
		}
		if op.ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if r := h.moveUnit(op, u); r != sdk.RelocationReasonNone {
				mu.Lock()
				if reason == sdk.RelocationReasonNone {
					reason = r
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if reason == sdk.RelocationReasonNone && op.ctx.Err() != nil {
		reason = h.stopReason(op)
	}
	return reason
}

// stopReason says why op's context ended: a shutdown, or its deadline, which an etcd that
// does not answer now explains.
func (h *Host) stopReason(op *relocationOp) sdk.RelocationReason {
	switch {
	case h.shuttingDown():
		return sdk.RelocationReasonShutdownRequested
	case op.ctx.Err() != nil && !op.storeAnswers():
		return sdk.RelocationReasonStoreUnavailable
	}
	return sdk.RelocationReasonDeadlineExceeded
}

// shuttingDown reports whether a shutdown began.
func (h *Host) shuttingDown() bool {
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	return h.lc.shutdown != nil
}

// moveUnit moves one unit to a target F5 chooses, trying again while the failure may pass
// (a busy object, a target that went), until the relocation's deadline.
func (h *Host) moveUnit(op *relocationOp, u unit) sdk.RelocationReason {
	var excluded []sdk.NodeID
	for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if len(excluded) > 0 && op.ctx.Err() != nil {
			return h.stopReason(op) // the unit is not tried again once the relocation stops
		}
		target, reason := h.awaitTarget(op, u, excluded)
		if reason != sdk.RelocationReasonNone {
			return reason
		}
		err := h.moveUnitTo(op, u, target)
		switch {
		case err == nil:
			h.unitMoved(op)
			return sdk.RelocationReasonNone
		case h.gone(u):
			op.gone.Add(1)
			// It closed or moved meanwhile, perhaps by this unit's commit whose outcome was
			// not known: the re-send window counts from now, as after a commit (F12).
			h.noteCommit()
			return sdk.RelocationReasonNone
		case errors.Is(err, catalog.ErrPinned):
			return sdk.RelocationReasonStateIncompatible
		case errors.Is(err, catalog.ErrIncompatible), errors.Is(err, sdk.ErrUnhandled):
			excluded = append(excluded, target.ID)
			continue // the next candidate; none left is StateIncompatible
		case errors.Is(err, sdk.ErrStoreUnavailable):
			if op.ctx.Err() == nil && time.Until(op.deadline) > backoff {
				break // etcd may come back before the deadline
			}
			return sdk.RelocationReasonStoreUnavailable
		case errors.Is(err, sdk.ErrCreationFailed), errors.Is(err, sdk.ErrHandlerPanicked), errors.Is(err, catalog.ErrMarshalState):
			h.log.Warn("a relocation unit failed; the object stays here", "object", u.t, "target", target.ID, "err", err)
			return sdk.RelocationReasonRelocationFailed
		}
		h.log.Debug("a relocation unit is tried again", "object", u.t, "target", target.ID, "err", err)
		select {
		case <-op.ctx.Done():
			return h.stopReason(op)
		case <-time.After(backoff):
		}
	}
}

// gone reports whether u's object is no longer here to move: it closed or moved meanwhile.
func (h *Host) gone(u unit) bool {
	if u.entry.Kind() == sdk.KindEntry {
		_, here := h.catalog.LocalActor(u.t)
		return !here
	}
	_, here := h.catalog.LocalSpot(u.t)
	return !here
}

// moveUnitTo runs u's unit to target.
func (h *Host) moveUnitTo(op *relocationOp, u unit, target store.Node) error {
	if u.entry.Kind() == sdk.KindEntry {
		return h.catalog.MoveActorTo(op.work, u.t, sdk.EntryTarget(u.entry.Type(), target.ID))
	}
	return h.catalog.RelocateSpot(op.work, u.t, target.ID)
}

// unitMoved counts a unit that moved, and logs each tenth of the relocation's units.
func (h *Host) unitMoved(op *relocationOp) {
	moved, total := op.moved.Add(1), op.total.Load()
	if total == 0 {
		return
	}
	if tenth := moved * 10 / total; tenth > op.logged.Load() {
		op.logged.Store(tenth)
		h.log.Info("relocation progress", "moved", moved, "units", total)
	}
	h.noteCommit()
}

// noteCommit starts the re-send window of a unit that committed, or may have (F12).
func (h *Host) noteCommit() {
	h.lc.mu.Lock()
	h.lc.lastCommit = time.Now()
	h.lc.mu.Unlock()
}

// awaitTarget chooses u's target as F5 narrows them, waiting for descriptors and readiness to
// converge until the relocation's deadline (F6).
func (h *Host) awaitTarget(op *relocationOp, u unit, excluded []sdk.NodeID) (store.Node, sdk.RelocationReason) {
	for {
		target, reason := h.chooseTarget(op, u, excluded)
		if reason == sdk.RelocationReasonNone {
			return target, reason
		}
		select {
		case <-op.ctx.Done():
			if h.shuttingDown() {
				return store.Node{}, sdk.RelocationReasonShutdownRequested
			}
			return store.Node{}, reason
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// chooseTarget narrows the members to u's target in the order of F5: (1) the version, (2) an
// Object Server of the mesh, not this node, Serving, (3) serving u's types, (4) room for it
// and not of this node's maintenance wave, (5) the registration the membership view holds and
// a Ready connection, (6) weights. The reason says where it ran out.
func (h *Host) chooseTarget(op *relocationOp, u unit, excluded []sdk.NodeID) (store.Node, sdk.RelocationReason) {
	typ := u.t.Type()
	if u.entry.Kind() == sdk.KindEntry {
		typ = u.entry.Type()
	}
	var cands []store.Node
	step := 0
	for _, n := range h.mesh.Members() {
		d := n.Desc
		switch {
		case d.GetApplicationVersion() != op.version:
			continue
		case !h.servingServer(n):
			step = max(step, 1)
			continue
		case !slices.Contains(d.GetSpotTypes(), typ) || (u.entry.Kind() == sdk.KindEntry && !slices.Contains(d.GetSpotTypes(), u.t.Type())) ||
			slices.Contains(excluded, n.ID):
			step = max(step, 2)
			continue
		case !h.mesh.HasRoom(n) || h.sameWave(n):
			step = max(step, 3)
			continue
		case !h.mesh.PeerReady(n.ID):
			step = max(step, 4)
			continue
		}
		cands = append(cands, n)
	}
	if len(cands) > 0 {
		return mesh.Choose(u.t.Type(), u.t.ID(), cands), sdk.RelocationReasonNone
	}
	if step == 2 {
		return store.Node{}, sdk.RelocationReasonStateIncompatible
	}
	return store.Node{}, sdk.RelocationReasonTargetUnavailable
}

// servingServer reports whether n is another Object Server of this node's mesh, in Serving
// (F5, step 2).
func (h *Host) servingServer(n store.Node) bool {
	d := n.Desc
	return n.ID != h.cfg.NodeID && (d.GetMesh() == "" || d.GetMesh() == h.cfg.MeshName) &&
		d.GetRoles()&mesh.RoleObjectServer != 0 && sdk.RuntimeState(d.GetState()) == sdk.RuntimeStateServing
}

// sameWave reports whether n is of this node's maintenance wave (F5, step 4).
func (h *Host) sameWave(n store.Node) bool {
	return h.cfg.MaintenanceWave != "" && n.Desc.GetMaintenanceWave() == h.cfg.MaintenanceWave
}

// awaitAnyTarget waits, until the relocation's deadline, for a node that the node's objects
// could move to if it had any, and answers TargetUnavailable if none comes (F6): a relocation
// that moved nothing is Relocated only when the node's work has somewhere to go, so that a
// rolling update does not take an empty node out before a node of the new version serves.
// A target that the membership view shows is confirmed in etcd, after this node's own
// Relocating state is written there: of two empty nodes that relocate at once, each the
// other's only target, the one that reads second reads the other's Relocating, so at most one
// answers Relocated (a view alone may show each the other still Serving).
// A target that etcd could not confirm, etcd not answering at the deadline, is
// StoreUnavailable, as a unit's move that ran out of time then is.
func (h *Host) awaitAnyTarget(op *relocationOp) sdk.RelocationReason {
	published, unconfirmed := false, false
	for {
		if h.anyTarget(op, h.mesh.Members()) {
			confirmed, answered := h.confirmTarget(op, &published)
			if confirmed {
				return sdk.RelocationReasonNone
			}
			unconfirmed = !answered
		} else {
			unconfirmed = false
		}
		select {
		case <-op.ctx.Done():
			switch {
			case h.shuttingDown():
				return sdk.RelocationReasonShutdownRequested
			case unconfirmed && !op.storeAnswers():
				return sdk.RelocationReasonStoreUnavailable
			}
			return sdk.RelocationReasonTargetUnavailable
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// confirmTarget reports whether the registrations in etcd, read after this node's Relocating
// state was written there (published, once), show a target too; answered is false when etcd
// did not answer.
func (h *Host) confirmTarget(op *relocationOp, published *bool) (confirmed, answered bool) {
	if !*published {
		if h.mesh.Publish(op.ctx) != nil {
			return false, false
		}
		*published = true
	}
	nodes, _, err := h.store.Nodes(op.ctx)
	if err != nil {
		return false, false
	}
	return h.anyTarget(op, nodes), true
}

// anyTarget reports whether one of members passes the steps of F5 that ask nothing of a unit:
// the version, another Object Server of the mesh in Serving, room under its cap and not of
// this node's maintenance wave, a Ready connection.
func (h *Host) anyTarget(op *relocationOp, members []store.Node) bool {
	for _, n := range members {
		if n.Desc.GetApplicationVersion() == op.version && h.servingServer(n) && h.mesh.HasRoom(n) && !h.sameWave(n) && h.mesh.PeerReady(n.ID) {
			return true
		}
	}
	return false
}

// scheduleSafe publishes SafeToShutdown once the re-send window after the last commit ends;
// only the end of a relocation calls it, on the relocation's goroutine.
func (h *Host) scheduleSafe() {
	h.lc.mu.Lock()
	wait := time.Until(h.lc.unsafeUntil)
	h.lc.mu.Unlock()
	if wait <= 0 {
		return
	}
	// Counted with the relocation whose end calls this, never at zero, so it cannot race the
	// teardown's wait: the watchers' may have begun already.
	h.relocations.Go(func() {
		select {
		case <-h.stop:
		case <-time.After(wait):
			h.lc.mu.Lock()
			h.publishRuntimeLocked()
			h.lc.mu.Unlock()
		}
	})
}

// safeToShutdownLocked is F12: every unit this node started reached route removal and the
// re-send window after the last commit ended; h.lc.mu is held.
func (h *Host) safeToShutdownLocked() bool {
	return h.lc.unitsOpen == 0 && !time.Now().Before(h.lc.unsafeUntil)
}
