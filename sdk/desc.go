package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// SupportPackageIsVersion1 is referenced by generated code: a generated file that is too new or
// too old for this runtime fails to compile with this name in the error.
const SupportPackageIsVersion1 = true

// SpotDesc describes one Spot or Actor type to the runtime. zlinkgen generates one per
// annotated interface; its method table is keyed by stable method names, never ordinals.
type SpotDesc struct {
	// Name is the stable type name (the `name=` option, or package.Interface).
	Name string
	// Kind is Entry, User or Instance for a Spot type, and KindActor for an Actor type.
	Kind SpotKind
	// Methods is the dispatch table in declaration order.
	Methods []MethodDesc
	// IdleTimeout is the `idle=` option of an Instance Spot type (0: the node's default).
	IdleTimeout time.Duration
}

// Method returns the method named name, or nil.
func (d *SpotDesc) Method(name string) *MethodDesc {
	for i := range d.Methods {
		if d.Methods[i].Name == name {
			return &d.Methods[i]
		}
	}
	return nil
}

// MethodDesc is one entry of a Spot type's dispatch table.
type MethodDesc struct {
	// Name is the stable method name.
	Name string
	// OneWay marks a `//zlink:send` method: no reply is sent.
	OneWay bool
	// NewRequest returns a new, empty request message on each call, which a remote call is
	// decoded into as it is.
	NewRequest func() proto.Message
	// NewReply returns a new, empty reply message on each call, which a remote reply is decoded
	// into as it is (nil when OneWay).
	NewReply func() proto.Message
	// Invoke calls the method on impl, the object the type's factory made.
	Invoke func(impl any, ctx context.Context, req proto.Message) (proto.Message, error)
}

// Validate reports what the entry lacks: a name of valid UTF-8, Invoke, NewRequest, and
// NewReply unless the method is one-way; and that NewRequest and NewReply, when set, each make
// a message (it calls them once).
func (m *MethodDesc) Validate() error {
	var missing []string
	if m.Name == "" || !utf8.ValidString(m.Name) {
		missing = append(missing, "a name of valid UTF-8")
	}
	if m.Invoke == nil {
		missing = append(missing, "Invoke")
	}
	if m.NewRequest == nil {
		missing = append(missing, "NewRequest")
	}
	if !m.OneWay && m.NewReply == nil {
		missing = append(missing, "NewReply (it is not one-way)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("method %q lacks %s", m.Name, strings.Join(missing, ", "))
	}
	for _, f := range []struct {
		name   string
		newMsg func() proto.Message
	}{{"NewRequest", m.NewRequest}, {"NewReply", m.NewReply}} {
		if f.newMsg == nil {
			continue
		}
		if err := makesMessage(f.newMsg); err != nil {
			return fmt.Errorf("method %q: %s %w", m.Name, f.name, err)
		}
	}
	return nil
}

// makesMessage reports whether newMsg returns a message, not nil or a nil pointer, without
// panicking.
func makesMessage(newMsg func() proto.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panicked: %v", v)
		}
	}()
	if msg := newMsg(); msg == nil || !msg.ProtoReflect().IsValid() {
		return errors.New("returned no message")
	}
	return nil
}

// ValidateMethods checks every entry of a dispatch table and that no two share a name.
func ValidateMethods(methods []MethodDesc) error {
	var errs []error
	seen := make(map[string]struct{}, len(methods))
	for i := range methods {
		m := &methods[i]
		if err := m.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := seen[m.Name]; dup {
			errs = append(errs, fmt.Errorf("method %q appears twice", m.Name))
		}
		seen[m.Name] = struct{}{}
	}
	return errors.Join(errs...)
}

// FullMethodName returns "/<type>/<method>", the form of the generated constants.
func FullMethodName(typ, method string) string { return "/" + typ + "/" + method }

// Factory makes the object that serves one Spot. It runs once per activation, before the
// activation is published Ready; an error or a panic fails the creation, which is
// released so that the ID can be created again.
type Factory func(SpotContext) (any, error)

// ActorFactory makes the object that serves one Actor. It runs when a Spot spawns the Actor,
// and again wherever the Actor arrives by a move: ActorContext.RestoredState tells the two
// apart. An error or a panic fails the spawn or the move.
type ActorFactory func(ActorContext) (any, error)

// Registrar takes Spot and Actor types, channel servers and subscribers before a node starts serving. Generated RegisterX
// functions call it; registering one stable name twice, as a Spot or an Actor type, is an
// error.
type Registrar interface {
	// RegisterSpot registers a Spot type: desc's Kind is Entry, User or Instance.
	RegisterSpot(desc *SpotDesc, factory Factory, opts ...TypeOption) error
	// RegisterActor registers an Actor type: desc's Kind is KindActor. An Actor is never
	// idle-evicted on its own, so [WithIdleTimeout] is refused.
	RegisterActor(desc *SpotDesc, factory ActorFactory, opts ...TypeOption) error
	// ChannelRegistrar takes the node's channel servers and subscribers.
	ChannelRegistrar
}

// TypeOption configures one registered Spot or Actor type.
type TypeOption func(*TypeOptions)

// TypeOptions is what TypeOption sets. Zero values mean the node's defaults.
type TypeOptions struct {
	// IdleTimeout overrides the node's InstanceSpotIdleTimeout for an Instance type; a
	// negative value disables idle eviction for the type.
	IdleTimeout time.Duration
	// Relocation says how a relocation of the host moves an active object of the type whose
	// object does not implement Relocatable.
	Relocation RelocationPolicy
}

// ApplyTypeOptions folds opts into a TypeOptions value; a nil option is skipped.
func ApplyTypeOptions(opts []TypeOption) TypeOptions { return apply(opts) }

// RelocationPolicy says what a host's relocation does with an active object of a type whose
// object does not implement [Relocatable], and so has no state to carry.
type RelocationPolicy uint8

const (
	// RelocationRecreate moves the object empty: its factory runs on the target as for a fresh
	// one, and the application accepts that its in-memory state is lost. The default.
	RelocationRecreate RelocationPolicy = iota
	// RelocationPin keeps the object where it is: while one is active on a host, that host's
	// relocation ends Blocked with reason StateIncompatible and moves nothing more.
	RelocationPin
)

// WithRelocation sets the relocation policy of a type whose object does not implement
// Relocatable (an object that does always moves with its state).
func WithRelocation(p RelocationPolicy) TypeOption {
	return func(o *TypeOptions) { o.Relocation = p }
}

// WithIdleTimeout sets the idle timeout of an Instance Spot type: it is evicted once no
// application work has run for d and none is pending. A negative d disables idle eviction for
// the type. Only Instance types accept it.
func WithIdleTimeout(d time.Duration) TypeOption {
	return func(o *TypeOptions) { o.IdleTimeout = d }
}

// ActivateHandler is implemented by a Spot object that needs a step before its first message.
// OnActivate runs after the factory and before the activation is published Ready; an error
// fails the creation.
type ActivateHandler interface {
	OnActivate(ctx context.Context) error
}

// Relocatable is implemented by the object that serves an Actor or a Spot when it keeps its
// state across a move. An Actor or Spot whose object implements it keeps its state: before it
// leaves, after its last turn there, MarshalState returns the state, and the factory that makes
// it where it arrives gets the bytes (through ActorContext.RestoredState or
// SpotContext.RestoredState). An error fails the move and leaves the object where it was. An
// Actor or Spot whose object does not implement Relocatable arrives empty: its factory runs as
// for a fresh one; a host's relocation treats such a Spot as its type's RelocationPolicy says.
type Relocatable interface {
	MarshalState(ctx context.Context) ([]byte, error)
}

// CloseHandler is implemented by a Spot object that wants to know when it closes. OnClose runs
// on the Spot's own queue, after its last application work and before its location is
// released; no new work is taken meanwhile. The runtime saves no state: save what you need
// here.
type CloseHandler interface {
	OnClose(ctx context.Context, reason CloseReason)
}
