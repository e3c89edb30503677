package sdk

import (
	"fmt"
	"math"
)

// UnhandledDispatchAction is what the receiver does with a message for which it knows no handler
// (I1).
type UnhandledDispatchAction uint8

const (
	// UnhandledDispatchActionReplyError answers the sender with ErrUnhandled (I1).
	UnhandledDispatchActionReplyError UnhandledDispatchAction = 0
	// UnhandledDispatchActionLogAndDrop logs the message and drops it (I1).
	UnhandledDispatchActionLogAndDrop UnhandledDispatchAction = 1
	// UnhandledDispatchActionDrop drops the message silently (I1).
	UnhandledDispatchActionDrop UnhandledDispatchAction = 2
	// UnhandledDispatchActionThrow fails the dispatch with ErrUnhandled on the receiver's side (I1).
	UnhandledDispatchActionThrow UnhandledDispatchAction = 3
)

var unhandledDispatchActionNames = [...]string{"ReplyError", "LogAndDrop", "Drop", "Throw"}

// String returns the action's name as the seed spells it, or UnhandledDispatchAction(n) (I1).
func (a UnhandledDispatchAction) String() string {
	if int(a) < len(unhandledDispatchActionNames) {
		return unhandledDispatchActionNames[a]
	}
	return fmt.Sprintf("UnhandledDispatchAction(%d)", uint8(a))
}

// UnhandledDispatchOptions is the unhandled-message policy, one action per submission family
// (I1). The zero value replies with an error for all three.
type UnhandledDispatchOptions struct {
	Request UnhandledDispatchAction
	Send    UnhandledDispatchAction
	Publish UnhandledDispatchAction
}

// DiagnosticsLevel is how much diagnostic telemetry the runtime records (I2, I3).
type DiagnosticsLevel uint8

const (
	// DiagnosticsLevelOff records nothing (I2).
	DiagnosticsLevelOff DiagnosticsLevel = 0
	// DiagnosticsLevelErrors records errors only (I2).
	DiagnosticsLevelErrors DiagnosticsLevel = 1
	// DiagnosticsLevelNormal records the usual traces and metrics (I2).
	DiagnosticsLevelNormal DiagnosticsLevel = 2
	// DiagnosticsLevelDetailed records everything available (I2).
	DiagnosticsLevelDetailed DiagnosticsLevel = 3
)

var diagnosticsLevelNames = [...]string{"Off", "Errors", "Normal", "Detailed"}

// String returns the level's name as the seed spells it, or DiagnosticsLevel(n) (I2).
func (l DiagnosticsLevel) String() string {
	if int(l) < len(diagnosticsLevelNames) {
		return diagnosticsLevelNames[l]
	}
	return fmt.Sprintf("DiagnosticsLevel(%d)", uint8(l))
}

// DiagnosticsOptions configure diagnostic telemetry (I2). The level in force at run time is a
// process singleton; a change applies to message processing that starts after it and never
// creates records retroactively (I3).
type DiagnosticsOptions struct {
	// Level is how much is recorded (I2).
	Level DiagnosticsLevel
	// SampleRate is the fraction of message processing that is recorded, in [0.0, 1.0] (I2).
	SampleRate float64
	// IncludeMessageSizes adds a payload size distribution to the telemetry; payload content is
	// never recorded (I2).
	IncludeMessageSizes bool
}

// Validate refuses an unknown level and a SampleRate outside [0.0, 1.0], NaN included, with an
// error wrapping ErrInvalidArgument that names the value (I2).
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
// the application job queue (I4, E1). For every optional field nil, and for every other field the
// zero value, means the runtime's default.
type InboundDispatchOptions struct {
	// CoreHwmMemoryLimitBytes is the memory limit the Core HWM budget is derived from, or nil (I4).
	CoreHwmMemoryLimitBytes *uint64
	// CoreHwmBudgetBytes is an explicit Core HWM budget, or nil (I4).
	CoreHwmBudgetBytes *uint64
	// CoreHwmProfile chooses how the Core HWM budget is applied (I4).
	CoreHwmProfile CoreHwmProfile
	// ApplicationJobQueueProfile chooses how the application job queue is sized (I4).
	ApplicationJobQueueProfile ApplicationJobQueueProfile
	// MaxQueuedApplicationJobs is the queue's size under the Manual profile, or nil (I4).
	MaxQueuedApplicationJobs *uint64
	// ApplicationJobQueuePauseThresholdPercent and ApplicationJobQueueResumeThresholdPercent are
	// the queue fill levels, in percent of its size, at which intake pauses and resumes. Each is
	// at most 100; when both are given, resume must be below pause (I4).
	ApplicationJobQueuePauseThresholdPercent  uint32
	ApplicationJobQueueResumeThresholdPercent uint32
}

// Validate refuses unknown profiles, a threshold percent over 100, and a resume threshold that is
// not below the pause threshold when both are nonzero, with an error wrapping ErrInvalidArgument
// that names the problem (I4).
func (o InboundDispatchOptions) Validate() error {
	if int(o.CoreHwmProfile) >= len(coreHwmProfileNames) {
		return fmt.Errorf("%w: unknown Core HWM profile %s", ErrInvalidArgument, o.CoreHwmProfile)
	}
	if int(o.ApplicationJobQueueProfile) >= len(applicationJobQueueProfileNames) {
		return fmt.Errorf("%w: unknown application job queue profile %s", ErrInvalidArgument, o.ApplicationJobQueueProfile)
	}
	pause, resume := o.ApplicationJobQueuePauseThresholdPercent, o.ApplicationJobQueueResumeThresholdPercent
	if pause > 100 {
		return fmt.Errorf("%w: application job queue pause threshold %d%% is over 100%%", ErrInvalidArgument, pause)
	}
	if resume > 100 {
		return fmt.Errorf("%w: application job queue resume threshold %d%% is over 100%%", ErrInvalidArgument, resume)
	}
	if pause != 0 && resume != 0 && resume >= pause {
		return fmt.Errorf("%w: application job queue resume threshold %d%% is not below the pause threshold %d%%",
			ErrInvalidArgument, resume, pause)
	}
	return nil
}
