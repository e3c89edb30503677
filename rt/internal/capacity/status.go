package capacity

import (
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

// Status returns the J status records. spots is the number of active Spots and lanes their
// lane limits: the applied high-water marks of the lanes are theirs.
func (m *Meter) Status(spots int, lanes exec.Config) sdk.HostCapacityStatus {
	if m == nil {
		return sdk.HostCapacityStatus{}
	}
	now := time.Now()
	s := m.s
	o := s.Options

	m.mu.Lock()
	epoch, since := m.epoch, m.epochStart
	blocked := m.blockedTime
	if m.blocked > 0 {
		blocked += now.Sub(maxTime(m.blockedFrom, since))
	}
	waitCount, waitTime := m.waitCount, m.waitTime
	var paused time.Duration
	if !m.pausedSince.IsZero() {
		paused = now.Sub(m.pausedSince)
	}
	m.mu.Unlock()

	current, completion := nonNeg(m.current.Load()), nonNeg(m.completion.Load())
	inLane := min(nonNeg(m.laneHeld.Load()), current)
	queued := m.lanes.Totals()
	appBytes, lifeBytes := nonNeg(queued.ApplicationBytes), nonNeg(queued.LifecycleBytes)
	appApplied := uint64(spots) * uint64(lanes.Application.Bytes)
	lifeApplied := uint64(spots) * uint64(lanes.Lifecycle.Bytes)
	var ratio uint64
	if elapsed := now.Sub(since); elapsed > 0 {
		ratio = min(uint64(blocked)*1_000_000/uint64(elapsed), 1_000_000)
	}
	inUse := nonNeg(m.inUse.Load())
	pressure := sdk.ApplicationJobQueuePressureStateNormal
	if m.paused.Load() {
		pressure = sdk.ApplicationJobQueuePressureStatePaused
	}

	return sdk.HostCapacityStatus{
		MeasurementEpoch: epoch,
		CoreHwm: sdk.CoreHwmStatus{
			ConfiguredMemoryLimitBytes:            copyOf(o.CoreHwmMemoryLimitBytes),
			ConfiguredBudgetBytes:                 copyOf(o.CoreHwmBudgetBytes),
			ConfiguredProfile:                     o.CoreHwmProfile,
			EffectiveBudgetBytes:                  uint64(s.Budget),
			TotalAppliedHwmBytes:                  uint64(s.Budget) + appApplied + lifeApplied,
			CoreQueueAccountedBytes:               nonNeg(m.coreQueue.Load()),
			CurrentAccountedBytes:                 current,
			ProvisionalAccountedBytes:             current - inLane,
			PeakAccountedBytes:                    nonNeg(m.peak.Load()),
			CompletionCurrentAccountedBytes:       completion,
			CompletionPeakAccountedBytes:          nonNeg(m.completionPeak.Load()),
			CompletionPendingMessageCount:         nonNeg(m.completionCount.Load()),
			TotalMessagingAccountedBytes:          current + completion,
			MonitorQueueAppliedHwmBytes:           lifeApplied,
			MonitorQueueAccountedBytes:            lifeBytes,
			TotalInstanceAppliedHwmBytes:          appApplied,
			TotalInstanceAccountedBytes:           appBytes,
			BlockedRatioPpm:                       ratio,
			ActiveDirectionalQueueCount:           nonNeg(m.streams.Load()),
			ActiveCompletionDirectionalQueueCount: nonNeg(m.completionStreams.Load()),
			ActiveSendQueueCount:                  nonNeg(m.senders.Load()),
			ActiveReceiveQueueCount:               nonNeg(m.receivers.Load()),
		},
		ApplicationJobQueue: sdk.ApplicationJobQueueStatus{
			ConfiguredProfile:                 o.ApplicationJobQueueProfile,
			ConfiguredManualMax:               copyOf(o.MaxQueuedApplicationJobs),
			ConfiguredPauseThresholdPercent:   o.ApplicationJobQueuePauseThresholdPercent,
			ConfiguredResumeThresholdPercent:  o.ApplicationJobQueueResumeThresholdPercent,
			EffectiveProcessorCount:           uint64(s.Processors),
			EffectiveMaxQueuedApplicationJobs: uint64(s.MaxJobs),
			PausePermitCount:                  uint64(s.PauseAt),
			ResumePermitCount:                 uint64(s.ResumeAt),
			ReservedSupplyPermits:             nonNeg(m.reserved.Load()),
			QueuedApplicationJobs:             nonNeg(queued.QueuedApplication),
			PermitsInUse:                      inUse,
			PeakPermitsInUse:                  nonNeg(m.jobsPeak.Load()),
			CapacityWaiters:                   nonNeg(m.jobWaiters.Load()),
			CapacityWaitCount:                 waitCount,
			CapacityWaitDuration:              waitTime,
			PressureState:                     pressure,
			CurrentPauseDuration:              paused,
		},
	}
}

func nonNeg(v int64) uint64 { return uint64(max(v, 0)) }

func copyOf(p *uint64) *uint64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
