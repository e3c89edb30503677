package rt

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/observe"
	"github.com/zlink-go/zlink/sdk"
)

// lifecycle is the host's public state: the runtime status and its observers, the mesh status
// and its observers, and the one shutdown operation.
type lifecycle struct {
	mu          sync.Mutex
	seq         uint64 // H3: orders this runtime instance's statuses
	deadline    *time.Time
	termination *sdk.TerminationResult
	runtime     *observe.Hub[sdk.RuntimeStatus]
	mesh        *observe.Hub[sdk.RouteMeshStatus] // nil until the mesh has started
	meshKick    chan struct{}
	shutdown    *shutdownOp
	failure     error // why the host turned Error
	// failed is the status the host published when it turned Error, nil before: a stream that
	// coalesces the statuses shows it however soon a shutdown followed (admin).
	failed *sdk.RuntimeStatus

	// relocation is the relocation in progress or the last one; relocResult is its terminal
	// result once it ended. unitsOpen counts what keeps SafeToShutdown false (a relocation
	// running), and unsafeUntil is when the re-send window after its last commit ends (F12).
	relocation  *relocationOp
	relocResult *sdk.RelocationResult
	unitsOpen   int
	lastCommit  time.Time
	unsafeUntil time.Time

	// meshMu makes one publisher of the mesh status at a time, so that observers see its
	// Sequence only grow.
	meshMu sync.Mutex

	capacity   *observe.Hub[sdk.HostCapacityStatus]
	capacityMu sync.Mutex // one publisher of the capacity figures at a time
}

// shutdownOp is the shared shutdown: every caller waits on the same one (F10).
type shutdownOp struct {
	within   time.Duration
	deadline time.Time
	done     chan struct{}
	result   sdk.TerminationResult
	err      error // the teardown's errors, for Close
}

// The terminal statuses an observer that missed them is told of apart from the coalesced ones
// (H1): Stopped, which ends a stream, and a runtime's Error, or the Failed it makes of its
// topologies, which only a shutdown follows.
var (
	lostRuntime = observe.TerminalStates(func(s *sdk.RuntimeStatus) sdk.RuntimeState { return s.State },
		sdk.RuntimeStateStopped, sdk.RuntimeStateError)
	lostMesh = observe.TerminalStates(func(s *sdk.RouteMeshStatus) sdk.TopologyState { return s.State },
		sdk.TopologyStateStopped, sdk.TopologyStateFailed)
)

// lostChannel is the lost rule of a channel's statuses: Stopped, and Failed, which the host's
// Error makes and only a shutdown follows.
func lostChannel[T any](state func(*T) sdk.TopologyState) func(missed, next *T) bool {
	return observe.TerminalStates(state, sdk.TopologyStateStopped, sdk.TopologyStateFailed)
}

func (h *Host) initLifecycle() {
	h.lc.meshKick = make(chan struct{}, 1)
	h.state.Store(uint32(sdk.RuntimeStatePreparing))
	h.lc.runtime = observe.NewHub(h.runtimeStatusLocked(), lostRuntime)
	h.lc.capacity = observe.NewHub(h.CapacityStatus(), nil)
}

// setState moves the host to s and publishes the new status (F11, H5: only on a change).
func (h *Host) setState(s sdk.RuntimeState) {
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	h.setStateLocked(s)
}

func (h *Host) setStateLocked(s sdk.RuntimeState) {
	if h.runtimeState() == s {
		return
	}
	h.state.Store(uint32(s))
	h.publishLocked(h.runtimeStatusLocked())
	select {
	case h.lc.meshKick <- struct{}{}:
	default:
	}
}

// runtimeStatusLocked builds the next snapshot; h.lc.mu is held (or the host is not shared yet).
func (h *Host) runtimeStatusLocked() sdk.RuntimeStatus {
	h.lc.seq++
	s := h.runtimeState()
	return sdk.RuntimeStatus{
		State:             s,
		IsReady:           s == sdk.RuntimeStateServing,
		AcceptingWork:     h.acceptingWork(s),
		Deadline:          h.lc.deadline,
		RelocationResult:  h.lc.relocResult,
		TerminationResult: h.lc.termination,
		Sequence:          h.lc.seq,
		ObservedAt:        time.Now(),
		Capacity:          h.CapacityStatus(),
		SafeToShutdown:    h.safeToShutdownLocked(),
	}
}

// acceptingWork says whether a host in state s takes new application operations now: it
// serves, and its owner lease is certainly valid (a node whose lease is in doubt creates and
// runs none of its objects until it holds one again).
func (h *Host) acceptingWork(s sdk.RuntimeState) bool {
	if s != sdk.RuntimeStateServing {
		return false
	}
	reg := h.reg.Load()
	return reg != nil && reg.Guard().Valid()
}

// publishTimedLocked publishes what time alone changes in the runtime status, so that the
// status an answer or an observer gets is one that observers see too, under its own Sequence:
// SafeToShutdown, once the re-send window passed, and AcceptingWork, as the owner lease's
// validity comes and goes. A stopped host's last status stays as it is; h.lc.mu is held.
func (h *Host) publishTimedLocked() {
	s := h.runtimeState()
	if cur := h.lc.runtime.Current(); s != sdk.RuntimeStateStopped &&
		(cur.SafeToShutdown != h.safeToShutdownLocked() || cur.AcceptingWork != h.acceptingWork(s)) {
		h.publishRuntimeLocked()
	}
}

// watchRuntimeStatus publishes what time alone changes in the runtime status
// (publishTimedLocked) every meshStatusInterval while anyone observes it, until the host stops.
func (h *Host) watchRuntimeStatus() {
	h.watchStatus(meshStatusInterval, nil, h.lc.runtime.Observers, func() {
		h.lc.mu.Lock()
		defer h.lc.mu.Unlock()
		h.publishTimedLocked()
	})
}

// publishRuntimeLocked publishes the runtime status if what it says changed; h.lc.mu is held.
func (h *Host) publishRuntimeLocked() {
	cur := h.lc.runtime.Current()
	next := h.runtimeStatusLocked()
	if cur.State == next.State && cur.SafeToShutdown == next.SafeToShutdown && cur.AcceptingWork == next.AcceptingWork &&
		cur.RelocationResult == next.RelocationResult && cur.Deadline == next.Deadline && cur.TerminationResult == next.TerminationResult {
		h.lc.seq--
		return
	}
	h.publishLocked(next)
}

// publishLocked publishes st to the runtime's observers; h.lc.mu is held. Every status goes
// through it, so the one that turned the host Error is kept as failed whichever path
// published it.
func (h *Host) publishLocked(st sdk.RuntimeStatus) {
	if st.State == sdk.RuntimeStateError && h.lc.failed == nil {
		h.lc.failed = &st
	}
	h.lc.runtime.Publish(st)
}

// startServing ends Start: Preparing becomes Serving, unless the host failed meanwhile.
func (h *Host) startServing() error {
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	if h.lc.failure != nil {
		return h.lc.failure
	}
	h.setStateLocked(sdk.RuntimeStateServing)
	return nil
}

// Status returns the host's current runtime status: its lifecycle state, whether it takes
// application work, the deadline of a shutdown in progress, the result of the one that ended,
// and the capacity figures now (the statuses that ObserveRuntime delivers carry the figures of
// the moment their state changed).
//
// The status is the caller's own: it neither changes under the caller nor, when written to,
// changes what another caller or observer sees.
func (h *Host) Status() sdk.RuntimeStatus {
	h.lc.mu.Lock()
	h.publishTimedLocked()
	st := ownRuntimeStatus(h.lc.runtime.Current())
	h.lc.mu.Unlock()
	st.Capacity = h.CapacityStatus()
	return st
}

// ObserveRuntime streams the host's runtime status: the current one first, then each change.
// A consumer slower than the changes receives the newest status and the count of those it
// skipped; a Stopped or Error status it missed is counted apart, never dropped silently. The
// stream ends when ctx ends (nothing is delivered after the cancellation is seen; other
// observers are unaffected), when the loop stops, or after the host stopped and the Stopped
// status was delivered. An observer that stops reading holds up neither the host nor other
// observers. Each status it delivers is the observer's own, as Status's is. A nil ctx gives
// a stream that delivers nothing, and an error in the node's log.
func (h *Host) ObserveRuntime(ctx context.Context) iter.Seq[sdk.Observed[sdk.RuntimeStatus]] {
	if ctx == nil {
		return noStream[sdk.RuntimeStatus](h, "ObserveRuntime")
	}
	seq := ownStream(h.lc.runtime.Observe(ctx), ownRuntimeStatus)
	return func(yield func(sdk.Observed[sdk.RuntimeStatus]) bool) {
		// What time alone changed while no one observed is published first: the stream's
		// first status is a fresh one, as Status's is.
		h.lc.mu.Lock()
		h.publishTimedLocked()
		h.lc.mu.Unlock()
		seq(yield)
	}
}

// ownStream is seq with each status made its observer's own by own: the hub shares one
// snapshot among all observers (H1), and a status handed out is its receiver's own.
func ownStream[T any](seq iter.Seq[sdk.Observed[T]], own func(T) T) iter.Seq[sdk.Observed[T]] {
	return func(yield func(sdk.Observed[T]) bool) {
		for o := range seq {
			o.Status = own(o.Status)
			if !yield(o) {
				return
			}
		}
	}
}

// noStream is the stream of an observation that call refused, for a nil context: it delivers
// nothing. Its method returns no error, so the node's log tells why.
func noStream[T any](h *Host, call string) iter.Seq[sdk.Observed[T]] {
	h.log.Error("the observation delivers nothing", "err", errNilContext(call))
	return func(func(sdk.Observed[T]) bool) {}
}

// ownRuntimeStatus is st with copies of what its pointer fields point to: the snapshots that
// the host publishes share them (H1), and a status handed out is its receiver's own, which no
// write of another's changes.
func ownRuntimeStatus(st sdk.RuntimeStatus) sdk.RuntimeStatus {
	st.Deadline = copyOf(st.Deadline)
	st.RelocationResult = copyOf(st.RelocationResult)
	st.TerminationResult = copyOf(st.TerminationResult)
	st.Capacity = ownCapacityStatus(st.Capacity)
	return st
}

// ownCapacityStatus is c with copies of what its pointer fields point to: the hub shares each
// snapshot among its observers (H1), and the host compares the figures it reads next with it.
func ownCapacityStatus(c sdk.HostCapacityStatus) sdk.HostCapacityStatus {
	c.CoreHwm.ConfiguredMemoryLimitBytes = copyOf(c.CoreHwm.ConfiguredMemoryLimitBytes)
	c.CoreHwm.ConfiguredBudgetBytes = copyOf(c.CoreHwm.ConfiguredBudgetBytes)
	c.ApplicationJobQueue.ConfiguredManualMax = copyOf(c.ApplicationJobQueue.ConfiguredManualMax)
	return c
}

// ownMeshStatus is st with copies of its slices and of what its pointers point to: the mesh
// numbers each status against the last one it made, which shares them (H3), and the hub
// shares each snapshot among its observers (H1).
func ownMeshStatus(st sdk.RouteMeshStatus) sdk.RouteMeshStatus {
	st.Channels = slices.Clone(st.Channels)
	st.Peers = ownPeers(st.Peers)
	st.Placement.UnavailableReason = copyOf(st.Placement.UnavailableReason)
	return st
}

// ownClientServerStatus is st with copies of its targets and of what its pointers point to:
// the channel numbers each status against the last one it made, which shares them (H3), and
// the hub shares each snapshot among its observers (H1).
func ownClientServerStatus(st sdk.ClientServerStatus) sdk.ClientServerStatus {
	st.UnavailableReason = copyOf(st.UnavailableReason)
	st.Targets = slices.Clone(st.Targets)
	for i := range st.Targets {
		st.Targets[i].UnavailableReason = copyOf(st.Targets[i].UnavailableReason)
	}
	return st
}

// ownFanoutStatus is st with copies of its publishers and of what its pointers point to, for
// the reasons ownClientServerStatus gives.
func ownFanoutStatus(st sdk.FanoutStatus) sdk.FanoutStatus {
	st.UnavailableReason = copyOf(st.UnavailableReason)
	st.Publishers = ownPeers(st.Publishers)
	return st
}

// ownPeers is a copy of peers with copies of what their reasons point to.
func ownPeers(peers []sdk.PeerStatus) []sdk.PeerStatus {
	peers = slices.Clone(peers)
	for i := range peers {
		peers[i].UnavailableReason = copyOf(peers[i].UnavailableReason)
	}
	return peers
}

// copyOf is a pointer to a copy of *p, or nil.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// ObserveMesh streams the RouteMesh status of the named mesh, as ObserveRuntime does the
// runtime's: peers joining, leaving, connecting or draining, placement becoming unavailable
// and available again, the mesh stopping. Each status it delivers is the observer's own, as
// MeshStatus's is. A mesh this node is not part of is ErrNotFound; a nil ctx is an error
// wrapping ErrInvalidArgument.
func (h *Host) ObserveMesh(ctx context.Context, mesh string) (iter.Seq[sdk.Observed[sdk.RouteMeshStatus]], error) {
	if ctx == nil {
		return nil, errNilContext("ObserveMesh")
	}
	if mesh != h.cfg.MeshName {
		return nil, fmt.Errorf("%w: node %s is not part of mesh %q (its mesh is %q)", sdk.ErrNotFound, h.cfg.NodeID, mesh, h.cfg.MeshName)
	}
	h.publishMesh() // observations start from a fresh status
	return ownStream(h.lc.mesh.Observe(ctx), ownMeshStatus), nil
}

// publishMesh publishes the mesh status to its observers if it changed.
func (h *Host) publishMesh() {
	h.lc.meshMu.Lock()
	defer h.lc.meshMu.Unlock()
	if st := h.mesh.Status(h.cfg.MeshName); st.Sequence > h.lc.mesh.Current().Sequence {
		h.lc.mesh.Publish(st)
	}
	h.publishChannels()
}

// meshStatusInterval is how often the mesh status is recomputed for its observers; a change of
// the runtime state is published at once.
const meshStatusInterval = 200 * time.Millisecond

// watchMeshStatus publishes the mesh status to its observers whenever it changes: at each
// runtime state change, and every meshStatusInterval while anyone observes it.
func (h *Host) watchMeshStatus() {
	h.watchStatus(meshStatusInterval, h.lc.meshKick, func() int { return h.lc.mesh.Observers() + h.channelObservers() }, h.publishMesh)
}

// watchStatus calls publish every interval while observers() has any, and at once on each
// kick, until the host stops.
func (h *Host) watchStatus(interval time.Duration, kick <-chan struct{}, observers func() int, publish func()) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-ticker.C:
			if observers() == 0 {
				continue
			}
		case <-kick:
		}
		publish()
	}
}

// Shutdown stops the node gracefully and returns how it ended. The node stops taking
// application work at once (its calls return ErrNotServing) and its peers see it draining and
// place nothing more on it; work already queued in its Spots finishes, every Spot closes with
// reason Shutdown and releases its location so that another node can create it afresh at once;
// the node leaves the mesh, its owner lease is revoked and an embedded etcd stops. The outcome is
// Stopped. If that takes longer than deadline (zero: Config.StopTimeout, 30 s by default), the
// rest is force-stopped — queued work dropped, no closing callback — and the outcome is
// ForceStopped with reason DeadlineExceeded; the records left behind turn Unavailable with the
// lease and are reclaimed; so is a Spot whose close gave up waiting for its turn in progress
// or its queued work before that (a close waits for Config.OperationTimeout at most). A step
// of the teardown that fails while the deadline has not passed gives ForceStopped with reason
// TeardownFailed: a Spot whose close failed (its location could not be released, say, etcd
// being unreachable) is force-stopped then, with the rest of the teardown done. The lease's
// revoke, last, may outlast the deadline by a second: its failure is TeardownFailed too.
//
// Every call shares one shutdown: a second call, concurrent or later, joins it and gets the
// same result, and its deadline does not change the one in force. ctx bounds only this caller's
// wait: when it ends first, Shutdown returns ctx's error and the shutdown goes on — even a ctx
// that had already ended starts it. A nil ctx is refused with an error wrapping
// sdk.ErrInvalidArgument, and no shutdown starts.
//
// Called from a Spot's handler, closing callback or OnActivate, with the context it got,
// Shutdown starts the shutdown and returns at once with an error saying so: the shutdown waits
// for that very handler to end (and ends the creation that runs OnActivate). A channel's
// handler that shuts its node down calls Shutdown on a goroutine of its own: the shutdown
// waits for that handler too, and waiting for it there lasts until the shutdown's deadline.
func (h *Host) Shutdown(ctx context.Context, deadline time.Duration) (sdk.TerminationResult, error) {
	if ctx == nil {
		return sdk.TerminationResult{}, errNilContext("Shutdown")
	}
	op := h.beginShutdown(deadline)
	if err := h.notFromATurn(ctx, "Shutdown", "shutdown"); err != nil {
		return sdk.TerminationResult{}, err
	}
	select {
	case <-op.done:
		return op.result, nil
	case <-ctx.Done():
		select {
		case <-op.done:
			return op.result, nil
		default:
		}
		return sdk.TerminationResult{}, fmt.Errorf("rt: stopped waiting for node %s to shut down (it goes on): %w", h.cfg.NodeID, context.Cause(ctx))
	}
}

// Close is Shutdown with the default deadline, waiting for it to end. It returns nil when the
// node stopped cleanly, and otherwise an error that names what was force-stopped or failed.
// Safe to call more than once and concurrently with Shutdown. Spots should not call it: as with
// Shutdown, the shutdown waits for the calling turn, so Close cannot wait for the shutdown.
func (h *Host) Close() error {
	op := h.beginShutdown(0)
	<-op.done
	return op.err
}

// notFromATurn refuses to wait for a lifecycle operation (op, started by call) inside a
// Spot's turn, closing callback or OnActivate, which the operation waits for.
func (h *Host) notFromATurn(ctx context.Context, call, op string) error {
	if h.catalog != nil && h.catalog.InTurn(ctx) {
		return fmt.Errorf("rt: %s called from a Spot's handler, closing callback or OnActivate on node %s: the %s goes on once it returns; it cannot be waited for here", call, h.cfg.NodeID, op)
	}
	return nil
}

// beginShutdown returns the shutdown in progress or starts it (F10).
func (h *Host) beginShutdown(deadline time.Duration) *shutdownOp {
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	if op := h.lc.shutdown; op != nil {
		return op
	}
	if deadline <= 0 {
		deadline = h.cfg.StopTimeout
	}
	op := &shutdownOp{within: deadline, deadline: time.Now().Add(deadline), done: make(chan struct{})}
	h.lc.shutdown = op
	if r := h.lc.relocation; r != nil {
		// F9: the units under way finish, within half the time the shutdown leaves (each
		// Spot's close waits for its own); no other starts, and the relocation ends Blocked.
		r.shutdownBy(op.deadline)
	}
	h.lc.deadline = copyOf(&op.deadline) // the statuses' own: none of them reaches op's
	// F8: the node takes no new application work from here, and says so with the deadline,
	// before this returns.
	h.setStateLocked(sdk.RuntimeStateDraining)
	go h.runShutdown(op)
	return op
}

func (h *Host) runShutdown(op *shutdownOp) {
	defer close(op.done)
	ctx, cancel := context.WithDeadline(context.Background(), op.deadline)
	defer cancel()
	ctx, endSpan := h.tel.StartShutdown(ctx, sdk.CurrentDiagnosticsLevel())
	expired, err := h.teardown(ctx)
	defer func() { endSpan(op.result.Outcome.String(), op.result.Reason.String()) }()
	op.result, op.err = termination(h.cfg.NodeID, op.within, err, expired)
	h.finish(op.result)
	h.closeAdmin(op.deadline) // after the end, which its pages show
}

// termination is how a shutdown of node ended whose teardown returned err, and the error that
// says why it force-stopped: Stopped when every step succeeded; else DeadlineExceeded when its
// deadline (within) had passed by the end of the steps it bounds (expired), whatever else
// failed, or when a Spot's close gave up waiting for its work (for OperationTimeout at most);
// else TeardownFailed, a step having failed before it (a Spot's close whose location could not
// be released, the lease's revoke, even when etcd's silence timed them out).
func termination(node sdk.NodeID, within time.Duration, err error, expired bool) (sdk.TerminationResult, error) {
	deadlineExceeded := sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}
	switch {
	case err == nil:
		return sdk.TerminationResult{Outcome: sdk.TerminationOutcomeStopped}, nil
	case expired:
		return deadlineExceeded, fmt.Errorf("rt: node %s did not stop within %v: %w", node, within, err)
	case errors.Is(err, catalog.ErrWorkOutlastedClose):
		return deadlineExceeded, fmt.Errorf("rt: node %s: shutdown: a Spot's work outlasted its close: %w", node, err)
	default:
		return sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonTeardownFailed},
			fmt.Errorf("rt: node %s: shutdown: %w", node, err)
	}
}

// finish publishes the terminal statuses and ends every observation after it.
func (h *Host) finish(result sdk.TerminationResult) {
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	h.lc.termination = &result
	h.lc.deadline = nil
	h.state.Store(uint32(sdk.RuntimeStateStopped))
	h.publishLocked(h.runtimeStatusLocked())
	h.lc.runtime.Close()
	h.publishCapacity()
	h.lc.capacity.Close()
	if h.lc.mesh != nil {
		h.publishMesh() // Stopped, numbered by the mesh's own tracker
		h.lc.mesh.Close()
		h.publishChannelsAndClose(true)
	}
}

// fail puts the host in the Error state: something it cannot recover from by itself broke (G1
// InternalFailure), such as the listener its peers reach it on. It keeps running what it can
// until it is shut down.
func (h *Host) fail(err error) {
	h.log.Error("the node failed and cannot serve; shut it down", "err", err)
	h.lc.mu.Lock()
	defer h.lc.mu.Unlock()
	if h.lc.shutdown != nil || h.lc.failure != nil {
		return // a shutdown already leads to Stopped
	}
	h.lc.failure = fmt.Errorf("rt: node %s failed: %w", h.cfg.NodeID, err)
	h.setStateLocked(sdk.RuntimeStateError)
}
