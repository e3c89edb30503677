package sdk

import (
	"fmt"
	"time"
)

// CoreHwmProfile chooses how the Core HWM byte budget is applied. The seed names the
// type without values; this project defines them.
type CoreHwmProfile uint8

const (
	// CoreHwmProfileBalanced is the default balance of memory and throughput.
	CoreHwmProfileBalanced CoreHwmProfile = 0
	// CoreHwmProfileThroughput favours throughput with a larger budget.
	CoreHwmProfileThroughput CoreHwmProfile = 1
	// CoreHwmProfileLowMemory favours a small memory footprint.
	CoreHwmProfileLowMemory CoreHwmProfile = 2
)

var coreHwmProfileNames = [...]string{"Balanced", "Throughput", "LowMemory"}

// String returns the profile's name, or CoreHwmProfile(n).
func (p CoreHwmProfile) String() string {
	if int(p) < len(coreHwmProfileNames) {
		return coreHwmProfileNames[p]
	}
	return fmt.Sprintf("CoreHwmProfile(%d)", uint8(p))
}

// ApplicationJobQueueProfile chooses how the application job queue is sized. The seed
// names the type without values; this project defines them.
type ApplicationJobQueueProfile uint8

const (
	// ApplicationJobQueueProfileAuto sizes the queue from the processor count.
	ApplicationJobQueueProfileAuto ApplicationJobQueueProfile = 0
	// ApplicationJobQueueProfileManual uses InboundDispatchOptions.MaxQueuedApplicationJobs.
	ApplicationJobQueueProfileManual ApplicationJobQueueProfile = 1
)

var applicationJobQueueProfileNames = [...]string{"Auto", "Manual"}

// String returns the profile's name, or ApplicationJobQueueProfile(n).
func (p ApplicationJobQueueProfile) String() string {
	if int(p) < len(applicationJobQueueProfileNames) {
		return applicationJobQueueProfileNames[p]
	}
	return fmt.Sprintf("ApplicationJobQueueProfile(%d)", uint8(p))
}

// ApplicationJobQueuePressureState says whether the application job queue's intake is paused.
// The seed names the type without values; this project defines them.
type ApplicationJobQueuePressureState uint8

const (
	// ApplicationJobQueuePressureStateNormal: intake is open.
	ApplicationJobQueuePressureStateNormal ApplicationJobQueuePressureState = 0
	// ApplicationJobQueuePressureStatePaused: the queue reached its pause threshold and intake
	// waits until it falls to the resume threshold.
	ApplicationJobQueuePressureStatePaused ApplicationJobQueuePressureState = 1
)

var applicationJobQueuePressureStateNames = [...]string{"Normal", "Paused"}

// String returns the state's name, or ApplicationJobQueuePressureState(n).
func (s ApplicationJobQueuePressureState) String() string {
	if int(s) < len(applicationJobQueuePressureStateNames) {
		return applicationJobQueuePressureStateNames[s]
	}
	return fmt.Sprintf("ApplicationJobQueuePressureState(%d)", uint8(s))
}

// HostCapacityStatus is the host's inbound capacity figures, part of RuntimeStatus.
// Peak figures are reset by the runtime's capacity-metrics reset. Each one a host hands out is
// its receiver's own, as a [RuntimeStatus] is.
type HostCapacityStatus struct {
	// MeasurementEpoch identifies the measurement period; it changes when the peak figures are
	// reset.
	MeasurementEpoch uint64
	// CoreHwm is the process-level inbound byte budget.
	CoreHwm CoreHwmStatus
	// ApplicationJobQueue is the application job queue.
	ApplicationJobQueue ApplicationJobQueueStatus
}

// CoreHwmStatus is the state of the process-level inbound admission budget, the Core HWM: the
// bytes of its peers' requests that the node holds, from their arrival until their reply is
// queued (a one-way message: until its handler returns), and the replies it has queued for them.
// A request costs its payload plus a fixed 256 bytes. The fields follow the seed's order; peaks
// and ratios run from the start of the measurement epoch.
type CoreHwmStatus struct {
	// ConfiguredMemoryLimitBytes and ConfiguredBudgetBytes are the configured values, or nil when
	// not configured.
	ConfiguredMemoryLimitBytes *uint64
	ConfiguredBudgetBytes      *uint64
	// ConfiguredProfile is the configured profile.
	ConfiguredProfile CoreHwmProfile
	// EffectiveBudgetBytes is the budget in force.
	EffectiveBudgetBytes uint64
	// TotalAppliedHwmBytes is the sum of every byte limit in force: the budget and both lanes'
	// byte limits of every Spot whose lanes exist now.
	TotalAppliedHwmBytes uint64
	// CoreQueueAccountedBytes is the bytes queued in the node's send queues to its peers,
	// requests and replies, not yet handed to the connection.
	CoreQueueAccountedBytes uint64
	// ApplicationAccountedBytes is reserved for compatibility and always 0.
	ApplicationAccountedBytes uint64

	// CurrentAccountedBytes is the bytes of peers' requests held now, and
	// ProvisionalAccountedBytes the part of them not yet admitted to a Spot's lane (decoding,
	// waiting for a creation, a close or a permit).
	CurrentAccountedBytes     uint64
	ProvisionalAccountedBytes uint64
	// PeakAccountedBytes is the most that requests and queued replies held together.
	PeakAccountedBytes uint64
	// CompletionCurrentAccountedBytes and CompletionPeakAccountedBytes are the bytes of replies
	// queued for peers now and at most; CompletionPendingMessageCount counts those replies.
	CompletionCurrentAccountedBytes uint64
	CompletionPeakAccountedBytes    uint64
	CompletionPendingMessageCount   uint64
	// TotalMessagingAccountedBytes is CurrentAccountedBytes and CompletionCurrentAccountedBytes
	// together: what the budget is compared with.
	TotalMessagingAccountedBytes uint64
	// MonitorQueueAppliedHwmBytes and MonitorQueueAccountedBytes are the lifecycle lanes (the
	// queues of the Spots' own closing and control work): the sum of their byte limits, and the
	// bytes they reserve now.
	MonitorQueueAppliedHwmBytes uint64
	MonitorQueueAccountedBytes  uint64
	// TotalInstanceAppliedHwmBytes and TotalInstanceAccountedBytes are the application lanes of
	// every Spot: the sum of their byte limits, and the bytes reserved now by the messages that
	// were queued in them (payload plus a fixed cost per message; a request run at once on its
	// caller's goroutine is never queued and not counted).
	TotalInstanceAppliedHwmBytes uint64
	TotalInstanceAccountedBytes  uint64
	// BlockedRatioPpm is the share of the measurement epoch, in parts per million, during which
	// at least one peer's stream was not read: the budget or the stream's share of it was
	// exhausted, its replies were not being taken, or the application job queue was paused.
	BlockedRatioPpm uint64
	// ActiveDirectionalQueueCount is the number of open streams between this node and its
	// peers, each a queue of requests one way and of replies the other;
	// ActiveCompletionDirectionalQueueCount the number of those on which this node sends the
	// replies (streams its peers opened); ActiveSendQueueCount and ActiveReceiveQueueCount the
	// number of send queues and of readers running on them.
	ActiveDirectionalQueueCount           uint64
	ActiveCompletionDirectionalQueueCount uint64
	ActiveSendQueueCount                  uint64
	ActiveReceiveQueueCount               uint64
	// OutstandingApplicationLeaseCount, RetiredQueueCount and DeferredOriginCreditBytes are
	// reserved for compatibility and always 0; they are never a measure of application job queue
	// pressure.
	OutstandingApplicationLeaseCount uint64
	RetiredQueueCount                uint64
	DeferredOriginCreditBytes        uint64
}

// ApplicationJobQueueStatus is the state of the application job queue: the bound on the
// messages queued or running in all of the node's Spots at once. Each such job holds a permit
// from its admission to a Spot's lane until its handler returns; a request from this node that
// finds its Spot idle runs at once on its caller's goroutine, is never queued, and takes none. The fields follow the seed's
// order; peaks and totals run from the start of the measurement epoch.
type ApplicationJobQueueStatus struct {
	// ConfiguredProfile, ConfiguredManualMax (nil when not configured) and the threshold
	// percents (0 when not configured) are the configured values.
	ConfiguredProfile                ApplicationJobQueueProfile
	ConfiguredManualMax              *uint64
	ConfiguredPauseThresholdPercent  uint32
	ConfiguredResumeThresholdPercent uint32
	// EffectiveProcessorCount is GOMAXPROCS when the node started.
	EffectiveProcessorCount uint64
	// EffectiveMaxQueuedApplicationJobs is the number of permits; PausePermitCount and
	// ResumePermitCount are the permits in use at which the node stops and starts again
	// reading its peers' streams.
	EffectiveMaxQueuedApplicationJobs uint64
	PausePermitCount                  uint64
	ResumePermitCount                 uint64
	// ReservedSupplyPermits is the permits held now beyond the queue's size by messages that a
	// running handler made while the queue was full: they do not wait for the permits their
	// own callers hold.
	ReservedSupplyPermits uint64
	// QueuedApplicationJobs is the jobs admitted to lanes and not started yet.
	QueuedApplicationJobs uint64
	// PermitsInUse and PeakPermitsInUse are the permits held now, reserved ones included, and
	// at most. A Spot that is running work returns the permits of the jobs it ran in batches:
	// up to 15 of them per running Spot may belong to jobs that already ended, and count here
	// and toward the pause threshold until they return; a job that finds no permit free has
	// them returned.
	PermitsInUse     uint64
	PeakPermitsInUse uint64
	// CapacityWaiters is the callers waiting for a permit now; CapacityWaitCount the waits
	// that ended, with a permit or at their deadline.
	CapacityWaiters   uint64
	CapacityWaitCount uint64
	// CapacityWaitDuration is the total time those waits lasted.
	CapacityWaitDuration time.Duration
	// PressureState says whether intake is paused.
	PressureState ApplicationJobQueuePressureState
	// CurrentPauseDuration is how long the current pause has lasted, 0 when not paused.
	CurrentPauseDuration time.Duration
}
