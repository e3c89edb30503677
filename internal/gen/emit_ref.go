package gen

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/zlink-go/zlink/sdk"
)

// A reference is a small value type holding the client and the address of one Spot. Each kind
// has its own reference types (A3), and only the types whose calls may create hold a
// constructor that says so: OpenX for Instance (create-intent, A2, B5), CreateX for User.

// instanceRefs renders XRef (plain: never creates, B1), XIntent (every call carries
// create-intent, A2/B5) and their constructors XOf and OpenX.
func (e *emitter) instanceRefs(s *Interface) {
	n, l := namesOf(s), e.loc
	e.refType(s, n.Ref, fmt.Sprintf("%s is a plain reference to one Instance Spot of type %s: its calls never create the Spot,\n"+
		"and a call to a missing one answers [sdk.ErrNotFound]. [%s] makes references whose calls create.",
		n.Ref, s.Name, n.Open), "id")
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a plain reference to the %s %s through %s: its calls never create it.", n.Of, s.Name, l.id, l.c)))
	e.f.Func().Id(n.Of).Params(jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.id).String()).Id(n.Ref).Block(
		jen.Return(refLit(n.Ref, jen.Id(l.c), "id", jen.Id(l.id))),
	)
	e.idMethod(s, n.Ref)
	plain := func() *jen.Statement {
		return withDesc(sdkID("InstanceTarget").Call(jen.Id(n.TypeName), jen.Id(l.r).Dot("id")), n)
	}
	for _, m := range s.Methods {
		e.refMethod(s, m, n.Ref, plain)
	}
	e.closeMethod(s, n.Ref, plain)

	e.refType(s, n.Intent, fmt.Sprintf("%s is a reference to one Instance Spot of type %s whose every call carries create-intent:\n"+
		"the first call to a missing Spot creates it, and concurrent first calls all reach the one created.\n"+
		"Use [%s] for calls that must not create.", n.Intent, s.Name, n.Ref), "id")
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a reference to the %s %s through %s whose calls create it when it is missing.\n"+
		"Nothing is created until the first call.", n.Open, s.Name, l.id, l.c)))
	e.f.Func().Id(n.Open).Params(jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.id).String()).Id(n.Intent).Block(
		jen.Return(refLit(n.Intent, jen.Id(l.c), "id", jen.Id(l.id))),
	)
	e.idMethod(s, n.Intent)
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("Ref returns the plain reference to the same %s: its calls never create it.", s.Name)))
	// XRef and XIntent are both refType with the "id" field, so the conversion is exact.
	e.f.Func().Params(jen.Id(l.r).Id(n.Intent)).Id("Ref").Params().Id(n.Ref).Block(
		jen.Return(jen.Id(n.Ref).Call(jen.Id(l.r))),
	)
	intent := func() *jen.Statement {
		return withDesc(sdkID("InstanceIntent").Call(jen.Id(n.TypeName), jen.Id(l.r).Dot("id")), n)
	}
	for _, m := range s.Methods {
		e.refMethod(s, m, n.Intent, intent)
	}
	e.closeMethod(s, n.Intent, plain)
}

// userRef renders XRef with XOf and the explicit CreateX (A2).
func (e *emitter) userRef(s *Interface) {
	n, l := namesOf(s), e.loc
	e.refType(s, n.Ref, fmt.Sprintf("%s is a reference to one User Spot of type %s. Its calls never create the Spot: [%s]\n"+
		"does, explicitly. A call to a missing one answers [sdk.ErrNotFound].", n.Ref, s.Name, n.Create), "id")
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a reference to the existing %s %s through %s: its calls never create it.", n.Of, s.Name, l.id, l.c)))
	e.f.Func().Id(n.Of).Params(jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.id).String()).Id(n.Ref).Block(
		jen.Return(refLit(n.Ref, jen.Id(l.c), "id", jen.Id(l.id))),
	)
	target := func(id jen.Code) *jen.Statement {
		return withDesc(sdkID("UserTarget").Call(jen.Id(n.TypeName), id), n)
	}
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s explicitly creates the %s %s through %s and returns a reference to it. When the\n"+
		"%s already exists, it returns the runtime's error, which matches [sdk.ErrAlreadyExists]; address\n"+
		"the existing one with [%s]. [sdk.OnNode] among opts places the new %s on a node.", n.Create, s.Name, l.id, l.c, s.Name, n.Of, s.Name)))
	e.f.Func().Id(n.Create).Params(
		jen.Id(l.ctx).Add(qual(contextContext)), jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.id).String(), jen.Id(l.opts).Op("...").Add(sdkID("CallOption")),
	).Params(jen.Id(n.Ref), jen.Error()).Block(
		jen.If(jen.Id(l.c).Op("==").Nil()).Block(
			jen.Return(jen.Id(n.Ref).Values(), qual(fmtErrorf).Call(jen.Lit("%w: "+n.Create+" needs a client"), sdkID("ErrInvalidArgument"))),
		),
		jen.If(jen.Id(l.err).Op(":=").Id(l.c).Dot("Create").Call(jen.Id(l.ctx), target(jen.Id(l.id)), jen.Id(l.opts).Op("...")), jen.Id(l.err).Op("!=").Nil()).Block(
			jen.Return(jen.Id(n.Ref).Values(), jen.Id(l.err)),
		),
		jen.Return(refLit(n.Ref, jen.Id(l.c), "id", jen.Id(l.id)), jen.Nil()),
	)
	e.idMethod(s, n.Ref)
	t := func() *jen.Statement { return target(jen.Id(l.r).Dot("id")) }
	for _, m := range s.Methods {
		e.refMethod(s, m, n.Ref, t)
	}
	e.closeMethod(s, n.Ref, t)
}

// entryRef renders XRef with XOn and LocalX. An Entry Spot exists once per node from the
// node's start (A2): nothing on its reference creates, closes or relocates anything (A3, A4).
func (e *emitter) entryRef(s *Interface) {
	n, l := namesOf(s), e.loc
	e.refType(s, n.Ref, fmt.Sprintf("%s is a reference to the Entry Spot %s of one node. Every Object Server node has\n"+
		"exactly one %s from its start; nothing on this reference creates, closes or relocates it.", n.Ref, s.Name, s.Name),
		"node")
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a reference to the %s of %s, through %s.", n.On, s.Name, l.node, l.c)))
	e.f.Func().Id(n.On).Params(jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.node).Add(sdkID("NodeID"))).Id(n.Ref).Block(
		jen.Return(refLit(n.Ref, jen.Id(l.c), "node", jen.Id(l.node))),
	)
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a reference to the %s of the node %s runs on (%s.LocalNode()).", n.Local, s.Name, l.c, l.c)))
	e.f.Func().Id(n.Local).Params(jen.Id(l.c).Add(sdkID("Client"))).Id(n.Ref).Block(
		jen.If(jen.Id(l.c).Op("==").Nil()).Block(jen.Return(jen.Id(n.Ref).Values())),
		jen.Return(refLit(n.Ref, jen.Id(l.c), "node", jen.Id(l.c).Dot("LocalNode").Call())),
	)
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("Node returns the node whose %s the reference addresses.", s.Name)))
	e.f.Func().Params(jen.Id(l.r).Id(n.Ref)).Id("Node").Params().Add(sdkID("NodeID")).Block(jen.Return(jen.Id(l.r).Dot("node")))
	t := func() *jen.Statement {
		return withDesc(sdkID("EntryTarget").Call(jen.Id(n.TypeName), jen.Id(l.r).Dot("node")), n)
	}
	for _, m := range s.Methods {
		e.refMethod(s, m, n.Ref, t)
	}
}

// actorRef renders XRef with XOf, SpawnX and MoveX. An Actor has no create-intent (B9): it
// comes to exist only when a Spot's handler spawns it, into that Spot, so SpawnX takes the
// Spot's SpotContext and no reference or client call creates one.
func (e *emitter) actorRef(s *Interface) {
	n, l := namesOf(s), e.loc
	e.refType(s, n.Ref, fmt.Sprintf("%s is a reference to one Actor of type %s, in whichever Spot it is a member of now.\n"+
		"Its calls never create the Actor: [%s] does, from a Spot's handler. A call to a missing one\n"+
		"answers [sdk.ErrNotFound].", n.Ref, s.Name, n.Spawn), "id")
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a reference to the existing %s %s through %s: its calls never create it.", n.Of, s.Name, l.id, l.c)))
	e.f.Func().Id(n.Of).Params(jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.id).String()).Id(n.Ref).Block(
		jen.Return(refLit(n.Ref, jen.Id(l.c), "id", jen.Id(l.id))),
	)
	target := func(id jen.Code) *jen.Statement {
		return withDesc(sdkID("ActorTarget").Call(jen.Id(n.TypeName), id), n)
	}
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s makes the %s %s as a member of the Spot that %s belongs to, and returns a\n"+
		"reference to it through %s.Client(). Call it from that Spot's handler. When a %s %s\n"+
		"already exists, in this Spot or another, it returns the runtime's error, which matches\n"+
		"[sdk.ErrAlreadyExists]; address the existing one with [%s].", n.Spawn, s.Name, l.id, l.sc, l.sc, s.Name, l.id, n.Of)))
	e.f.Func().Id(n.Spawn).Params(
		jen.Id(l.ctx).Add(qual(contextContext)), jen.Id(l.sc).Add(sdkID("SpotContext")), jen.Id(l.id).String(),
	).Params(jen.Id(n.Ref), jen.Error()).Block(
		jen.If(jen.Id(l.sc).Op("==").Nil()).Block(
			jen.Return(jen.Id(n.Ref).Values(), qual(fmtErrorf).Call(jen.Lit("%w: "+n.Spawn+" needs a SpotContext"), sdkID("ErrInvalidArgument"))),
		),
		jen.If(jen.Id(l.err).Op(":=").Id(l.sc).Dot("Spawn").Call(jen.Id(l.ctx), jen.Op("&").Id(n.Desc), jen.Id(l.id)), jen.Id(l.err).Op("!=").Nil()).Block(
			jen.Return(jen.Id(n.Ref).Values(), jen.Id(l.err)),
		),
		jen.Return(refLit(n.Ref, jen.Id(l.sc).Dot("Client").Call(), "id", jen.Id(l.id)), jen.Nil()),
	)
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s moves the %s %s through %s into the User, Instance or Entry Spot %s, on whatever node\n"+
		"that Spot runs. A missing Instance Spot is created only when %s states create-intent\n"+
		"([sdk.InstanceIntent]). The %s keeps its state when its object implements [sdk.Relocatable];\n"+
		"otherwise it arrives empty. A failed move leaves it where it was.", n.Move, s.Name, l.id, l.c, l.to, l.to, s.Name)))
	e.f.Func().Id(n.Move).Params(
		jen.Id(l.ctx).Add(qual(contextContext)), jen.Id(l.c).Add(sdkID("Client")), jen.Id(l.id).String(), jen.Id(l.to).Add(sdkID("Target")),
		jen.Id(l.opts).Op("...").Add(sdkID("CallOption")),
	).Error().Block(
		jen.If(jen.Id(l.c).Op("==").Nil()).Block(
			jen.Return(qual(fmtErrorf).Call(jen.Lit("%w: "+n.Move+" needs a client"), sdkID("ErrInvalidArgument"))),
		),
		jen.Return(jen.Id(l.c).Dot("MoveActor").Call(jen.Id(l.ctx), target(jen.Id(l.id)), jen.Id(l.to), jen.Id(l.opts).Op("..."))),
	)
	e.idMethod(s, n.Ref)
	t := func() *jen.Statement { return target(jen.Id(l.r).Dot("id")) }
	for _, m := range s.Methods {
		e.refMethod(s, m, n.Ref, t)
	}
	e.closeMethod(s, n.Ref, t)
}

// withDesc attaches the type's descriptor to a target, so that a node that does not host the
// type can still decode its replies.
func withDesc(target *jen.Statement, n names) *jen.Statement {
	return target.Dot("WithDesc").Call(jen.Op("&").Id(n.Desc))
}

// refType renders a reference struct: a client and an address, field "id" or "node". Its
// doc is the generated text followed by the interface's doc.
func (e *emitter) refType(s *Interface, name, generated, addr string) {
	e.f.Line()
	e.f.Add(comment(doc(generated, s.Doc)))
	typ := jen.String()
	if addr == "node" {
		typ = sdkID("NodeID")
	}
	e.f.Type().Id(name).Struct(
		jen.Id("c").Add(sdkID("Client")),
		jen.Id(addr).Add(typ),
	)
}

// idMethod renders ID() on a reference with an id.
func (e *emitter) idMethod(s *Interface, recv string) {
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("ID returns the ID of the %s the reference addresses.", s.Name)))
	e.f.Func().Params(jen.Id(e.loc.r).Id(recv)).Id("ID").Params().String().Block(jen.Return(jen.Id(e.loc.r).Dot("id")))
}

// zeroRef renders the guard that turns a call on a zero reference into an error.
func (e *emitter) zeroRef(recv, method, ctor string, results ...jen.Code) *jen.Statement {
	err := qual(fmtErrorf).Call(jen.Lit("%w: "+method+" on a zero "+recv+" (make references with "+ctor+")"), sdkID("ErrInvalidArgument"))
	return jen.If(jen.Id(e.loc.r).Dot("c").Op("==").Nil()).Block(jen.Return(append(results, err)...))
}

// refMethod renders one interface method on a reference whose calls go to target(). The
// method's stable name is the method argument of sdk.Client.Call and Send.
func (e *emitter) refMethod(s *Interface, m *Method, recv string, target func() *jen.Statement) {
	e.invokeMethod(s, m, recv, "Call", "Send", target, "")
}

// invokeMethod renders one interface method on a reference: a request/reply method calls the
// client's method call, a one-way method its method send, each with ctx, to(), the method's
// stable name, the message and the call options. Its doc is the method's, or a generated
// line, followed by rule when that is not empty.
func (e *emitter) invokeMethod(s *Interface, m *Method, recv, call, send string, to func() *jen.Statement, rule string) {
	l := e.loc
	full := fullMethodConst(s, m)
	ctor := refCtor(s, recv)
	text := strings.TrimSpace(m.Doc)
	switch {
	case text != "":
	case s.Channel == sdk.ChannelFanout:
		text = fmt.Sprintf("%s publishes %s.%s.", m.Name, s.Name, m.Name)
	default:
		text = fmt.Sprintf("%s calls %s.%s.", m.Name, s.Name, m.Name)
	}
	if rule != "" {
		text += "\n\n" + rule
	}
	e.f.Line()
	e.f.Add(comment(text))
	if m.Reply == nil {
		e.f.Func().Params(jen.Id(l.r).Id(recv)).Id(m.Name).Params(
			jen.Id(l.ctx).Add(qual(contextContext)),
			jen.Id(l.msg).Op("*").Add(msgType(m.Request)),
			jen.Id(l.opts).Op("...").Add(sdkID("CallOption")),
		).Error().Block(
			e.zeroRef(recv, m.Name, ctor),
			jen.Return(jen.Id(l.r).Dot("c").Dot(send).Call(jen.Id(l.ctx), to(), jen.Lit(m.Name), jen.Id(l.msg), jen.Id(l.opts).Op("..."))),
		)
		return
	}
	e.f.Func().Params(jen.Id(l.r).Id(recv)).Id(m.Name).Params(
		jen.Id(l.ctx).Add(qual(contextContext)),
		jen.Id(l.req).Op("*").Add(msgType(m.Request)),
		jen.Id(l.opts).Op("...").Add(sdkID("CallOption")),
	).Params(jen.Op("*").Add(msgType(m.Reply)), jen.Error()).Block(
		e.zeroRef(recv, m.Name, ctor, jen.Nil()),
		jen.List(jen.Id(l.out), jen.Id(l.err)).Op(":=").Id(l.r).Dot("c").Dot(call).Call(jen.Id(l.ctx), to(), jen.Lit(m.Name), jen.Id(l.req), jen.Id(l.opts).Op("...")),
		jen.If(jen.Id(l.err).Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id(l.err))),
		jen.List(jen.Id(l.reply), jen.Id(l.ok)).Op(":=").Id(l.out).Assert(jen.Op("*").Add(msgType(m.Reply))),
		jen.If(jen.Op("!").Id(l.ok)).Block(
			jen.Return(jen.Nil(), qual(fmtErrorf).Call(jen.Lit("%w: %s replied %T, want "+e.msgString(m.Reply)), sdkID("ErrUnhandled"), jen.Id(full), jen.Id(l.out))),
		),
		jen.Return(jen.Id(l.reply), jen.Nil()),
	)
}

// closeMethod renders Close, an explicit close of a User or Instance Spot (D3) or an Actor.
func (e *emitter) closeMethod(s *Interface, recv string, target func() *jen.Statement) {
	l := e.loc
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("Close explicitly closes the %s: admission stops, queued work finishes, its OnClose\n"+
		"runs with [sdk.CloseExplicit], then its location is released. It never creates the %s.", s.Name, s.Name)))
	e.f.Func().Params(jen.Id(l.r).Id(recv)).Id("Close").Params(
		jen.Id(l.ctx).Add(qual(contextContext)),
		jen.Id(l.opts).Op("...").Add(sdkID("CallOption")),
	).Error().Block(
		e.zeroRef(recv, "Close", refCtor(s, recv)),
		jen.Return(jen.Id(l.r).Dot("c").Dot("CloseSpot").Call(jen.Id(l.ctx), target(), jen.Id(l.opts).Op("..."))),
	)
}

// refCtor names the constructor of the reference type recv, for error messages.
func refCtor(s *Interface, recv string) string {
	n := namesOf(s)
	switch {
	case n.Client != "":
		return n.Client
	case n.Publisher != "":
		return n.Publisher
	case recv == n.Intent:
		return n.Open
	case n.On != "":
		return n.On + " or " + n.Local
	}
	return n.Of
}

// refLit renders a reference literal: RoomRef{c: c, id: id}.
func refLit(typ string, c jen.Code, addrField string, addr jen.Code) *jen.Statement {
	return jen.Id(typ).Values(jen.Id("c").Op(":").Add(c), jen.Id(addrField).Op(":").Add(addr))
}
