// Package sdk is the stable API that ZLink applications and zlinkgen-generated code import.
//
// It holds the object kinds, identifiers and their validation, the closing reasons,
// the error set that every runtime answer maps to, and the status records of the host, topology
// and capacity APIs. The runtime that implements it lives under rt/.
//
// Errors are sentinels matched with [errors.Is]; the typed details ([*QueueFullError],
// [*CapacityError]) also match with [errors.As]:
//
//	if errors.Is(err, sdk.ErrQueueFull) { ... }
//	var qf *sdk.QueueFullError
//	if errors.As(err, &qf) && qf.Axis == sdk.AxisBytes { ... }
package sdk
