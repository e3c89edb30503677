package sdk

import "fmt"

// Target addresses one Spot or Actor for the untyped invocation surface that generated code
// calls.
//
// A Target is built only by its constructors, one per kind, so no Target can be two kinds at
// once: an Entry target names a node and no ID, only an Instance target can carry
// create-intent, and an Actor target names the Actor, never the Spot it is in. The zero Target
// is invalid and every call refuses it.
type Target struct {
	kind   SpotKind
	typ    string
	id     string
	node   NodeID
	intent bool
	desc   *SpotDesc
}

// EntryTarget addresses the Entry Spot of type typ on node; each node has exactly one Entry Spot of a type.
func EntryTarget(typ string, node NodeID) Target {
	return Target{kind: KindEntry, typ: typ, node: node}
}

// UserTarget addresses the User Spot typ/id. Calls never create it; only an explicit
// create does.
func UserTarget(typ, id string) Target { return Target{kind: KindUser, typ: typ, id: id} }

// InstanceTarget addresses the Instance Spot typ/id with a plain call: a missing Spot is not
// created and the call fails with [ErrNotFound].
func InstanceTarget(typ, id string) Target { return Target{kind: KindInstance, typ: typ, id: id} }

// InstanceIntent addresses the Instance Spot typ/id with create-intent: the first such call to
// a missing Spot creates it, and concurrent ones all reach the one created.
func InstanceIntent(typ, id string) Target {
	return Target{kind: KindInstance, typ: typ, id: id, intent: true}
}

// ActorTarget addresses the Actor typ/id, in whatever Spot it is a member of now. No call to it
// creates it: an Actor comes to exist only when a Spot's handler spawns it, and a call to a
// missing one fails with [ErrNotFound].
func ActorTarget(typ, id string) Target { return Target{kind: KindActor, typ: typ, id: id} }

// Kind is the addressed object's kind.
func (t Target) Kind() SpotKind { return t.kind }

// Type is the addressed object's stable type name.
func (t Target) Type() string { return t.typ }

// ID is the addressed object's ID; empty for an Entry Spot.
func (t Target) ID() string { return t.id }

// Node is the node of an Entry target; empty for the other kinds.
func (t Target) Node() NodeID { return t.node }

// CreateIntent reports whether the call may create a missing Instance Spot. It is false for
// every other kind: an Actor target never carries create-intent.
func (t Target) CreateIntent() bool { return t.intent }

// WithDesc attaches the type's descriptor, which generated code passes so that a node that
// does not host the type can still decode its replies.
func (t Target) WithDesc(d *SpotDesc) Target { t.desc = d; return t }

// Desc is the attached descriptor, or nil.
func (t Target) Desc() *SpotDesc { return t.desc }

// Plain returns the target without create-intent. Only an Instance target can have it: any
// other target, an Actor's included, is returned as it is.
func (t Target) Plain() Target { t.intent = false; return t }

// Validate checks the target's parts with the rules of ValidateID.
func (t Target) Validate() error {
	if !t.kind.Valid() {
		return fmt.Errorf("%w: a zero or unknown target (kind %s)", ErrInvalidArgument, t.kind)
	}
	// The parts' names are spelled out only for an error: Validate runs on every call that
	// leaves the hot path.
	if ValidateID("type name", t.typ) != nil {
		return ValidateID(t.part("type name"), t.typ)
	}
	if t.kind == KindEntry {
		return t.node.Validate()
	}
	if ValidateID("ID", t.id) != nil {
		return ValidateID(t.part("ID"), t.id)
	}
	return nil
}

// part names a part of the target in an error: "spot ID", "actor type name".
func (t Target) part(name string) string {
	if t.kind == KindActor {
		return "actor " + name
	}
	return "spot " + name
}

// String renders the target for messages: "Entry chat.Lobby@node-1", "Instance chat.Room/\"r1\"",
// "Actor game.Pawn/\"p1\"".
func (t Target) String() string {
	if t.kind == KindEntry {
		return fmt.Sprintf("Entry %s@%s", t.typ, t.node)
	}
	s := fmt.Sprintf("%s %s/%q", t.kind, t.typ, t.id)
	if t.intent {
		s += " (create-intent)"
	}
	return s
}
