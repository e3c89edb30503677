package sdk

import "fmt"

// CloseReason tells a Spot's closing callback why it is being closed. The application
// saves whatever state it needs in the callback; the runtime saves none.
type CloseReason uint8

const (
	// CloseUnspecified is the zero value; no close has it.
	CloseUnspecified CloseReason = 0
	// CloseExplicit: an explicit Close of a User or Instance Spot.
	CloseExplicit CloseReason = 1
	// CloseIdleEvicted: idle cleanup of an Instance Spot.
	CloseIdleEvicted CloseReason = 2
	// CloseRelocated: the Spot moved to another node; this activation ends.
	CloseRelocated CloseReason = 3
	// CloseShutdown: the host is shutting down or draining.
	CloseShutdown CloseReason = 4
	// CloseOwnerLost: this node's owner lease can no longer be trusted, so it gives up the Spot.
	CloseOwnerLost CloseReason = 5
	// CloseCreationFailed: activation did not finish (OnActivate failed); the reservation is
	// released.
	CloseCreationFailed CloseReason = 6
)

var closeReasonNames = [...]string{"Unspecified", "Explicit", "IdleEvicted", "Relocated", "Shutdown", "OwnerLost", "CreationFailed"}

// String returns the reason's name.
func (r CloseReason) String() string {
	if int(r) < len(closeReasonNames) {
		return closeReasonNames[r]
	}
	return fmt.Sprintf("CloseReason(%d)", uint8(r))
}
