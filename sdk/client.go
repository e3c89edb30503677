package sdk

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"
)

// Client is the untyped invocation surface: generated references call it, and so can code
// that does not use zlinkgen. A running node (rt.Host) is a Client; so are SpotContext.Client
// and ActorContext.Client.
//
// Cancelling ctx ends the caller's wait. A call already admitted to the Spot's queue is
// dropped unrun if its context is done by the time its turn comes. A nil ctx is refused with
// an error wrapping [ErrInvalidArgument] before anything is sent; so it is by every method of
// the runtime that takes a context.
type Client interface {
	// Call sends req to method of t and waits for the reply.
	Call(ctx context.Context, t Target, method string, req proto.Message, opts ...CallOption) (proto.Message, error)
	// Send delivers msg to the one-way method of t. It returns once the message is admitted to
	// the Spot's queue; the handler runs later.
	Send(ctx context.Context, t Target, method string, msg proto.Message, opts ...CallOption) error
	// Create explicitly creates the User Spot t. It fails with [ErrAlreadyExists] when the
	// Spot exists.
	Create(ctx context.Context, t Target, opts ...CallOption) error
	// CloseSpot explicitly closes the User or Instance Spot t, or the Actor t: admission
	// stops, queued work finishes, the object's CloseHandler runs with CloseExplicit (with
	// CloseOwnerLost if its node's owner lease ended meanwhile), then its location is
	// released. Concurrent closes of one object share one close. The Spot an
	// Actor was a member of serves on.
	CloseSpot(ctx context.Context, t Target, opts ...CallOption) error
	// MoveActor moves the Actor actor into the User, Instance or Entry Spot to, on whatever
	// node that Spot runs. The Actor's last turn in its old Spot ends first, and its timers
	// stop there. It keeps its state when its object implements [Relocatable]; otherwise it
	// arrives empty. A missing Instance Spot is created only when to states create-intent (see
	// [InstanceIntent]); any other missing Spot fails the move with [ErrNotFound], and so
	// does a missing Actor. A failed move leaves the Actor where it was.
	MoveActor(ctx context.Context, actor, to Target, opts ...CallOption) error
	// LocalNode is the ID of the node this client runs on.
	LocalNode() NodeID
	// ChannelClient calls ClientServer channels and publishes on Fanout channels.
	ChannelClient
}

// CallOption configures one call.
type CallOption func(*CallOptions)

// CallOptions is what CallOption sets.
type CallOptions struct {
	// Node, when set, is where a call that creates (an explicit create or an intent call to a
	// missing Instance Spot) places the new Spot. Empty: the runtime's placement decides. A node
	// that relocates its objects creates none: an intent call for a Spot that it moved away
	// lately follows the Spot, and creates it where it went if it has closed there since.
	Node NodeID
	// Key, when set, makes a ClientServer channel call sticky: calls with the same key go to
	// the same server while the set of Ready servers does not change, chosen by weighted
	// rendezvous hashing, so a server's leaving moves only its own keys.
	Key string
}

// OnNode places an object that the call creates on node instead of letting placement choose.
func OnNode(node NodeID) CallOption { return func(o *CallOptions) { o.Node = node } }

// Key makes a ClientServer channel call go to the server that the key maps to, by weighted
// rendezvous hashing over the channel's Ready servers, instead of a server chosen by weight
// alone.
func Key(k string) CallOption { return func(o *CallOptions) { o.Key = k } }

// ApplyCallOptions folds opts into a CallOptions value; a nil option is skipped.
func ApplyCallOptions(opts []CallOption) CallOptions { return apply(opts) }

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
	// TurnStart is the instant the current turn was let start. Before every handler and timer
	// turn the runtime checks that this activation's owner lease, an Entry Spot's its node's,
	// is certainly valid, and no such turn starts once it may have ended; TurnStart is that
	// check's reading of the wall clock (the lease itself is measured on the monotonic clock). A
	// record of the turn stamped with it, rather than with a clock reading of the handler's own,
	// names an instant the lease certainly covered, even when the process was paused between the
	// check and the handler's first line. The closing callback
	// is checked too: it runs with [CloseOwnerLost] when the lease has ended, and TurnStart then
	// keeps the previous turn's instant. Outside a turn (in the factory, in MarshalState, on
	// another goroutine) it is the latest turn's, and the zero Time before the first.
	TurnStart() time.Time
	// AfterFunc runs fn once after d, as work on the Spot's own queue. The timer stops when the
	// Spot closes.
	AfterFunc(d time.Duration, fn func(ctx context.Context), opts ...TimerOption) Timer
	// Every runs fn every d, as work on the Spot's own queue, until stopped or the Spot closes.
	// A tick that finds the previous one still queued or running is skipped.
	Every(d time.Duration, fn func(ctx context.Context), opts ...TimerOption) Timer
	// Spawn makes the Actor of the type desc describes (an Actor descriptor, of kind
	// [KindActor]) with ID id, as a member of this Spot, and returns once it exists. Spawning
	// is the only way an Actor comes to exist. When an Actor of that type and ID exists
	// anywhere, in this Spot or another, the spawn fails with [ErrAlreadyExists]. A factory
	// that fails, or does not return within the runtime's operation timeout, fails the spawn
	// with [ErrCreationFailed] and leaves the ID free; what such a factory returns at last is
	// dropped. When ctx ends before the factory returns, the spawn fails with ctx's error; when
	// the node runs as many factories as it may at once until the operation timeout, with
	// [ErrCapacityExceeded]. A nil ctx is refused with an error wrapping [ErrInvalidArgument].
	Spawn(ctx context.Context, desc *SpotDesc, id string) error
	// RestoredState is the state the Spot brought along when its host's relocation moved it to
	// this node: what its object's MarshalState returned on the node it left (see
	// [Relocatable]). It is nil for a Spot created here, and for one whose object does not
	// implement Relocatable.
	RestoredState() []byte
}

// ActorContext is what an Actor's factory and handlers get from the runtime: the Actor's
// identity, the Spot it is a member of now, a logger, timers that run on that Spot's serial
// queue, a Client to call other objects, and the state it brought along when it moved.
type ActorContext interface {
	// Type is the Actor's stable type name.
	Type() string
	// ID is the Actor's ID.
	ID() string
	// Host is the Spot the Actor is a member of now, on whose serial queue it runs.
	Host() Target
	// Node is the node the Actor runs on now.
	Node() NodeID
	// Logger is a logger carrying the Actor's identity.
	Logger() *slog.Logger
	// Client calls other objects.
	Client() Client
	// TurnStart is the instant the current turn of the Spot the Actor is in was let start, when
	// the runtime found that Spot's owner lease certainly valid: the Actor's handlers, timers
	// and closing callback run as turns of that Spot (see [SpotContext.TurnStart]).
	TurnStart() time.Time
	// AfterFunc runs fn once after d, as work on the queue of the Spot the Actor is in. The
	// timer stops when the Actor leaves that Spot or closes.
	AfterFunc(d time.Duration, fn func(ctx context.Context), opts ...TimerOption) Timer
	// Every runs fn every d, as work on the queue of the Spot the Actor is in, until stopped or
	// the Actor leaves that Spot or closes. A tick that finds the previous one still queued or
	// running is skipped.
	Every(d time.Duration, fn func(ctx context.Context), opts ...TimerOption) Timer
	// RestoredState is the state the Actor brought along when it arrived by a move: what its
	// object's MarshalState returned before it left (see [Relocatable]). It is nil for a
	// freshly spawned Actor, and for one whose object does not implement Relocatable.
	RestoredState() []byte
}

// Timer is a Spot's or an Actor's timer.
type Timer interface {
	// Stop stops the timer; it reports whether a future run was cancelled. A run already queued
	// still happens.
	Stop() bool
}

// TimerOption configures a timer.
type TimerOption func(*TimerOptions)

// TimerOptions is what TimerOption sets.
type TimerOptions struct {
	// KeepAlive makes the timer's runs count as activity, so they keep an Instance Spot from
	// idle eviction. By default they do not.
	KeepAlive bool
}

// KeepAlive makes a timer's runs count as activity for idle eviction.
func KeepAlive() TimerOption { return func(o *TimerOptions) { o.KeepAlive = true } }

// ApplyTimerOptions folds opts into a TimerOptions value; a nil option is skipped.
func ApplyTimerOptions(opts []TimerOption) TimerOptions { return apply(opts) }

// apply folds functional options into their options value, skipping nil ones. The value the
// options write through escapes, so a call with none, the common case, returns before it is made.
func apply[O any, F ~func(*O)](opts []F) O {
	if len(opts) == 0 {
		var zero O
		return zero
	}
	var o O
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}
