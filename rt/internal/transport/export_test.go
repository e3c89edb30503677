package transport

import "time"

// SetRegisteredHook makes f run in each of tr's calls once the call is registered on a Ready
// link and before its request is sent. Set it before tr makes any call.
func SetRegisteredHook(tr *Transport, f func()) { tr.hooks.registered = f }

// CloseListener closes tr's listener under its server, as a failing network stack would.
func CloseListener(tr *Transport) error { return tr.lis.Close() }

// FlowWindow is the flow-control window of mesh streams and connections.
const FlowWindow = flowWindow

// SetHold makes the senders of tr's links hold a batch for woken callers for up to d. Set it
// before tr connects.
func SetHold(tr *Transport, d time.Duration) { tr.hooks.hold = d }

// MaxBatch is the most envelopes a node puts in a batch, as it announces to its peers.
const MaxBatch = maxSentEnvelopes
