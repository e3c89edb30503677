package sdk

// ObservationLoss counts what one observation skipped. The counts belong to that observation
// alone, which is why they are not in the status.
type ObservationLoss struct {
	// CoalescedCount is the number of intermediate statuses this observer did not receive because
	// a newer one replaced them while it was slow.
	CoalescedCount uint64
	// DiscardedTerminalCount is the number of terminal statuses this observer did not receive.
	DiscardedTerminalCount uint64
}

// Observed is one item of an observation stream: a status and the observation's loss so far.
//
// Status is a complete snapshot, the same for every observer, and each observer's own copy of
// it: it never changes under the observer, and writing to it changes what no other observer
// sees. Treat it as the current state, and do not interpret it as an event. A consumer slower
// than the changes gets intermediate statuses coalesced and always receives the latest one;
// the stream is not an audit log of every transition. The status's Sequence orders the
// statuses of one runtime instance only; it may restart at 0 after a process restart.
// Cancelling one observation ends only it: once the cancellation is seen no new status is
// delivered, and other observers, connections and the host are unaffected.
type Observed[T any] struct {
	// Status is the snapshot.
	Status T
	// Loss counts what this observation skipped.
	Loss ObservationLoss
}
