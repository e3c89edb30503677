package rt

import (
	"context"
	"iter"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// capacitySampleInterval is how often the capacity figures are read for their observers; a
// change of the job queue's pressure state is published at once.
const capacitySampleInterval = 250 * time.Millisecond

// CapacityStatus returns the node's capacity figures now: the Core HWM, the byte budget for
// what its peers sent and it still holds, and the application job queue, which bounds the jobs
// queued or running in all its Spots at once. Peaks and totals run from the start of the
// measurement epoch (ResetCapacityMetrics starts a new one). The status is the caller's own, as
// Status's is.
func (h *Host) CapacityStatus() sdk.HostCapacityStatus {
	spots := 0
	if c := h.spots.Load(); c != nil {
		spots = c.Executors()
	}
	return h.meter.Status(spots, h.cfg.Exec)
}

// ObserveCapacity streams the node's capacity figures, as ObserveRuntime does the runtime
// status: the current figures first, then new figures whenever they change, read every
// quarter of a second and at once when the application job queue pauses or resumes its
// intake. Each status it delivers is the observer's own, as CapacityStatus's is. The stream
// ends when ctx ends or after the node stopped. A nil ctx gives a stream that delivers
// nothing, and an error in the node's log.
func (h *Host) ObserveCapacity(ctx context.Context) iter.Seq[sdk.Observed[sdk.HostCapacityStatus]] {
	if ctx == nil {
		return noStream[sdk.HostCapacityStatus](h, "ObserveCapacity")
	}
	h.publishCapacity()
	return ownStream(h.lc.capacity.Observe(ctx), ownCapacityStatus)
}

// ResetCapacityMetrics resets every peak and cumulative capacity figure and starts a new
// measurement epoch; current values are untouched.
func (h *Host) ResetCapacityMetrics() {
	h.meter.Reset()
	h.publishCapacity()
}

// publishCapacity publishes the capacity figures to their observers if they changed.
func (h *Host) publishCapacity() {
	h.lc.capacityMu.Lock()
	defer h.lc.capacityMu.Unlock()
	st := h.CapacityStatus()
	if !sameCapacity(st, h.lc.capacity.Current()) {
		h.lc.capacity.Publish(st)
	}
}

// sameCapacity compares two snapshots apart from the figures that move with the clock alone.
func sameCapacity(a, b sdk.HostCapacityStatus) bool {
	a.CoreHwm.BlockedRatioPpm, b.CoreHwm.BlockedRatioPpm = 0, 0
	a.ApplicationJobQueue.CurrentPauseDuration, b.ApplicationJobQueue.CurrentPauseDuration = 0, 0
	if !samePtr(a.ApplicationJobQueue.ConfiguredManualMax, b.ApplicationJobQueue.ConfiguredManualMax) {
		return false
	}
	a.ApplicationJobQueue.ConfiguredManualMax, b.ApplicationJobQueue.ConfiguredManualMax = nil, nil
	return a.MeasurementEpoch == b.MeasurementEpoch && a.ApplicationJobQueue == b.ApplicationJobQueue &&
		sameCoreHwm(a.CoreHwm, b.CoreHwm)
}

func sameCoreHwm(a, b sdk.CoreHwmStatus) bool {
	if !samePtr(a.ConfiguredBudgetBytes, b.ConfiguredBudgetBytes) || !samePtr(a.ConfiguredMemoryLimitBytes, b.ConfiguredMemoryLimitBytes) {
		return false
	}
	a.ConfiguredBudgetBytes, b.ConfiguredBudgetBytes = nil, nil
	a.ConfiguredMemoryLimitBytes, b.ConfiguredMemoryLimitBytes = nil, nil
	return a == b
}

func samePtr(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// watchCapacity publishes the capacity figures while anyone observes them, and at once when the
// job queue's pressure state changes.
func (h *Host) watchCapacity() {
	h.watchStatus(capacitySampleInterval, h.meter.Changed(), h.lc.capacity.Observers, h.publishCapacity)
}
