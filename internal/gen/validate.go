package gen

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"

	"github.com/zlink-go/zlink/sdk"
)

// protoreflectPath is the package of protoreflect.Message, the result of the ProtoReflect
// method that makes a type a protobuf message (proto.Message).
const protoreflectPath = "google.golang.org/protobuf/reflect/protoreflect"

// validator checks a package's model: method shapes, messages, stable names and generated
// names. It sets each method's Request and Reply, and records the names of their packages in
// the model's PackageNames.
type validator struct {
	fset *token.FileSet
	errs *errorCollector
	// rel renders a position for a message, relative to the run's directory.
	rel func(token.Position) string
	// place is where a problem found at pos, in a declaration that the embeddings via lead to,
	// is reported (sources.userAt); nil: at pos.
	place func(pos token.Position, via []token.Position) token.Position
}

// at is where a problem of m found at pos is reported: pos when the user can edit its file,
// else the last embedding that brings m in that the user can (a method declared in another
// module or the standard library is fixed there).
func (v *validator) at(m *Method, pos token.Position) token.Position {
	if v.place == nil {
		return pos
	}
	return v.place(pos, m.Via)
}

// pkg validates every Spot and Actor type and every channel of p.
func (v *validator) pkg(p *Package) {
	qual := func(other *types.Package) string {
		if other == p.Types {
			return ""
		}
		return other.Name()
	}
	var spots []*Interface
	for _, f := range p.Files {
		spots = append(spots, f.Spots...)
	}
	for _, s := range spots {
		if s.IsChannel() && len(s.Methods) == 0 {
			v.errs.add(s.DirectivePos, s.Name, "a channel needs at least one method: the runtime refuses to register one without")
		}
		for _, m := range s.Methods {
			v.method(p, s, m, qual)
		}
		v.refCollisions(s)
	}
	v.stableNames(spots)
	v.generatedNames(p, spots)
	if len(spots) > 0 {
		v.predeclared(p)
	}
}

// predeclared reports package-level declarations of the predeclared identifiers that the
// generated code uses (var nil = 0, type string = []byte): in the package, the generated
// code would refer to them instead. An alias of the predeclared type itself (type any =
// interface{}) changes nothing the generated code means and is accepted.
func (v *validator) predeclared(p *Package) {
	for _, name := range predeclaredUsed {
		universe := types.Universe.Lookup(name)
		if obj := p.Types.Scope().Lookup(name); obj != nil && !sameAsPredeclared(obj, universe) {
			v.errs.add(v.position(obj), "", "the package declares %s, which hides the predeclared %s that the generated code uses; rename it", name, name)
			continue
		}
		if i := slices.IndexFunc(p.Unseen, func(d Decl) bool { return d.Name == name && !d.Predeclared }); i >= 0 {
			v.errs.add(p.Unseen[i].Pos, "", "the package declares %s, which hides the predeclared %s that the generated code uses; rename it", name, name)
		}
	}
}

// sameAsPredeclared reports whether obj is a type alias of the type of universe, the
// predeclared object of its name.
func sameAsPredeclared(obj, universe types.Object) bool {
	tn, ok := obj.(*types.TypeName)
	if !ok || !tn.IsAlias() {
		return false
	}
	if _, ok := universe.(*types.TypeName); !ok {
		return false
	}
	return types.Identical(types.Unalias(tn.Type()), types.Unalias(universe.Type()))
}

// method checks one method's shape (DESIGN §3):
//
//	M(ctx context.Context, req *T) (*R, error)            request/reply
//	M(ctx context.Context, msg *T) error  //zlink:send    one-way
//
// Every method of a Fanout channel is one-way, with //zlink:send or without.
func (v *validator) method(p *Package, s *Interface, m *Method, qual types.Qualifier) {
	where := s.Name + "." + m.Name
	fail := func(pos token.Position, format string, args ...any) { v.errs.add(v.at(m, pos), where, format, args...) }
	if !ast.IsExported(m.Name) {
		fail(m.Pos, "unexported method %s: %s methods must be exported", m.Name, objectWord(s))
		return
	}
	fanout := s.Channel == sdk.ChannelFanout
	want := "want (ctx context.Context, req *T) (*R, error), or (ctx context.Context, msg *T) error with //zlink:send"
	switch {
	case fanout:
		want = "want (ctx context.Context, msg *T) error, as every method of a Fanout channel is one-way"
	case m.Send:
		want = "want (ctx context.Context, msg *T) error for a //zlink:send method"
	}
	ok := true
	if m.Variadic {
		fail(m.Params[len(m.Params)-1].Pos, "variadic parameters are not supported: %s", want)
		ok = false
	} else if len(m.Params) != 2 {
		fail(m.Pos, "%s: %s", count(len(m.Params), "parameter"), want)
		ok = false
	}
	if len(m.Params) > 0 && !isContext(m.Params[0].Type) {
		fail(m.Params[0].TypePos, "the first parameter must be context.Context, got %s", types.TypeString(m.Params[0].Type, qual))
		ok = false
	}
	var req *Message
	if !m.Variadic && len(m.Params) == 2 {
		what := "request"
		if m.Send {
			what = "message"
		}
		req = v.message(p, m, m.Params[1], what, where, qual)
		ok = ok && req != nil
	}

	res := m.Results
	switch {
	case len(res) == 0:
		fail(m.Pos, "missing error result: %s", want)
		return
	case !isError(res[len(res)-1].Type):
		fail(res[len(res)-1].TypePos, "the last result must be error, got %s", types.TypeString(res[len(res)-1].Type, qual))
		return
	case len(res) > 2:
		fail(m.Pos, "%s: %s", count(len(res), "result"), want)
		return
	}
	var reply *Message
	switch {
	case fanout && len(res) == 2:
		fail(res[0].Pos, "%s returns a reply, but %s is a Fanout channel, whose methods are one-way: want (ctx context.Context, msg *T) error, got (%s, error)", m.Name, s.Name, types.TypeString(res[0].Type, qual))
		return
	case m.Send && len(res) == 2:
		fail(res[0].Pos, "a //zlink:send method is one-way and returns no reply: want error, got (%s, error)", types.TypeString(res[0].Type, qual))
		return
	case !m.Send && len(res) == 1:
		fail(m.Pos, "a method that returns only error is one-way: mark it //zlink:send, or return (*R, error)")
		return
	case len(res) == 2:
		reply = v.message(p, m, res[0], "reply", where, qual)
		ok = ok && reply != nil
	}
	if ok {
		m.Request, m.Reply = req, reply
	}
}

// message checks that param, of m, is a pointer to a named protobuf message type, and records
// the name of the message's package in pkg.
func (v *validator) message(pkg *Package, m *Method, param *Param, what, where string, qual types.Qualifier) *Message {
	got := types.TypeString(param.Type, qual)
	fail := func(why string) *Message {
		v.errs.add(v.at(m, param.TypePos), where, "the %s must be a pointer to a protobuf message%s, got %s", what, why, got)
		return nil
	}
	ptr, ok := types.Unalias(param.Type).(*types.Pointer)
	if !ok {
		return fail("")
	}
	named, ok := types.Unalias(ptr.Elem()).(*types.Named)
	if !ok {
		return fail("")
	}
	if named.TypeArgs().Len() > 0 {
		return fail(" (not an instance of a generic type)")
	}
	if !isProtoMessage(ptr) {
		return fail(" (a type with a ProtoReflect() protoreflect.Message method)")
	}
	obj := named.Obj()
	if obj.Pkg() == nil {
		return fail("")
	}
	// The generated code names the message type in the Spot's package: an alias may lead to
	// a type the package cannot name, and an embedded interface to a package it cannot import.
	if obj.Pkg() != pkg.Types {
		if !obj.Exported() {
			v.errs.add(v.at(m, param.TypePos), where, "the %s %s is a pointer to %s, which package %s does not export: the generated code cannot name it", what, got, obj.Name(), obj.Pkg().Name())
			return nil
		}
		if !canImport(string(pkg.Path), obj.Pkg().Path()) {
			v.errs.add(v.at(m, param.TypePos), where, "the %s %s is a type of package %s, which is internal: package %s cannot import it", what, got, obj.Pkg().Path(), pkg.Name)
			return nil
		}
	}
	path := GoImportPath(obj.Pkg().Path())
	pkg.PackageNames[path] = GoPackageName(obj.Pkg().Name())
	return &Message{GoIdent: path.Ident(obj.Name())}
}

// canImport reports whether the package from may import the package to by the go command's
// rule for internal packages: a path with an element "internal" may be imported only from
// within the tree rooted at the parent of its last "internal" directory.
func canImport(from, to string) bool {
	var parent string
	switch {
	case strings.HasSuffix(to, "/internal"):
		parent = strings.TrimSuffix(to, "/internal")
	case strings.Contains(to, "/internal/"):
		parent = to[:strings.LastIndex(to, "/internal/")]
	case to == "internal" || strings.HasPrefix(to, "internal/"):
		return false // the standard library's own
	default:
		return true
	}
	return from == parent || strings.HasPrefix(from, parent+"/")
}

// isProtoMessage reports whether t implements proto.Message: it has the method ProtoReflect()
// protoreflect.Message, declared or promoted through embedded values. One promoted through an
// embedded pointer does not count: in a new message that pointer is nil, and decoding into it
// would write through it.
func isProtoMessage(t types.Type) bool {
	obj, index, _ := types.LookupFieldOrMethod(t, true, nil, "ProtoReflect")
	fn, ok := obj.(*types.Func)
	if !ok || throughEmbeddedPointer(t, index) {
		return false
	}
	sig := fn.Type().(*types.Signature)
	if sig.Params().Len() != 0 || sig.Results().Len() != 1 {
		return false
	}
	return isNamed(sig.Results().At(0).Type(), protoreflectPath, "Message")
}

// throughEmbeddedPointer reports whether the path index, from t to a promoted method, passes
// through an embedded field of pointer or interface type: one that is nil in a new value.
func throughEmbeddedPointer(t types.Type, index []int) bool {
	for _, i := range index[:max(len(index)-1, 0)] {
		if p, ok := types.Unalias(t).(*types.Pointer); ok {
			t = p.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok || i >= st.NumFields() {
			return true
		}
		t = st.Field(i).Type()
		if _, ok := types.Unalias(t).(*types.Pointer); ok || types.IsInterface(t) {
			return true
		}
	}
	return false
}

func isContext(t types.Type) bool { return isNamed(t, "context", "Context") }

func isError(t types.Type) bool { return types.Identical(t, types.Universe.Lookup("error").Type()) }

func isNamed(t types.Type, path, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == path && obj.Name() == name
}

// refCollisions reports interface methods named like a method the generated references have.
func (v *validator) refCollisions(s *Interface) {
	reserved := refMethods(s)
	for _, m := range s.Methods {
		if slices.Contains(reserved, m.Name) {
			v.errs.add(v.at(m, m.Pos), s.Name+"."+m.Name, "the method name %s collides with the generated %s.%s; rename the method", m.Name, namesOf(s).Ref, m.Name)
		}
	}
}

// stableNames reports two Spot or Actor types of one package with one stable type name, and
// two channels of one package with one channel name. Type names and channel names are apart:
// the runtime registers types and channels separately.
func (v *validator) stableNames(spots []*Interface) {
	typeNames, channelNames := map[string]*Interface{}, map[string]*Interface{}
	for _, s := range spots {
		first := typeNames
		if s.IsChannel() {
			first = channelNames
		}
		prev, dup := first[s.TypeName]
		switch {
		case dup && s.IsChannel():
			v.errs.add(s.DirectivePos, s.Name, "the channel name %q is also the name of the channel %s (%s); channel names must be unique", s.TypeName, prev.Name, v.rel(prev.DirectivePos))
		case dup:
			v.errs.add(s.DirectivePos, s.Name, "the stable type name %q is also the name of %s (%s); stable names must be unique", s.TypeName, prev.Name, v.rel(prev.DirectivePos))
		default:
			first[s.TypeName] = s
		}
	}
}

// generatedNames reports generated names that collide with names the package declares, or
// with each other.
func (v *validator) generatedNames(p *Package, spots []*Interface) {
	scope := p.Types.Scope()
	unseen := map[string]Decl{}
	for _, d := range p.Unseen {
		if _, dup := unseen[d.Name]; !dup {
			unseen[d.Name] = d
		}
	}
	owner := map[string]*Interface{}
	for _, s := range spots {
		for _, name := range topLevel(s) {
			if obj := scope.Lookup(name); obj != nil {
				v.errs.add(s.Pos, s.Name, "the generated name %s collides with %s declared at %s; rename one of them", name, describeObj(obj), v.rel(v.position(obj)))
			} else if d, ok := unseen[name]; ok {
				v.errs.add(s.Pos, s.Name, "the generated name %s collides with the %s %s declared at %s; rename one of them", name, d.Kind, name, v.rel(d.Pos))
			}
			if prev, dup := owner[name]; dup && prev != s {
				v.errs.add(s.Pos, s.Name, "the generated name %s is also generated for %s (%s); rename one of them", name, prev.Name, v.rel(prev.Pos))
				continue
			}
			owner[name] = s
		}
	}
}

// position returns where a package-level object is declared.
func (v *validator) position(obj types.Object) token.Position { return v.fset.Position(obj.Pos()) }

// describeObj names what obj is: "the type RoomRef", "the func OpenRoom".
func describeObj(obj types.Object) string {
	kind := "the name"
	switch obj.(type) {
	case *types.TypeName:
		kind = "the type"
	case *types.Func:
		kind = "the func"
	case *types.Var:
		kind = "the var"
	case *types.Const:
		kind = "the const"
	}
	return fmt.Sprintf("%s %s", kind, strings.TrimSpace(obj.Name()))
}

// count renders "1 parameter", "3 parameters".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
