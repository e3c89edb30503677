package sdk

import (
	"errors"
	"fmt"
)

// The runtime's answers, matched with errors.Is (DESIGN §4). Errors that cross the wire come
// back as the same sentinels.
var (
	// ErrInvalidID: an ID or type name is empty, too long, not UTF-8 or contains NUL.
	ErrInvalidID = errors.New("zlink: invalid id")
	// ErrInvalidArgument: a call's arguments are refused before anything starts.
	ErrInvalidArgument = errors.New("zlink: invalid argument")
	// ErrConfig: a configuration is refused, such as an unbounded lane or a Fanout status
	// asked of a manual subscriber's channel.
	ErrConfig = errors.New("zlink: configuration error")
	// ErrNotFound: the addressed object does not exist; a plain call never creates it.
	ErrNotFound = errors.New("zlink: not found")
	// ErrAlreadyExists: an explicit create found the object already present.
	ErrAlreadyExists = errors.New("zlink: already exists")
	// ErrStaleRoute: the receiver is no longer the owner, or its owner lease is no longer
	// certainly valid; the message was not run and is never retried by the runtime.
	ErrStaleRoute = errors.New("zlink: stale route")
	// ErrOwnerUnavailable: the object's authority exists but its owner cannot be used; no
	// creation starts until a formal lifecycle operation releases the authority. A new
	// object's message or explicit create gets it too when no node that may create the object
	// can be reached (none is Serving, or one that may create it could not be reached after
	// the others refused): nothing ran, and a later try may find a node.
	ErrOwnerUnavailable = errors.New("zlink: owner unavailable")
	// ErrQueueFull: a Spot's execution lane refused admission; *QueueFullError tells which lane
	// and which axis.
	ErrQueueFull = errors.New("zlink: spot queue full")
	// ErrInboundBudget: the process-level inbound admission (Core HWM) refused the message.
	ErrInboundBudget = errors.New("zlink: inbound budget exhausted")
	// ErrCapacityExceeded: the worker scheduler, placement or the activation cap refused;
	// *CapacityError tells where.
	ErrCapacityExceeded = errors.New("zlink: capacity exceeded")
	// ErrNotServing: the host takes no new application operations in its current state. A new
	// object's message or explicit create gets it too when every node that may create the
	// object refused, as relocating, draining or closing: nothing ran.
	ErrNotServing = errors.New("zlink: host not serving")
	// ErrUnhandled: the receiver knows no handler for the type or method.
	ErrUnhandled = errors.New("zlink: unhandled message")
	// ErrClosed: the object or the host was closed before the call could complete.
	ErrClosed = errors.New("zlink: closed")
	// ErrMessageTooLarge: a message is over the configured maximum size, on send or on receive.
	ErrMessageTooLarge = errors.New("zlink: message too large")
	// ErrCreationFailed: the object's factory failed or panicked; the reservation was released
	// and the ID can be created again. For the call that ran the creation, when it was made on
	// the node that ran the factory, errors.As reaches the factory's or OnActivate's own typed
	// error (not an [AppError], [QueueFullError] or [CapacityError], which stay the runtime's
	// to read); across nodes the error carries only its text.
	ErrCreationFailed = errors.New("zlink: creation failed")
	// ErrHandlerPanicked: a handler panicked. The caller gets this error with the panic's
	// value; the Spot keeps serving.
	ErrHandlerPanicked = errors.New("zlink: handler panicked")
	// ErrStoreUnavailable: the Location Store (etcd) did not answer in time or could not be
	// reached, so the runtime could not tell where the object is or whether it may be created.
	// Nothing was created or run on the caller's behalf unless the error says the outcome is
	// unknown; the call may be made again once the store is back.
	ErrStoreUnavailable = errors.New("zlink: location store unavailable")
	// ErrUnsupported: the runtime does not offer the operation; the error names it. Nothing was
	// run or created.
	ErrUnsupported = errors.New("zlink: not supported by this runtime")
	// ErrNoReadyTarget: a ClientServer channel has no Ready server of positive weight to take
	// the call; nothing was sent.
	ErrNoReadyTarget = errors.New("zlink: no ready target")
)

// Lane names one of a Spot's two execution lanes.
type Lane uint8

const (
	// LaneApplication carries application work: requests, sends, timer ticks.
	LaneApplication Lane = 1
	// LaneLifecycle carries lifecycle work: activation, close, relocation steps. It runs before
	// queued application work.
	LaneLifecycle Lane = 2
)

// String returns "application" or "lifecycle".
func (l Lane) String() string {
	switch l {
	case LaneApplication:
		return "application"
	case LaneLifecycle:
		return "lifecycle"
	}
	return fmt.Sprintf("Lane(%d)", uint8(l))
}

// Axis names the limit of a lane that refused admission.
type Axis uint8

const (
	// AxisCount: the lane's item count limit.
	AxisCount Axis = 1
	// AxisBytes: the lane's byte reservation limit.
	AxisBytes Axis = 2
)

// String returns "count" or "bytes".
func (a Axis) String() string {
	switch a {
	case AxisCount:
		return "count"
	case AxisBytes:
		return "bytes"
	}
	return fmt.Sprintf("Axis(%d)", uint8(a))
}

// QueueFullError is the detail of ErrQueueFull: which lane refused and on which axis.
type QueueFullError struct {
	Lane Lane
	Axis Axis
	// Limit is the axis's configured limit (items or bytes).
	Limit int64
	// Queued is what the lane held on that axis when it refused.
	Queued int64
	// Requested is what the refused work item asked for on that axis (1 item, or payload + 256 bytes).
	Requested int64
	// Where names the refused message when the runtime knows it: "<type>.<method> on <id>".
	Where string
}

// Error renders the detail; it is built only when read, so a refusal under load costs no
// formatting.
func (e *QueueFullError) Error() string {
	s := fmt.Sprintf("zlink: spot queue full: %s lane %s limit %d reached (queued %d, requested %d)",
		e.Lane, e.Axis, e.Limit, e.Queued, e.Requested)
	if e.Where != "" {
		s = e.Where + ": " + s
	}
	return s
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// CapacityWhere names the place that answered ErrCapacityExceeded.
type CapacityWhere uint8

const (
	// CapacityScheduler: the application job queue, which bounds the jobs queued or running
	// across the node, or the node's bound on the creations and closes its peers ask of it at once.
	CapacityScheduler CapacityWhere = 1
	// CapacityPlacement: no node has room for a new object (an admission decision, not a queue).
	CapacityPlacement CapacityWhere = 2
	// CapacityActivationCap: this node is at its active-object cap.
	CapacityActivationCap CapacityWhere = 3
	// CapacitySendQueue: the queue of requests to a peer stayed full until the caller's
	// context ended; the request was not sent.
	CapacitySendQueue CapacityWhere = 4
	// CapacityReplyQueue: the request ran, but the queue of replies to the caller's node was
	// full (that node was not taking its replies), so the reply was dropped: the outcome is
	// lost. Calling again runs the request again.
	CapacityReplyQueue CapacityWhere = 5
)

// String returns "scheduler", "placement", "activation cap", "send queue" or "reply queue".
func (w CapacityWhere) String() string {
	switch w {
	case CapacityScheduler:
		return "scheduler"
	case CapacityPlacement:
		return "placement"
	case CapacityActivationCap:
		return "activation cap"
	case CapacitySendQueue:
		return "send queue"
	case CapacityReplyQueue:
		return "reply queue"
	}
	return fmt.Sprintf("CapacityWhere(%d)", uint8(w))
}

// CapacityError is the detail of ErrCapacityExceeded.
type CapacityError struct {
	Where CapacityWhere
	// Limit is the limit that was reached, where one applies (the active-object cap).
	Limit int64
}

func (e *CapacityError) Error() string {
	if e.Limit > 0 {
		return fmt.Sprintf("zlink: capacity exceeded: %s (limit %d)", e.Where, e.Limit)
	}
	return fmt.Sprintf("zlink: capacity exceeded: %s", e.Where)
}

// Is makes errors.Is(err, ErrCapacityExceeded) true.
func (e *CapacityError) Is(target error) bool { return target == ErrCapacityExceeded }

// AppError is an application error returned by a handler. It reaches the caller, local or
// remote, with its code and message. A handler that returns any other error reaches the caller
// as an AppError with an empty code and the error's text as the message. A remote caller gets
// a message longer than 16 KiB, or a code longer than 1 KiB, cut to that length, with a note of
// how long it was.
type AppError struct {
	// Code is application-defined; the runtime never interprets it.
	Code string
	// Message is the human-readable text.
	Message string
}

// Errorf returns an *AppError with the given code and a formatted message.
func Errorf(code, format string, args ...any) *AppError {
	return &AppError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *AppError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}
