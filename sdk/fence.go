package sdk

// Fence identifies one activation of a Spot, for the application's own side effects outside
// the runtime: a database row, a file, a message to another system.
//
// The runtime runs a Spot's turns only while its node's owner lease is certainly valid: it
// checks the lease before every message and timer run, and a node whose lease ended drops
// the Spot's queued work and closes it. A turn that is already running when the lease ends
// cannot be stopped, though: it can overlap the first turn of the Spot's next activation on
// another node. A Fence closes that gap for writes that matter. Store the Fence's Epoch with
// each external write and refuse a write whose Epoch is lower than the stored one (a
// conditional update, a compare-and-set, a version column): a newer activation always has a
// larger Epoch, so a stale turn's late write is refused there.
//
// Fences are comparable with ==. A User or Instance Spot's Fence does not change while the
// activation lives; an Entry Spot's follows its node's registration, which changes when the
// node registers again after its owner lease ended.
type Fence struct {
	// Epoch grows with every activation of the same Spot, on any node: an activation that
	// became Ready later has a larger Epoch. For an Entry Spot it grows with every registration
	// of its node.
	Epoch int64
	// Lease is the owner lease the activation runs under, as the Location Store knows it. Two
	// activations with the same Lease ran on the same node registration.
	Lease int64
}

// Supersedes reports whether f belongs to a later activation than o: a write fenced with f may
// replace one fenced with o, and not the other way round.
func (f Fence) Supersedes(o Fence) bool { return f.Epoch > o.Epoch }

// IsZero reports whether f is the zero Fence, which no activation has.
func (f Fence) IsZero() bool { return f == Fence{} }
