package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/zlink-go/zlink/sdk"
)

// spot renders everything generated for one Spot or Actor type.
func (e *emitter) spot(s *Interface) {
	e.consts(s)
	e.desc(s)
	e.register(s)
	switch s.Kind {
	case sdk.KindInstance:
		e.instanceRefs(s)
	case sdk.KindUser:
		e.userRef(s)
	case sdk.KindEntry:
		e.entryRef(s)
	case sdk.KindActor:
		e.actorRef(s)
	}
}

// kindName is the kind as the docs spell it: "Instance", "Actor".
func kindName(s *Interface) string { return s.Kind.String() }

// typeWord is what kind of type s is, as the docs spell it: "Instance Spot", "Actor".
func typeWord(s *Interface) string {
	if s.Kind == sdk.KindActor {
		return "Actor"
	}
	return kindName(s) + " Spot"
}

// consts renders the stable type name and the full method names.
func (e *emitter) consts(s *Interface) {
	n := namesOf(s)
	e.f.Line()
	of := typeWord(s) + " " + s.Name
	if s.Kind == sdk.KindActor {
		of = "Actor type " + s.Name
	}
	e.f.Add(comment(fmt.Sprintf("%s is the stable type name of the %s.", n.TypeName, of)))
	e.f.Const().Id(n.TypeName).Op("=").Lit(s.TypeName)
	e.fullMethodNames(s, "type")
}

// fullMethodNames renders the full method names of s, "/<part>/<method>", part being the
// stable name: "type" or "channel".
func (e *emitter) fullMethodNames(s *Interface, part string) {
	if len(s.Methods) == 0 {
		return
	}
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("The full method names of %s, \"/<%s>/<method>\" as [sdk.FullMethodName] makes them.", s.Name, part)))
	e.f.Const().DefsFunc(func(g *jen.Group) {
		for _, m := range s.Methods {
			g.Id(fullMethodConst(s, m)).Op("=").Lit(sdk.FullMethodName(s.TypeName, m.Name))
		}
	})
}

// desc renders the descriptor: kind, stable name and a dispatch table keyed by stable method
// names, never ordinals.
func (e *emitter) desc(s *Interface) {
	n, l := namesOf(s), e.loc
	e.f.Line()
	e.f.Add(comment(fmt.Sprintf("%s describes the %s type %s to the runtime. Its dispatch table is keyed by\n"+
		"stable method names, never ordinals, so nodes of different versions agree. %s registers it.\n"+
		"It is for the generated code and the runtime: do not modify it, not even a copy.", n.Desc, typeWord(s), s.Name, n.Register)))
	kvs := []jen.Code{
		field("Name", jen.Id(n.TypeName)),
		field("Kind", sdkID("Kind"+kindName(s))),
	}
	if s.Idle > 0 {
		kvs = append(kvs, field("IdleTimeout", duration(s.Idle)))
	}
	var methods []jen.Code
	for _, m := range s.Methods {
		methods = append(methods, e.methodDesc(s, m, l))
	}
	kvs = append(kvs, field("Methods", jen.Index().Add(sdkID("MethodDesc")).Add(block(methods...))))
	e.f.Var().Id(n.Desc).Op("=").Add(sdkID("SpotDesc")).Add(block(kvs...))
}

// methodDesc renders one entry of the dispatch table.
func (e *emitter) methodDesc(s *Interface, m *Method, l locals) jen.Code {
	newMsg := func(msg *Message) *jen.Statement {
		return jen.Func().Params().Add(qual(protoMessage)).Block(jen.Return(jen.New(msgType(msg))))
	}
	kvs := []jen.Code{field("Name", jen.Lit(m.Name))}
	if m.Reply == nil {
		kvs = append(kvs, field("OneWay", jen.True()))
	}
	kvs = append(kvs, field("NewRequest", newMsg(m.Request)))
	if m.Reply != nil {
		kvs = append(kvs, field("NewReply", newMsg(m.Reply)))
	}
	body := []jen.Code{
		jen.List(jen.Id(l.s), jen.Id(l.ok)).Op(":=").Id(l.impl).Assert(jen.Id(s.Name)),
		jen.If(jen.Op("!").Id(l.ok)).Block(
			jen.Return(jen.Nil(), qual(fmtErrorf).Call(jen.Lit("%w: %T does not implement "+s.Name), sdkID("ErrUnhandled"), jen.Id(l.impl))),
		),
		jen.List(jen.Id(l.in), jen.Id(l.ok)).Op(":=").Id(l.req).Assert(jen.Op("*").Add(msgType(m.Request))),
		jen.If(jen.Op("!").Id(l.ok)).Block(
			jen.Return(jen.Nil(), qual(fmtErrorf).Call(jen.Lit("%w: %s takes "+e.msgString(m.Request)+", got %T"),
				sdkID("ErrInvalidArgument"), jen.Id(fullMethodConst(s, m)), jen.Id(l.req))),
		),
	}
	call := jen.Id(l.s).Dot(m.Name).Call(jen.Id(l.ctx), jen.Id(l.in))
	if m.Reply == nil {
		body = append(body, jen.Return(jen.Nil(), call))
	} else {
		body = append(body,
			jen.List(jen.Id(l.out), jen.Id(l.err)).Op(":=").Add(call),
			jen.If(jen.Id(l.err).Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id(l.err))),
			jen.Return(jen.Id(l.out), jen.Nil()),
		)
	}
	kvs = append(kvs, field("Invoke", jen.Func().Params(
		jen.Id(l.impl).Any(), jen.Id(l.ctx).Add(qual(contextContext)), jen.Id(l.req).Add(qual(protoMessage)),
	).Params(qual(protoMessage), jen.Error()).Block(body...)))
	return block(kvs...)
}

// register renders RegisterX: the factory is wrapped so the runtime gets an any, and a nil
// registrar, factory or object is an error, never a panic. A Spot type registers with
// RegisterSpot and a factory of sdk.SpotContext; an Actor type with RegisterActor and a factory
// of sdk.ActorContext.
func (e *emitter) register(s *Interface) {
	n, l := namesOf(s), e.loc
	e.f.Line()
	opts := "opts configure the type."
	if s.Kind == sdk.KindInstance {
		opts = "opts configure the type ([sdk.WithIdleTimeout])."
	}
	made, registerFunc, ctxType, param := "each time one is activated", "RegisterSpot", "SpotContext", l.sc
	if s.Kind == sdk.KindActor {
		made, registerFunc, ctxType, param = "each time one is spawned or arrives by a move", "RegisterActor", "ActorContext", l.ac
	}
	e.f.Add(comment(fmt.Sprintf("%s registers the %s type %s with %s. %s makes the object that serves a\n"+
		"%s %s; %s", n.Register, typeWord(s), s.Name, l.r, n.Factory, s.Name, made, opts)))
	e.f.Func().Id(n.Register).Params(
		jen.Id(l.r).Add(sdkID("Registrar")),
		jen.Id(n.Factory).Func().Params(sdkID(ctxType)).Params(jen.Id(s.Name), jen.Error()),
		jen.Id(l.opts).Op("...").Add(sdkID("TypeOption")),
	).Error().Block(
		jen.If(jen.Id(l.r).Op("==").Nil().Op("||").Id(n.Factory).Op("==").Nil()).Block(
			jen.Return(qual(fmtErrorf).Call(jen.Lit("%w: "+n.Register+" needs a registrar and a factory"), sdkID("ErrInvalidArgument"))),
		),
		jen.Return(jen.Id(l.r).Dot(registerFunc).Call(
			jen.Op("&").Id(n.Desc),
			jen.Func().Params(jen.Id(param).Add(sdkID(ctxType))).Params(jen.Any(), jen.Error()).Block(
				jen.List(jen.Id(l.v), jen.Id(l.err)).Op(":=").Id(n.Factory).Call(jen.Id(param)),
				jen.If(jen.Id(l.err).Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id(l.err))),
				jen.If(jen.Id(l.v).Op("==").Nil()).Block(
					jen.Return(jen.Nil(), qual(fmtErrorf).Call(jen.Lit("%w: the factory of %s returned nil"), sdkID("ErrInvalidArgument"), jen.Id(n.TypeName))),
				),
				jen.Return(jen.Id(l.v), jen.Nil()),
			),
			jen.Id(l.opts).Op("..."),
		)),
	)
}

// block renders a composite literal's elements one per line, in the order given (jen.Dict
// would sort the fields by name).
func block(items ...jen.Code) *jen.Statement {
	return jen.Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, items...)
}

// field renders one "Name: value" element.
func field(name string, v jen.Code) *jen.Statement { return jen.Id(name).Op(":").Add(v) }
