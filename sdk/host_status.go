package sdk

import (
	"fmt"
	"time"
)

// RuntimeState is the lifecycle state of the whole host process (F1, F2). The numeric values are
// part of the contract.
type RuntimeState uint8

const (
	// RuntimeStatePreparing: the host is starting and takes no application work yet (F1).
	RuntimeStatePreparing RuntimeState = 0
	// RuntimeStateServing: the host takes application work; the only state in which
	// RuntimeStatus.IsReady is true (F1, F11).
	RuntimeStateServing RuntimeState = 1
	// RuntimeStateRelocating: no new placement or application admission; the host's current
	// objects are moving to other nodes (F2).
	RuntimeStateRelocating RuntimeState = 2
	// RuntimeStateRelocated: every object has moved; host infrastructure and connections stay, but
	// no new application operation is taken (F2, F7).
	RuntimeStateRelocated RuntimeState = 3
	// RuntimeStateDraining: no relocation; the remaining application work and resources are being
	// cleaned up (F2, F8).
	RuntimeStateDraining RuntimeState = 4
	// RuntimeStateStopped: shutdown has finished (F8).
	RuntimeStateStopped RuntimeState = 5
	// RuntimeStateError: the host failed and cannot serve (F1).
	RuntimeStateError RuntimeState = 6
)

var runtimeStateNames = [...]string{"Preparing", "Serving", "Relocating", "Relocated", "Draining", "Stopped", "Error"}

// String returns the state's name as the seed spells it ("Serving"), or RuntimeState(n) for an
// unknown value (F1).
func (s RuntimeState) String() string {
	if int(s) < len(runtimeStateNames) {
		return runtimeStateNames[s]
	}
	return fmt.Sprintf("RuntimeState(%d)", uint8(s))
}

// RelocationMode says which application version a relocation moves objects to (F3, F4).
type RelocationMode uint8

const (
	// RelocationModePlannedMaintenance moves objects to nodes of the source's own application
	// version; no target version is given (F4, F5).
	RelocationModePlannedMaintenance RelocationMode = 0
	// RelocationModeRollingUpdate moves objects to nodes of exactly the requested target version,
	// which must be greater than the source's (F4, F5).
	RelocationModeRollingUpdate RelocationMode = 1
)

var relocationModeNames = [...]string{"PlannedMaintenance", "RollingUpdate"}

// String returns the mode's name as the seed spells it, or RelocationMode(n) (F3).
func (m RelocationMode) String() string {
	if int(m) < len(relocationModeNames) {
		return relocationModeNames[m]
	}
	return fmt.Sprintf("RelocationMode(%d)", uint8(m))
}

// RelocationOutcome is the terminal answer of a relocation (F3, F7).
type RelocationOutcome uint8

const (
	// RelocationOutcomeRelocated: every object moved and the host is now Relocated (F7).
	RelocationOutcomeRelocated RelocationOutcome = 0
	// RelocationOutcomeBlocked: the move could not be started or finished safely; Reason tells
	// why. Uncommitted changes were rolled back and, if the host still has local objects to
	// serve, it is back in Serving (F7).
	RelocationOutcomeBlocked RelocationOutcome = 1
)

var relocationOutcomeNames = [...]string{"Relocated", "Blocked"}

// String returns the outcome's name as the seed spells it, or RelocationOutcome(n) (F3).
func (o RelocationOutcome) String() string {
	if int(o) < len(relocationOutcomeNames) {
		return relocationOutcomeNames[o]
	}
	return fmt.Sprintf("RelocationOutcome(%d)", uint8(o))
}

// RelocationReason tells why a relocation was Blocked; it is None when it Relocated (F3).
type RelocationReason uint8

const (
	// RelocationReasonNone: no reason; the outcome is Relocated (F3).
	RelocationReasonNone RelocationReason = 0
	// RelocationReasonTargetUnavailable: no eligible target of the requested version appeared
	// before the deadline (F5, F6).
	RelocationReasonTargetUnavailable RelocationReason = 1
	// RelocationReasonStoreUnavailable: the Location Store could not be used (F3).
	RelocationReasonStoreUnavailable RelocationReason = 2
	// RelocationReasonRelocationDisabled: relocation is turned off for this host or its objects (F3).
	RelocationReasonRelocationDisabled RelocationReason = 3
	// RelocationReasonStateIncompatible: no target has a compatible type, factory, relocation
	// policy or state adapter (F3, F5).
	RelocationReasonStateIncompatible RelocationReason = 4
	// RelocationReasonDeadlineExceeded: the relocation did not finish before its deadline (F3).
	RelocationReasonDeadlineExceeded RelocationReason = 5
	// RelocationReasonRelocationFailed: a relocation unit failed and was rolled back (F3, F7).
	RelocationReasonRelocationFailed RelocationReason = 6
	// RelocationReasonRuntimeNotReady: the host was not in a state to start a relocation (F3).
	RelocationReasonRuntimeNotReady RelocationReason = 7
	// RelocationReasonManualTopologyUnsupported: the host uses a manual topology, which cannot be
	// relocated (F3).
	RelocationReasonManualTopologyUnsupported RelocationReason = 8
	// RelocationReasonShutdownRequested: a shutdown arrived during Relocating; only the current
	// atomic relocation unit was finalised (F9).
	RelocationReasonShutdownRequested RelocationReason = 9
	// RelocationReasonOperationInProgress: another lifecycle operation, with a different mode or
	// effective target version, is in progress; nothing was changed (F10).
	RelocationReasonOperationInProgress RelocationReason = 10
)

var relocationReasonNames = [...]string{
	"None", "TargetUnavailable", "StoreUnavailable", "RelocationDisabled", "StateIncompatible",
	"DeadlineExceeded", "RelocationFailed", "RuntimeNotReady", "ManualTopologyUnsupported",
	"ShutdownRequested", "OperationInProgress",
}

// String returns the reason's name as the seed spells it, or RelocationReason(n) (F3).
func (r RelocationReason) String() string {
	if int(r) < len(relocationReasonNames) {
		return relocationReasonNames[r]
	}
	return fmt.Sprintf("RelocationReason(%d)", uint8(r))
}

// RelocationOptions are the arguments of a relocation (F3, F4).
type RelocationOptions struct {
	// Mode chooses planned maintenance or rolling update (F3).
	Mode RelocationMode
	// TargetApplicationVersion is the application version to move to. nil means none was given:
	// PlannedMaintenance requires nil, RollingUpdate requires a value greater than the source's
	// version (F4). See EffectiveTarget.
	TargetApplicationVersion *int64
	// Deadline bounds the whole relocation, including the wait for an eligible target (F6).
	// Zero means none was given and the runtime's default applies. A later caller that joins an
	// operation in progress does not change its deadline (F10).
	Deadline time.Duration
}

// EffectiveTarget returns the application version the relocation moves objects to, given the
// source host's version (F4). For PlannedMaintenance it is sourceVersion, and a given
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
// same operation (F3, F10).
type RelocationResult struct {
	// Mode is the operation's mode (F3).
	Mode RelocationMode
	// TargetApplicationVersion is the effective target version: the source's own version for
	// PlannedMaintenance (F4).
	TargetApplicationVersion int64
	// Outcome is Relocated or Blocked (F7).
	Outcome RelocationOutcome
	// Reason is None when Relocated, and tells why when Blocked (F3).
	Reason RelocationReason
}

// TerminationOutcome is how a shutdown ended (F8).
type TerminationOutcome uint8

const (
	// TerminationOutcomeStopped: the host stopped cleanly (F8).
	TerminationOutcomeStopped TerminationOutcome = 0
	// TerminationOutcomeForceStopped: the host stopped without finishing its cleanup; Reason
	// tells why (F8).
	TerminationOutcomeForceStopped TerminationOutcome = 1
)

var terminationOutcomeNames = [...]string{"Stopped", "ForceStopped"}

// String returns the outcome's name as the seed spells it, or TerminationOutcome(n) (F8).
func (o TerminationOutcome) String() string {
	if int(o) < len(terminationOutcomeNames) {
		return terminationOutcomeNames[o]
	}
	return fmt.Sprintf("TerminationOutcome(%d)", uint8(o))
}

// TerminationReason tells why a shutdown force-stopped; it is None for a clean stop (F8).
type TerminationReason uint8

const (
	// TerminationReasonNone: no reason; the outcome is Stopped (F8).
	TerminationReasonNone TerminationReason = 0
	// TerminationReasonDeadlineExceeded: the cleanup did not finish before the deadline (F8).
	TerminationReasonDeadlineExceeded TerminationReason = 1
	// TerminationReasonTeardownFailed: releasing a resource failed (F8).
	TerminationReasonTeardownFailed TerminationReason = 2
)

var terminationReasonNames = [...]string{"None", "DeadlineExceeded", "TeardownFailed"}

// String returns the reason's name as the seed spells it, or TerminationReason(n) (F8).
func (r TerminationReason) String() string {
	if int(r) < len(terminationReasonNames) {
		return terminationReasonNames[r]
	}
	return fmt.Sprintf("TerminationReason(%d)", uint8(r))
}

// TerminationResult is the terminal answer of a shutdown, shared by every caller that joined it
// (F8, F10).
type TerminationResult struct {
	Outcome TerminationOutcome
	Reason  TerminationReason
}

// DefaultShutdownDeadline is the deadline of a shutdown when the caller gives none (F8).
const DefaultShutdownDeadline = 30 * time.Second

// RuntimeStatus is a complete, immutable snapshot of the host's lifecycle (F11). Observers share
// it (H1); a consumer treats every status it receives as the current state (H2).
type RuntimeStatus struct {
	// State is the host's lifecycle state (F1).
	State RuntimeState
	// IsReady is true only when State is Serving (F11).
	IsReady bool
	// AcceptingWork says whether the host takes new application operations now (F11).
	AcceptingWork bool
	// Deadline is the deadline of the lifecycle operation in progress (relocation or shutdown),
	// or nil when there is none (F11).
	Deadline *time.Time
	// RelocationResult is the last relocation's terminal result, or nil when no relocation has
	// ended (F3, F11).
	RelocationResult *RelocationResult
	// TerminationResult is the shutdown's terminal result, or nil when no shutdown has ended
	// (F8, F11).
	TerminationResult *TerminationResult
	// Sequence orders the statuses of this runtime instance; it may restart at 0 after a process
	// restart and is neither persisted nor globally ordered (H3).
	Sequence uint64
	// ObservedAt is when the snapshot was taken (F11).
	ObservedAt time.Time
	// Capacity is the host's inbound capacity figures (F11, J1).
	Capacity HostCapacityStatus
	// SafeToShutdown: this source itself observed that every relocation unit it started reached
	// the Message Follow route-removal point (S4) and that the cut-over re-send window ended. It is
	// not the target's completion acknowledgement, and it is true when no relocation ever
	// started (F12).
	SafeToShutdown bool
}
