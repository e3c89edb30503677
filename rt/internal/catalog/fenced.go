//go:build !zlink_unfenced

package catalog

// unfenced is true only in a runtime built with the zlink_unfenced tag, which the fault suite
// uses to prove that its checks catch a runtime whose turns ignore the owner lease.
const unfenced = false
