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
// Peak figures are reset by the runtime's capacity-metrics reset.
type HostCapacityStatus struct {
	// MeasurementEpoch identifies the measurement period; it changes when the peak figures are
	// reset.
	MeasurementEpoch uint64
	// CoreHwm is the process-level inbound byte budget.
	CoreHwm CoreHwmStatus
	// ApplicationJobQueue is the application job queue.
	ApplicationJobQueue ApplicationJobQueueStatus
}

// CoreHwmStatus is the state of the process-level inbound admission budget, the Core HWM.
// The fields follow the seed's order.
type CoreHwmStatus struct {
	// ConfiguredMemoryLimitBytes and ConfiguredBudgetBytes are the configured values, or nil when
	// not configured.
	ConfiguredMemoryLimitBytes *uint64
	ConfiguredBudgetBytes      *uint64
	// ConfiguredProfile is the configured profile.
	ConfiguredProfile CoreHwmProfile
	// EffectiveBudgetBytes through ActiveReceiveQueueCount, apart from the reserved
	// ApplicationAccountedBytes, are the budget in force and its current, provisional and peak
	// accounting, in bytes, messages or queues as each name says.
	EffectiveBudgetBytes    uint64
	TotalAppliedHwmBytes    uint64
	CoreQueueAccountedBytes uint64
	// ApplicationAccountedBytes is reserved for compatibility and always 0.
	ApplicationAccountedBytes uint64

	CurrentAccountedBytes           uint64
	ProvisionalAccountedBytes       uint64
	PeakAccountedBytes              uint64
	CompletionCurrentAccountedBytes uint64
	CompletionPeakAccountedBytes    uint64
	CompletionPendingMessageCount   uint64
	TotalMessagingAccountedBytes    uint64
	MonitorQueueAppliedHwmBytes     uint64
	MonitorQueueAccountedBytes      uint64
	TotalInstanceAppliedHwmBytes    uint64
	TotalInstanceAccountedBytes     uint64
	// BlockedRatioPpm is the blocked ratio of inbound admission, in parts per million.
	BlockedRatioPpm                       uint64
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

// ApplicationJobQueueStatus is the state of the application job queue. The fields follow
// the seed's order.
type ApplicationJobQueueStatus struct {
	// ConfiguredProfile, ConfiguredManualMax (nil when not configured) and the threshold
	// percents are the configured values.
	ConfiguredProfile                ApplicationJobQueueProfile
	ConfiguredManualMax              *uint64
	ConfiguredPauseThresholdPercent  uint32
	ConfiguredResumeThresholdPercent uint32
	// EffectiveProcessorCount through ResumePermitCount are the sizes in force.
	EffectiveProcessorCount           uint64
	EffectiveMaxQueuedApplicationJobs uint64
	PausePermitCount                  uint64
	ResumePermitCount                 uint64
	// ReservedSupplyPermits through CapacityWaitCount are the current, peak and cumulative
	// figures.
	ReservedSupplyPermits uint64
	QueuedApplicationJobs uint64
	PermitsInUse          uint64
	PeakPermitsInUse      uint64
	CapacityWaiters       uint64
	CapacityWaitCount     uint64
	// CapacityWaitDuration is the total time spent waiting for queue capacity.
	CapacityWaitDuration time.Duration
	// PressureState says whether intake is paused.
	PressureState ApplicationJobQueuePressureState
	// CurrentPauseDuration is how long the current pause has lasted, 0 when not paused.
	CurrentPauseDuration time.Duration
}
