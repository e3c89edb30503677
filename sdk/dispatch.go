package sdk

import (
	"errors"
	"fmt"
	"math"
)

// UnhandledDispatchAction is what the runtime does with an unhandled message: one that reaches
// a node that knows no handler for it, because the node does not register the Spot type or the
// type has no method of that name. The node that finds the message unhandled applies its own
// policy; Throw also acts on the sending node, before the message leaves it.
//
// A message that reaches no node is not unhandled: a plain message to a Spot that does not
// exist fails with [ErrNotFound], and a create-intent message to a type that no node of the mesh
// hosts fails with [ErrUnhandled] whatever the action, since placement finds no node to send it
// to.
type UnhandledDispatchAction uint8

const (
	// UnhandledDispatchActionReplyError, the default, refuses the message with an error
	// wrapping [ErrUnhandled] that names the type, the method and the node. A request's caller
	// gets it from Call; a one-way message is acknowledged once it is admitted, so its sender
	// gets it from Send. Nothing is logged: the sender has the error.
	UnhandledDispatchActionReplyError UnhandledDispatchAction = 0
	// UnhandledDispatchActionLogAndDrop drops the message and logs one warning on the node
	// that found it unhandled (the Spot type and ID, the method, the node and, for a message
	// from a peer, the sender). A one-way message counts as delivered: Send returns nil. A
	// request gets no reply, as a request to an actor that ignores it: the caller's Call ends
	// when its context does, with the context's error, and never waits longer than the
	// receiving node's OperationTimeout (then with an error wrapping
	// context.DeadlineExceeded), so a caller without a deadline is not left waiting for ever.
	UnhandledDispatchActionLogAndDrop UnhandledDispatchAction = 1
	// UnhandledDispatchActionDrop is UnhandledDispatchActionLogAndDrop without the log line.
	UnhandledDispatchActionDrop UnhandledDispatchAction = 2
	// UnhandledDispatchActionThrow treats an unhandled message as the sender's programming
	// error and reports it as early as possible. On the sending node, Call or Send returns an
	// error wrapping [ErrUnhandled] without sending anything when the sender can know: the
	// target's descriptor (the one generated code attaches, see Target.WithDesc) has no such
	// method, or no node of the mesh, as this node sees the membership, hosts the type (for an
	// Entry target, the addressed node does not). Otherwise the node that finds the message
	// unhandled refuses it as ReplyError does, so Call and Send return the error, and logs it
	// at error level.
	UnhandledDispatchActionThrow UnhandledDispatchAction = 3
)

var unhandledDispatchActionNames = [...]string{"ReplyError", "LogAndDrop", "Drop", "Throw"}

// String returns the action's name as the seed spells it, or UnhandledDispatchAction(n).
func (a UnhandledDispatchAction) String() string {
	if int(a) < len(unhandledDispatchActionNames) {
		return unhandledDispatchActionNames[a]
	}
	return fmt.Sprintf("UnhandledDispatchAction(%d)", uint8(a))
}

// Valid reports whether a is one of the four actions.
func (a UnhandledDispatchAction) Valid() bool { return int(a) < len(unhandledDispatchActionNames) }

// UnhandledDispatchOptions is the unhandled-message policy, one action per submission family.
// The zero value replies with an error for all three, which is the runtime's default.
type UnhandledDispatchOptions struct {
	// Request applies to calls that wait for a reply (Call, with or without create-intent).
	Request UnhandledDispatchAction
	// Send applies to one-way messages (Send).
	Send UnhandledDispatchAction
	// Publish applies to messages published on a Fanout channel. It is validated now and
	// takes effect with channels.
	Publish UnhandledDispatchAction
}

// Validate refuses an unknown action with an error wrapping [ErrConfig] that names the family.
func (o UnhandledDispatchOptions) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		a    UnhandledDispatchAction
	}{{"Request", o.Request}, {"Send", o.Send}, {"Publish", o.Publish}} {
		if !f.a.Valid() {
			errs = append(errs, fmt.Errorf("%w: unhandled-message action for %s: unknown action %s", ErrConfig, f.name, f.a))
		}
	}
	return errors.Join(errs...)
}

// DiagnosticsLevel is how much diagnostic telemetry the runtime records.
type DiagnosticsLevel uint8

const (
	// DiagnosticsLevelOff records nothing.
	DiagnosticsLevelOff DiagnosticsLevel = 0
	// DiagnosticsLevelErrors records errors only.
	DiagnosticsLevelErrors DiagnosticsLevel = 1
	// DiagnosticsLevelNormal records the usual traces and metrics.
	DiagnosticsLevelNormal DiagnosticsLevel = 2
	// DiagnosticsLevelDetailed records everything available.
	DiagnosticsLevelDetailed DiagnosticsLevel = 3
)

var diagnosticsLevelNames = [...]string{"Off", "Errors", "Normal", "Detailed"}

// String returns the level's name as the seed spells it, or DiagnosticsLevel(n).
func (l DiagnosticsLevel) String() string {
	if int(l) < len(diagnosticsLevelNames) {
		return diagnosticsLevelNames[l]
	}
	return fmt.Sprintf("DiagnosticsLevel(%d)", uint8(l))
}

// DiagnosticsOptions configure diagnostic telemetry. The level in force at run time is a
// process singleton; a change applies to message processing that starts after it and never
// creates records retroactively.
type DiagnosticsOptions struct {
	// Level is how much is recorded.
	Level DiagnosticsLevel
	// SampleRate is the fraction of message processing that is recorded, in [0.0, 1.0].
	SampleRate float64
	// IncludeMessageSizes adds a payload size distribution to the telemetry; payload content is
	// never recorded.
	IncludeMessageSizes bool
}

// Validate refuses an unknown level and a SampleRate outside [0.0, 1.0], NaN included, with an
// error wrapping [ErrInvalidArgument] that names the value.
func (o DiagnosticsOptions) Validate() error {
	if int(o.Level) >= len(diagnosticsLevelNames) {
		return fmt.Errorf("%w: unknown diagnostics level %s", ErrInvalidArgument, o.Level)
	}
	if math.IsNaN(o.SampleRate) || o.SampleRate < 0 || o.SampleRate > 1 {
		return fmt.Errorf("%w: diagnostics sample rate %v is out of range [0.0, 1.0]", ErrInvalidArgument, o.SampleRate)
	}
	return nil
}

// InboundDispatchOptions configure process-level inbound admission: the Core HWM byte budget and
// the application job queue. For every optional field nil, and for every other field the
// zero value, means the runtime's default.
type InboundDispatchOptions struct {
	// CoreHwmMemoryLimitBytes is the memory limit the Core HWM budget is derived from, or nil.
	CoreHwmMemoryLimitBytes *uint64
	// CoreHwmBudgetBytes is an explicit Core HWM budget, or nil.
	CoreHwmBudgetBytes *uint64
	// CoreHwmProfile chooses how the Core HWM budget is applied.
	CoreHwmProfile CoreHwmProfile
	// ApplicationJobQueueProfile chooses how the application job queue is sized.
	ApplicationJobQueueProfile ApplicationJobQueueProfile
	// MaxQueuedApplicationJobs is the queue's size under the Manual profile, or nil.
	MaxQueuedApplicationJobs *uint64
	// ApplicationJobQueuePauseThresholdPercent and ApplicationJobQueueResumeThresholdPercent are
	// the queue fill levels, in percent of its size, at which intake pauses and resumes. Each is
	// at most 100; when both are given, resume must be below pause.
	ApplicationJobQueuePauseThresholdPercent  uint32
	ApplicationJobQueueResumeThresholdPercent uint32
}

// Validate refuses unknown profiles, a threshold percent over 100, and a resume threshold that is
// not below the pause threshold when both are nonzero. It reports every problem at once, each
// wrapping [ErrInvalidArgument] and naming the value.
func (o InboundDispatchOptions) Validate() error {
	var errs []error
	if int(o.CoreHwmProfile) >= len(coreHwmProfileNames) {
		errs = append(errs, fmt.Errorf("%w: unknown Core HWM profile %s", ErrInvalidArgument, o.CoreHwmProfile))
	}
	if int(o.ApplicationJobQueueProfile) >= len(applicationJobQueueProfileNames) {
		errs = append(errs, fmt.Errorf("%w: unknown application job queue profile %s", ErrInvalidArgument, o.ApplicationJobQueueProfile))
	}
	pause, resume := o.ApplicationJobQueuePauseThresholdPercent, o.ApplicationJobQueueResumeThresholdPercent
	if pause > 100 {
		errs = append(errs, fmt.Errorf("%w: application job queue pause threshold %d%% is over 100%%", ErrInvalidArgument, pause))
	}
	if resume > 100 {
		errs = append(errs, fmt.Errorf("%w: application job queue resume threshold %d%% is over 100%%", ErrInvalidArgument, resume))
	}
	if pause != 0 && resume != 0 && resume >= pause {
		errs = append(errs, fmt.Errorf("%w: application job queue resume threshold %d%% is not below the pause threshold %d%%",
			ErrInvalidArgument, resume, pause))
	}
	return errors.Join(errs...)
}
