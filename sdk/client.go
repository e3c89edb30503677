package sdk

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"
)

// Client is the untyped invocation surface: generated references call it, and so can code
// that does not use zlinkgen. A running node (rt.Host) is a Client; so is SpotContext.Client.
//
// Cancelling ctx ends the caller's wait. A call already admitted to the Spot's queue is
// dropped unrun if its context is done by the time its turn comes.
type Client interface {
	// Call sends req to method of t and waits for the reply.
	Call(ctx context.Context, t Target, method string, req proto.Message, opts ...CallOption) (proto.Message, error)
	// Send delivers msg to the one-way method of t. It returns once the message is admitted to
	// the Spot's queue; the handler runs later.
	Send(ctx context.Context, t Target, method string, msg proto.Message, opts ...CallOption) error
	// Create explicitly creates the User Spot t. It fails with [ErrAlreadyExists] when the
	// Spot exists.
	Create(ctx context.Context, t Target, opts ...CallOption) error
	// CloseSpot explicitly closes the User or Instance Spot t: admission stops, queued
	// work finishes, the Spot's CloseHandler runs with CloseExplicit, then its location is
	// released. Concurrent closes of one Spot share one close.
	CloseSpot(ctx context.Context, t Target, opts ...CallOption) error
	// LocalNode is the ID of the node this client runs on.
	LocalNode() NodeID
}

// CallOption configures one call.
type CallOption func(*CallOptions)

// CallOptions is what CallOption sets.
type CallOptions struct {
	// Node, when set, is where a call that creates (an explicit create or an intent call to a
	// missing Instance Spot) places the new Spot. Empty: the runtime's placement decides.
	Node NodeID
}

// OnNode places an object that the call creates on node instead of letting placement choose.
func OnNode(node NodeID) CallOption { return func(o *CallOptions) { o.Node = node } }

// ApplyCallOptions folds opts into a CallOptions value.
func ApplyCallOptions(opts []CallOption) CallOptions {
	if len(opts) == 0 {
		return CallOptions{} // the common case allocates nothing
	}
	var o CallOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// SpotContext is what a Spot's factory and handlers get from the runtime: the Spot's
// identity, a logger, timers that run on the Spot's own serial queue, and a Client to call
// other objects.
type SpotContext interface {
	// Kind is the Spot's kind.
	Kind() SpotKind
	// Type is the Spot's stable type name.
	Type() string
	// ID is the Spot's ID (empty for an Entry Spot).
	ID() string
	// Node is the node the Spot runs on.
	Node() NodeID
	// Logger is a logger carrying the Spot's identity.
	Logger() *slog.Logger
	// Client calls other objects. From a Spot's own handler or timer, CloseSpot on the Spot
	// itself through this Client starts the close and returns: the close runs after the
	// current turn, since it waits for the turn to end.
	Client() Client
	// Fence identifies this activation for the application's own external side effects: a
	// later activation of the same Spot, on any node, has a Fence that supersedes it.
	Fence() Fence
	// AfterFunc runs fn once after d, as work on the Spot's own queue. The timer stops when the
	// Spot closes.
	AfterFunc(d time.Duration, fn func(ctx context.Context), opts ...TimerOption) Timer
	// Every runs fn every d, as work on the Spot's own queue, until stopped or the Spot closes.
	// A tick that finds the previous one still queued or running is skipped.
	Every(d time.Duration, fn func(ctx context.Context), opts ...TimerOption) Timer
}

// Timer is a Spot timer.
type Timer interface {
	// Stop stops the timer; it reports whether a future run was cancelled. A run already queued
	// still happens.
	Stop() bool
}

// TimerOption configures a Spot timer.
type TimerOption func(*TimerOptions)

// TimerOptions is what TimerOption sets.
type TimerOptions struct {
	// KeepAlive makes the timer's runs count as activity, so they keep an Instance Spot from
	// idle eviction. By default they do not.
	KeepAlive bool
}

// KeepAlive makes a timer's runs count as activity for idle eviction.
func KeepAlive() TimerOption { return func(o *TimerOptions) { o.KeepAlive = true } }
