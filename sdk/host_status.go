package sdk

import (
	"fmt"
	"time"
)

// RuntimeState is the lifecycle state of the whole host process. The numeric values are
// part of the contract.
type RuntimeState uint8

const (
	// RuntimeStatePreparing: the host is starting and takes no application work yet.
	RuntimeStatePreparing RuntimeState = 0
	// RuntimeStateServing: the host takes application work; the only state in which
	// RuntimeStatus.IsReady is true.
	RuntimeStateServing RuntimeState = 1
	// RuntimeStateRelocating: no new placement or application admission; the host's current
	// objects are moving to other nodes.
	RuntimeStateRelocating RuntimeState = 2
	// RuntimeStateRelocated: every object has moved; host infrastructure and connections stay, but
	// no new application operation is taken.
	RuntimeStateRelocated RuntimeState = 3
	// RuntimeStateDraining: no relocation; the remaining application work and resources are being
	// cleaned up.
	RuntimeStateDraining RuntimeState = 4
	// RuntimeStateStopped: shutdown has finished.
	RuntimeStateStopped RuntimeState = 5
	// RuntimeStateError: the host failed and cannot serve.
	RuntimeStateError RuntimeState = 6
)

var runtimeStateNames = [...]string{"Preparing", "Serving", "Relocating", "Relocated", "Draining", "Stopped", "Error"}

// String returns the state's name as the seed spells it ("Serving"), or RuntimeState(n) for an
// unknown value.
func (s RuntimeState) String() string {
	if int(s) < len(runtimeStateNames) {
		return runtimeStateNames[s]
	}
	return fmt.Sprintf("RuntimeState(%d)", uint8(s))
}

// RelocationMode says which application version a relocation moves objects to.
type RelocationMode uint8

const (
	// RelocationModePlannedMaintenance moves objects to nodes of the source's own application
	// version; no target version is given.
	RelocationModePlannedMaintenance RelocationMode = 0
	// RelocationModeRollingUpdate moves objects to nodes of exactly the requested target version,
	// which must be greater than the source's.
	RelocationModeRollingUpdate RelocationMode = 1
)

var relocationModeNames = [...]string{"PlannedMaintenance", "RollingUpdate"}

// String returns the mode's name as the seed spells it, or RelocationMode(n).
func (m RelocationMode) String() string {
	if int(m) < len(relocationModeNames) {
		return relocationModeNames[m]
	}
	return fmt.Sprintf("RelocationMode(%d)", uint8(m))
}

// RelocationOutcome is the terminal answer of a relocation.
type RelocationOutcome uint8

const (
	// RelocationOutcomeRelocated: every object moved and the host is now Relocated.
	RelocationOutcomeRelocated RelocationOutcome = 0
	// RelocationOutcomeBlocked: the move could not be started or finished safely; Reason tells
	// why. Uncommitted changes were rolled back and, if the host still has local objects to
	// serve, it is back in Serving.
	RelocationOutcomeBlocked RelocationOutcome = 1
)

var relocationOutcomeNames = [...]string{"Relocated", "Blocked"}

// String returns the outcome's name as the seed spells it, or RelocationOutcome(n).
func (o RelocationOutcome) String() string {
	if int(o) < len(relocationOutcomeNames) {
		return relocationOutcomeNames[o]
	}
	return fmt.Sprintf("RelocationOutcome(%d)", uint8(o))
}

// RelocationReason tells why a relocation was Blocked; it is None when it Relocated.
type RelocationReason uint8

const (
	// RelocationReasonNone: no reason; the outcome is Relocated.
	RelocationReasonNone RelocationReason = 0
	// RelocationReasonTargetUnavailable: no eligible target of the requested version appeared
	// before the deadline.
	RelocationReasonTargetUnavailable RelocationReason = 1
	// RelocationReasonStoreUnavailable: the Location Store could not be used.
	RelocationReasonStoreUnavailable RelocationReason = 2
	// RelocationReasonRelocationDisabled: relocation is turned off for this host or its objects.
	RelocationReasonRelocationDisabled RelocationReason = 3
	// RelocationReasonStateIncompatible: no target has a compatible type, factory, relocation
	// policy or state adapter.
	RelocationReasonStateIncompatible RelocationReason = 4
	// RelocationReasonDeadlineExceeded: the relocation did not finish before its deadline.
	RelocationReasonDeadlineExceeded RelocationReason = 5
	// RelocationReasonRelocationFailed: a relocation unit failed and was rolled back.
	RelocationReasonRelocationFailed RelocationReason = 6
	// RelocationReasonRuntimeNotReady: the host was not in a state to start a relocation.
	RelocationReasonRuntimeNotReady RelocationReason = 7
	// RelocationReasonManualTopologyUnsupported: the host uses a manual topology, which cannot be
	// relocated.
	RelocationReasonManualTopologyUnsupported RelocationReason = 8
	// RelocationReasonShutdownRequested: a shutdown arrived during Relocating; only the current
	// atomic relocation unit was finalised.
	RelocationReasonShutdownRequested RelocationReason = 9
	// RelocationReasonOperationInProgress: another lifecycle operation, with a different mode or
	// effective target version, is in progress; nothing was changed.
	RelocationReasonOperationInProgress RelocationReason = 10
)

var relocationReasonNames = [...]string{
	"None", "TargetUnavailable", "StoreUnavailable", "RelocationDisabled", "StateIncompatible",
	"DeadlineExceeded", "RelocationFailed", "RuntimeNotReady", "ManualTopologyUnsupported",
	"ShutdownRequested", "OperationInProgress",
}

// String returns the reason's name as the seed spells it, or RelocationReason(n).
func (r RelocationReason) String() string {
	if int(r) < len(relocationReasonNames) {
		return relocationReasonNames[r]
	}
	return fmt.Sprintf("RelocationReason(%d)", uint8(r))
}

// RelocationOptions are the arguments of a relocation.
type RelocationOptions struct {
	// Mode chooses planned maintenance or rolling update.
	Mode RelocationMode
	// TargetApplicationVersion is the application version to move to. nil means none was given:
	// PlannedMaintenance requires nil, RollingUpdate requires a value greater than the source's
	// version. See EffectiveTarget.
	TargetApplicationVersion *int64
	// Deadline bounds the whole relocation, including the wait for an eligible target.
	// Zero means none was given and the runtime's default applies. A later caller that joins an
	// operation in progress does not change its deadline.
	Deadline time.Duration
}

// EffectiveTarget returns the application version the relocation moves objects to, given the
// source host's version. For PlannedMaintenance it is sourceVersion, and a given
// TargetApplicationVersion is an argument error. For RollingUpdate TargetApplicationVersion is
// required and must be greater than sourceVersion. Any other combination, and an unknown mode,
// is refused with an error wrapping ErrInvalidArgument before any operation starts.
func (o RelocationOptions) EffectiveTarget(sourceVersion int64) (int64, error) {
	switch o.Mode {
	case RelocationModePlannedMaintenance:
		if o.TargetApplicationVersion != nil {
			return 0, fmt.Errorf("%w: %s takes no target application version (got %d; the source's version %d is used)",
				ErrInvalidArgument, o.Mode, *o.TargetApplicationVersion, sourceVersion)
		}
		return sourceVersion, nil
	case RelocationModeRollingUpdate:
		if o.TargetApplicationVersion == nil {
			return 0, fmt.Errorf("%w: %s requires a target application version greater than the source's %d",
				ErrInvalidArgument, o.Mode, sourceVersion)
		}
		if t := *o.TargetApplicationVersion; t <= sourceVersion {
			return 0, fmt.Errorf("%w: %s target application version %d is not greater than the source's %d",
				ErrInvalidArgument, o.Mode, t, sourceVersion)
		}
		return *o.TargetApplicationVersion, nil
	}
	return 0, fmt.Errorf("%w: unknown relocation mode %s", ErrInvalidArgument, o.Mode)
}

// RelocationResult is the terminal answer of a relocation, shared by every caller that joined the
// same operation.
type RelocationResult struct {
	// Mode is the operation's mode.
	Mode RelocationMode
	// TargetApplicationVersion is the effective target version: the source's own version for
	// PlannedMaintenance.
	TargetApplicationVersion int64
	// Outcome is Relocated or Blocked.
	Outcome RelocationOutcome
	// Reason is None when Relocated, and tells why when Blocked.
	Reason RelocationReason
}

// TerminationOutcome is how a shutdown ended.
type TerminationOutcome uint8

const (
	// TerminationOutcomeStopped: the host stopped cleanly.
	TerminationOutcomeStopped TerminationOutcome = 0
	// TerminationOutcomeForceStopped: the host stopped without finishing its cleanup; Reason
	// tells why.
	TerminationOutcomeForceStopped TerminationOutcome = 1
)

var terminationOutcomeNames = [...]string{"Stopped", "ForceStopped"}

// String returns the outcome's name as the seed spells it, or TerminationOutcome(n).
func (o TerminationOutcome) String() string {
	if int(o) < len(terminationOutcomeNames) {
		return terminationOutcomeNames[o]
	}
	return fmt.Sprintf("TerminationOutcome(%d)", uint8(o))
}

// TerminationReason tells why a shutdown force-stopped; it is None for a clean stop.
type TerminationReason uint8

const (
	// TerminationReasonNone: no reason; the outcome is Stopped.
	TerminationReasonNone TerminationReason = 0
	// TerminationReasonDeadlineExceeded: the cleanup did not finish before the deadline, or a
	// Spot's turn in progress or queued work did not finish within its close's time. It is the
	// reason whenever that happened, even when a step also failed: some Spot was then stopped
	// without its closing callback. The error of Close names every failure.
	TerminationReasonDeadlineExceeded TerminationReason = 1
	// TerminationReasonTeardownFailed: a step of the cleanup failed while the deadline had not
	// passed — releasing a Spot's location or the node's lease, among others — also when the
	// store's silence timed it out.
	TerminationReasonTeardownFailed TerminationReason = 2
)

var terminationReasonNames = [...]string{"None", "DeadlineExceeded", "TeardownFailed"}

// String returns the reason's name as the seed spells it, or TerminationReason(n).
func (r TerminationReason) String() string {
	if int(r) < len(terminationReasonNames) {
		return terminationReasonNames[r]
	}
	return fmt.Sprintf("TerminationReason(%d)", uint8(r))
}

// TerminationResult is the terminal answer of a shutdown, shared by every caller that joined it.
type TerminationResult struct {
	Outcome TerminationOutcome
	Reason  TerminationReason
}

// DefaultShutdownDeadline is the deadline of a shutdown when the caller gives none.
const DefaultShutdownDeadline = 30 * time.Second

// RuntimeStatus is a complete snapshot of the host's lifecycle. Each one a host hands out is its
// receiver's own: it never changes under the receiver, and writing to what its pointers point
// to changes what no other receiver sees. A consumer treats every status it receives as the
// current state.
type RuntimeStatus struct {
	// State is the host's lifecycle state.
	State RuntimeState
	// IsReady is true only when State is Serving.
	IsReady bool
	// AcceptingWork says whether the host takes new application operations now: it is
	// Serving and holds an owner lease that is certainly valid. A Serving host whose lease
	// has ended, or cannot be renewed while etcd is unreachable, creates and runs none of its
	// objects until it is registered again on a new lease.
	AcceptingWork bool
	// Deadline is the deadline of the lifecycle operation in progress (relocation or shutdown),
	// or nil when there is none.
	Deadline *time.Time
	// RelocationResult is the terminal result of the last relocation that ended, or nil when
	// none has, and while another one runs.
	RelocationResult *RelocationResult
	// TerminationResult is the shutdown's terminal result, or nil when no shutdown has ended.
	TerminationResult *TerminationResult
	// Sequence orders the statuses of this runtime instance; it may restart at 0 after a process
	// restart and is neither persisted nor globally ordered.
	Sequence uint64
	// ObservedAt is when the snapshot was taken.
	ObservedAt time.Time
	// Capacity is the host's inbound capacity figures.
	Capacity HostCapacityStatus
	// SafeToShutdown: this source itself observed that every relocation unit it started reached
	// the Message Follow route-removal point (S4) and that the cut-over re-send window ended. It is
	// not the target's completion acknowledgement, and it is true when no relocation ever
	// started.
	SafeToShutdown bool
}
