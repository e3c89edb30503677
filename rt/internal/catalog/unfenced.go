//go:build zlink_unfenced

package catalog

// unfenced: this runtime is deliberately broken for the fault suite's test of its own checks.
// Owned Spots take turns whatever their owner lease says, and a lost lease closes none of
// them. Never build a node with this tag.
const unfenced = true
