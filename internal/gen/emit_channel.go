package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/zlink-go/zlink/sdk"
)

// A channel has no address: its reference holds the client alone, and the runtime chooses the
// server of each call (ClientServer) or delivers each publication to every subscriber (Fanout).
// The descriptor goes with every call, so that a node that serves no such channel can still
// decode the replies.

// channel renders everything generated for one channel.
func (e *emitter) channel(s *Interface) {
	e.channelConsts(s)
	e.channelDesc(s)
	switch s.Channel {
	case sdk.ChannelClientServer:
		e.registerServer(s)
		e.clientRef(s)
	case sdk.ChannelFanout:
		e.subscribe(s)
		e.publisherRef(s)
	}
}

// channelWord is what kind of channel s is, as the docs spell it: "ClientServer channel".
func channelWord(s *Interface) string { return s.Channel.String() + " channel" }

// channelConsts renders the channel name and the full method names.
func (e *emitter) channelConsts(s *Interface) {
	n := namesOf(s)
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s is the stable name of the %s %s.", n.TypeName, channelWord(s), s.Name)))
	e.f.Const().Id(n.TypeName).Op("=").Lit(s.TypeName)
	e.fullMethodNames(s, "channel")
}

// channelDesc renders the descriptor: topology, channel name and a dispatch table keyed by
// stable method names, like a Spot type's.
func (e *emitter) channelDesc(s *Interface) {
	n, l := namesOf(s), e.loc
	users := n.Register + " and " + n.Client
	if s.Channel == sdk.ChannelFanout {
		users = n.Subscribe + " and " + n.Publisher
	}
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s describes the %s %s to the runtime.\n"+
		"Its dispatch table is keyed by stable method names, never ordinals, so nodes of different\n"+
		"versions agree. %s use it.\n"+
		"It is for the generated code and the runtime: do not modify it, not even a copy.", n.Desc, channelWord(s), s.Name, users)))
	var methods []jen.Code
	for _, m := range s.Methods {
		methods = append(methods, e.methodDesc(s, m, l))
	}
	e.f.Var().Id(n.Desc).Op("=").Add(sdkID("ChannelDesc")).Add(block(
		field("Name", jen.Id(n.TypeName)),
		field("Kind", sdkID("Channel"+s.Channel.String())),
		field("Methods", jen.Index().Add(sdkID("MethodDesc")).Add(block(methods...))),
	))
}

// registerServer renders RegisterXServer: impl serves the channel's calls on the node. A nil
// registrar or server is an error, never a panic.
func (e *emitter) registerServer(s *Interface) {
	n, l := namesOf(s), e.loc
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s makes %s a server of the %s %s\n"+
		"on the node of %s: the channel's clients send each call to one Ready server, chosen by\n"+
		"weight, this node's own included. A process has at most one server per channel. opts\n"+
		"configure the server ([sdk.Weight], [sdk.ChannelQueue]).", n.Register, l.impl, channelWord(s), s.Name, l.r)))
	e.channelRegistration(s, n.Register, "RegisterServer", l.impl, "a server")
}

// subscribe renders SubscribeX: handler receives the channel's publications on the node. A nil
// registrar or handler is an error, never a panic.
func (e *emitter) subscribe(s *Interface) {
	n, l := namesOf(s), e.loc
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s makes %s a subscriber of the %s %s\n"+
		"on the node of %s: it receives every publication of the channel, from every publisher of\n"+
		"the mesh, at most once, in publish order per publisher. A process subscribes at most once\n"+
		"per channel. opts configure the subscriber ([sdk.ManualSubscriber], [sdk.ChannelQueue]).", n.Subscribe, l.handler, channelWord(s), s.Name, l.r)))
	e.channelRegistration(s, n.Subscribe, "Subscribe", l.handler, "a handler")
}

// channelRegistration renders the function fn that hands the object param to the registrar's
// method register, with the channel's descriptor; what names param in the nil error.
func (e *emitter) channelRegistration(s *Interface, fn, register, param, what string) {
	n, l := namesOf(s), e.loc
	e.f.Func().Id(fn).Params(
		jen.Id(l.r).Add(sdkID("Registrar")),
		jen.Id(param).Id(s.Name),
		jen.Id(l.opts).Op("...").Add(sdkID("ChannelOption")),
	).Error().Block(
		jen.If(jen.Id(l.r).Op("==").Nil().Op("||").Id(param).Op("==").Nil()).Block(
			jen.Return(qual(fmtErrorf).Call(jen.Lit("%w: "+fn+" needs a registrar and "+what), sdkID("ErrInvalidArgument"))),
		),
		jen.Return(jen.Id(l.r).Dot(register).Call(jen.Op("&").Id(n.Desc), jen.Id(param), jen.Id(l.opts).Op("..."))),
	)
}

// clientRef renders XClientRef and XClient: each call goes to one Ready server of the channel.
func (e *emitter) clientRef(s *Interface) {
	n, l := namesOf(s), e.loc
	e.channelRefType(s, n.Ref, fmt.Sprintf("%s calls the %s %s:\n"+
		"each call goes to one Ready server of the channel, chosen by weight; [sdk.Key] among a\n"+
		"call's options makes it sticky, sending the calls of one key to one server while the set of\n"+
		"Ready servers does not change. With no Ready server a call fails with [sdk.ErrNoReadyTarget].\n"+
		"[%s] makes one.", n.Ref, channelWord(s), s.Name, n.Client))
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a client of the %s channel through %s:\n"+
		"each call goes to one Ready server of the channel, chosen by weight; [sdk.Key] makes it sticky.", n.Client, s.Name, l.c)))
	e.channelRefCtor(n.Client, n.Ref)
	desc := func() *jen.Statement { return jen.Op("&").Id(n.Desc) }
	for _, m := range s.Methods {
		what := "The call goes"
		if m.Reply == nil {
			what = "The message goes"
		}
		e.invokeMethod(s, m, n.Ref, "CallChannel", "SendChannel", desc, fmt.Sprintf("%s to one Ready server of the %s channel, chosen by weight;\n"+
			"[sdk.Key] among %s makes it sticky.", what, s.Name, l.opts))
	}
}

// publisherRef renders XPublisherRef and XPublisher: each publication goes to every subscriber
// of the channel.
func (e *emitter) publisherRef(s *Interface) {
	n, l := namesOf(s), e.loc
	e.channelRefType(s, n.Ref, fmt.Sprintf("%s publishes on the %s %s:\n"+
		"each publication is delivered to every subscriber of the channel on every node, at most once,\n"+
		"in publish order per publisher. A subscriber that is not connected at the time of a\n"+
		"publication never gets it. [%s] makes one.", n.Ref, channelWord(s), s.Name, n.Publisher))
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s returns a publisher on the %s channel through %s:\n"+
		"each publication is delivered to every subscriber of the channel on every node, at most once,\n"+
		"in publish order per publisher.", n.Publisher, s.Name, l.c)))
	e.channelRefCtor(n.Publisher, n.Ref)
	desc := func() *jen.Statement { return jen.Op("&").Id(n.Desc) }
	for _, m := range s.Methods {
		// Every method of a Fanout channel is one-way: nothing calls, everything publishes.
		e.invokeMethod(s, m, n.Ref, "", "Publish", desc, fmt.Sprintf("The publication is delivered to every subscriber of the %s channel on every node,\n"+
			"at most once, in publish order per publisher.", s.Name))
	}
}

// channelRefType renders a channel's reference struct: the client alone. Its doc is the
// generated text followed by the interface's doc.
func (e *emitter) channelRefType(s *Interface, name, generated string) {
	e.f.Line()
	e.f.Add(comment(doc(generated, s.Doc)))
	e.f.Type().Id(name).Struct(jen.Id("c").Add(sdkID("Client")))
}

// channelRefCtor renders the constructor fn of the channel reference ref.
func (e *emitter) channelRefCtor(fn, ref string) {
	l := e.loc
	e.f.Func().Id(fn).Params(jen.Id(l.c).Add(sdkID("Client"))).Id(ref).Block(
		jen.Return(jen.Id(ref).Values(jen.Id("c").Op(":").Id(l.c))),
	)
}
