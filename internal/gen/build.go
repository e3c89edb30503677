package gen

import (
	"bytes"
	"cmp"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/zlink-go/zlink/sdk"
)

// builder turns loaded packages into the model: it reads the directives, finds the annotated
// interfaces and flattens their methods. It reports misplaced and malformed directives; the
// method shapes are validate's concern.
type builder struct {
	fset *token.FileSet
	errs *errorCollector
	dirs directiveParser
	// decls are the type declarations of the loaded packages.
	decls map[*types.TypeName]typeDecl
	// extFset reads the files of the packages not loaded: _test.go files, and sources.
	extFset *token.FileSet
	sources *sources
}

func newBuilder(fset *token.FileSet, errs *errorCollector, pkgs []*packages.Package) *builder {
	b := &builder{
		fset:    fset,
		errs:    errs,
		dirs:    directiveParser{fset: fset, errs: errs},
		decls:   map[*types.TypeName]typeDecl{},
		extFset: token.NewFileSet(),
	}
	b.sources = newSources(b.extFset)
	for _, p := range pkgs {
		for _, f := range slices.Concat(p.GoFiles, p.IgnoredFiles) {
			b.sources.owned[filepath.Dir(f)] = true // a loaded package's directory: the user's
		}
		if p.TypesInfo == nil {
			continue
		}
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, s := range gd.Specs {
					ts := s.(*ast.TypeSpec)
					if obj, ok := p.TypesInfo.Defs[ts.Name].(*types.TypeName); ok {
						b.decls[obj] = typeDecl{spec: ts, fset: fset, info: p.TypesInfo}
					}
				}
			}
		}
	}
	return b
}

// pkg builds the model of one loaded package.
func (b *builder) pkg(p *packages.Package) *Package {
	path, name := GoImportPath(p.PkgPath), GoPackageName(p.Name)
	m := &Package{Types: p.Types, Name: name, Path: path, PackageNames: map[GoImportPath]GoPackageName{path: name}}
	if p.Types != nil {
		m.Declared = p.Types.Scope().Names()
	}
	for _, f := range p.Syntax {
		name, cgo, ok := sourceName(b.fset, p, f)
		if !ok {
			continue
		}
		if isGenerated(name) {
			m.Generated = append(m.Generated, name)
			continue
		}
		// Read from the source itself: for a cgo file, f is cgo's output.
		src, err := os.ReadFile(name)
		if err != nil {
			b.errs.add(b.fset.Position(f.Package), "", "reading the file's build constraint: %v", err)
			continue
		}
		constraint := outputConstraint(name, buildConstraint(src), cgo)
		if mf := b.file(p, f, name, constraint); mf != nil {
			m.Files = append(m.Files, mf)
		}
	}
	b.testDirectives(p)
	if len(m.Files) > 0 {
		m.Unseen = b.unseen(p)
		for _, d := range m.Unseen {
			m.Declared = append(m.Declared, d.Name)
		}
		slices.Sort(m.Declared)
		m.Declared = slices.Compact(m.Declared)
	}
	return m
}

// ignoredByGo reports whether the go command leaves out a file of this name.
func ignoredByGo(name string) bool {
	return strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".")
}

// testDirectives reports the directives in the _test.go files of p's directory: zlinkgen reads only a package's other files, so an interface
// annotated there would silently get no generated code.
func (b *builder) testDirectives(p *packages.Package) {
	if len(p.GoFiles) == 0 {
		return
	}
	dir := filepath.Dir(p.GoFiles[0])
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), "_test.go") || ignoredByGo(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		src, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(src, []byte("zlink")) {
			continue
		}
		f, err := parser.ParseFile(b.extFset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil || (f.Name.Name != p.Name && f.Name.Name != p.Name+"_test") {
			continue
		}
		for _, g := range f.Comments {
			for _, d := range directivesOf(g) {
				b.errs.add(b.extFset.Position(d.comment.Pos()), "", "//zlink:%s in a _test.go file: zlinkgen reads only the package's other files; move the interface to one of them", d.name)
			}
		}
	}
}

// unseen returns the package-level declarations of the .go files in p's directory that
// belong to p but were not type-checked: its _test.go files of package p (not those of the
// external test package), and its files that build constraints leave out. Files zlinkgen
// generated, files that do not parse and files that no build includes (//go:build ignore)
// are skipped.
func (b *builder) unseen(p *packages.Package) []Decl {
	dir := p.Dir
	if len(p.GoFiles) > 0 {
		dir = filepath.Dir(p.GoFiles[0])
	}
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var decls []Decl
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || ignoredByGo(e.Name()) || slices.Contains(p.GoFiles, path) || isGenerated(path) {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if x := buildConstraint(src); x != nil && !canHold(x) {
			continue
		}
		f, err := parser.ParseFile(b.extFset, path, src, parser.SkipObjectResolution)
		if err != nil || f.Name.Name != p.Name {
			continue
		}
		add := func(id *ast.Ident, kind string, predeclared bool) {
			if id.Name != "_" && id.Name != "init" {
				decls = append(decls, Decl{Name: id.Name, Kind: kind, Pos: b.extFset.Position(id.Pos()), Predeclared: predeclared})
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name, "func", false)
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						add(sp.Name, "type", isAnyAlias(sp))
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							add(n, d.Tok.String(), false)
						}
					}
				}
			}
		}
	}
	return decls
}

// isAnyAlias reports whether ts declares any as an alias of an empty interface literal or of
// any itself, as a shim for Go before 1.18 does: type any = interface{}.
func isAnyAlias(ts *ast.TypeSpec) bool {
	if ts.Name.Name != "any" || !ts.Assign.IsValid() || ts.TypeParams != nil {
		return false
	}
	switch t := ts.Type.(type) {
	case *ast.InterfaceType:
		return t.Methods == nil || len(t.Methods.List) == 0
	case *ast.Ident:
		return t.Name == "any"
	}
	return false
}

// sourceName returns the path of the source file that f, one of p's parsed files, was made
// from, and whether cgo made it: go/packages parses the files the compiler sees, and for a
// file that imports "C" that is cgo's output in the build cache, whose //line directives
// name the source. ok is false for a file that has no source of p (cgo's own declarations)
// and for one without a package clause (an empty file), whose error the loader reports.
func sourceName(fset *token.FileSet, p *packages.Package, f *ast.File) (name string, cgo, ok bool) {
	tf := fset.File(f.FileStart)
	if tf == nil || !f.Package.IsValid() {
		return "", false, false
	}
	if name = tf.Name(); slices.Contains(p.GoFiles, name) {
		return name, false, true
	}
	if name = fset.Position(f.Package).Filename; slices.Contains(p.GoFiles, name) {
		return name, true, true
	}
	return "", false, false
}

// file reads the directives of one input file and builds its Spot, Actor and channel
// interfaces. constraint is the //go:build line of its output.
func (b *builder) file(p *packages.Package, f *ast.File, name, constraint string) *File {
	handled := map[*ast.Comment]bool{}
	out := &File{Source: name, Out: outPath(name), BuildConstraint: constraint}

	// Directives on methods of interfaces: //zlink:send, wherever the interface is.
	var typeName string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeSpec:
			typeName = n.Name.Name
		case *ast.InterfaceType:
			for _, field := range n.Methods.List {
				if len(field.Names) == 0 {
					continue
				}
				where := field.Names[0].Name
				if typeName != "" {
					where = typeName + "." + where
				}
				b.nearDirectives(field.Doc)
				for _, d := range directivesOf(field.Doc) {
					handled[d.comment] = true
					if !b.dirs.known(d, where) {
						continue
					}
					switch d.name {
					case "send":
						b.dirs.send(d, where)
					case "spot", "actor", "server", "fanout":
						b.errs.add(b.dirs.pos(d, 0), where, "//zlink:%s belongs on an interface type, not on a method", d.name)
					}
				}
			}
		}
		return true
	})

	// Directives on type declarations: //zlink:spot, //zlink:actor, //zlink:server and
	// //zlink:fanout.
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, s := range gd.Specs {
			ts := s.(*ast.TypeSpec)
			docs := []*ast.CommentGroup{ts.Doc}
			if len(gd.Specs) == 1 {
				docs = append(docs, gd.Doc)
			}
			var spots []directive
			for _, g := range docs {
				b.nearDirectives(g)
				for _, d := range directivesOf(g) {
					handled[d.comment] = true
					if !b.dirs.known(d, ts.Name.Name) {
						continue
					}
					switch d.name {
					case "spot", "actor", "server", "fanout":
						spots = append(spots, d)
					case "send":
						b.errs.add(b.dirs.pos(d, 0), ts.Name.Name, "//zlink:send belongs on a method of a Spot, Actor or channel interface, not on a type")
					}
				}
			}
			if len(spots) == 0 {
				continue
			}
			doc := ts.Doc
			if doc == nil && len(gd.Specs) == 1 {
				doc = gd.Doc
			}
			if it := b.spot(p, ts, doc, spots); it != nil {
				out.Spots = append(out.Spots, it)
			}
		}
	}

	// Whatever is left sits where no directive belongs.
	for _, g := range f.Comments {
		for _, d := range directivesOf(g) {
			if handled[d.comment] || !b.dirs.known(d, "") {
				continue
			}
			b.errs.add(b.dirs.pos(d, 0), "", "misplaced //zlink:%s: directives go in the doc comment of an interface type (spot, actor, server, fanout) or of an interface method (send)", d.name)
		}
	}
	if len(out.Spots) == 0 {
		return nil
	}
	return out
}

// nearDirectives reports the comments of g, the doc comment of a type or of an interface's
// method, written like a directive that is not read as one, such as "// zlink:spot instance":
// the directive would be silently missing. Comments elsewhere are prose.
func (b *builder) nearDirectives(g *ast.CommentGroup) {
	if g == nil {
		return
	}
	for _, c := range g.List {
		if m := nearDirective.FindStringSubmatch(c.Text); m != nil && !strings.HasPrefix(c.Text, directivePrefix) {
			b.errs.add(b.fset.Position(c.Pos()), "", "%q is not read as a directive: write //zlink:%s, with no space and as a line comment", firstLine(c.Text), m[1])
		}
	}
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// declares is what a directive on an interface makes it, for messages: the thing ("a Spot
// type", "a Fanout channel") and the word for its interface ("a Spot", "a channel").
func declares(d directive) (thing, iface string) {
	switch d.name {
	case "actor":
		return "an Actor type", "an Actor"
	case "server":
		return "a ClientServer channel", "a channel"
	case "fanout":
		return "a Fanout channel", "a channel"
	}
	return "a Spot type", "a Spot"
}

// spot builds the Interface of a type declaration annotated //zlink:spot, //zlink:actor,
// //zlink:server or //zlink:fanout, or reports why it cannot be one.
func (b *builder) spot(p *packages.Package, ts *ast.TypeSpec, doc *ast.CommentGroup, spots []directive) *Interface {
	name := ts.Name.Name
	pos := b.fset.Position(ts.Name.Pos())
	first := spots[0]
	thing, what := declares(first)
	for _, extra := range spots[1:] {
		if extra.name == first.name {
			b.errs.add(b.dirs.pos(extra, 0), name, "more than one //zlink:%s on one interface", extra.name)
		} else {
			other, _ := declares(extra)
			b.errs.add(b.dirs.pos(extra, 0), name, "//zlink:%s after //zlink:%s: an interface is %s or %s, not both", extra.name, first.name, thing, other)
		}
	}
	var (
		sd spotDirective
		cd channelDirective
	)
	if _, isChannel := channelKinds[first.name]; isChannel {
		cd, _ = b.dirs.channel(first, name)
	} else {
		sd, _ = b.dirs.spot(first, name)
	}
	switch {
	case ts.Assign.IsValid():
		b.errs.add(pos, name, "//zlink:%s is on a type alias; declare the interface itself", first.name)
		return nil
	case ts.TypeParams != nil && len(ts.TypeParams.List) > 0:
		b.errs.add(pos, name, "a generic interface cannot be %s: its methods need concrete message types", thing)
		return nil
	}
	// An interface is written as a literal, in parentheses or not, or defined from another
	// interface (type Lobby Room), whose methods it then has as if it embedded it.
	expr := ast.Unparen(ts.Type)
	it, literal := expr.(*ast.InterfaceType)
	obj, _ := p.TypesInfo.Defs[ts.Name].(*types.TypeName)
	if !literal {
		if !b.definedFromInterface(obj, p.TypesInfo.TypeOf(expr), expr, first, pos, name) {
			return nil
		}
	}
	if !ast.IsExported(name) {
		b.errs.add(pos, name, "%s interface must be exported: the API generated for it is", what)
		return nil
	}
	if obj == nil {
		return nil // the type checker failed; its errors say why
	}
	iface, _ := obj.Type().Underlying().(*types.Interface)
	if iface == nil {
		return nil
	}
	if !iface.IsMethodSet() {
		b.errs.add(pos, name, "a constraint interface (with type terms) cannot be %s", thing)
		return nil
	}
	// A directive with problems (reported) still lets the methods be checked: every problem
	// of the run is reported at once, and nothing is emitted.
	s := &Interface{
		Obj:          obj,
		Name:         name,
		Pos:          pos,
		DirectivePos: b.dirs.pos(first, 0),
		Doc:          doc.Text(),
		Kind:         sd.kind,
		Channel:      cd.kind,
		TypeName:     cmp.Or(sd.name, cd.name, p.Name+"."+name),
		Idle:         sd.idle,
	}
	if literal {
		b.flatten(s, iface, it, b.fset, nil, map[string]bool{}, nil, nil)
	} else {
		b.embed(s, p.TypesInfo.TypeOf(expr), expr, b.fset, nil, map[string]bool{}, []token.Position{pos}, nil)
	}
	return s
}

// definedFromInterface reports whether the type obj, declared as expr of type rhs (not an
// interface literal), is defined from an interface that it can take its methods from, and
// reports why not otherwise.
func (b *builder) definedFromInterface(obj *types.TypeName, rhs types.Type, expr ast.Expr, d directive, pos token.Position, name string) bool {
	switch expr.(type) {
	case *ast.Ident, *ast.SelectorExpr, *ast.IndexExpr, *ast.IndexListExpr:
	default:
		b.errs.add(pos, name, "//zlink:%s is on %s, which is %s, not an interface", d.name, name, describeTypeExpr(expr))
		return false
	}
	if obj == nil || rhs == nil {
		return false // the type checker failed; its errors say why
	}
	from := types.ExprString(expr)
	switch u := obj.Type().Underlying().(type) {
	case *types.Interface:
		if n, ok := types.Unalias(rhs).(*types.Named); ok && n.TypeArgs().Len() > 0 {
			b.errs.add(pos, name, "is defined from the generic interface %s, which is not supported", n.Obj().Name())
			return false
		}
		return true
	case *types.Basic:
		if u.Kind() == types.Invalid {
			// Undefined: a name that this run generates (any other fails the package's
			// compile check, which then reports it instead). Generated types are structs.
			b.errs.add(pos, name, "is defined from %s, which zlinkgen generates: an interface can be defined only from interfaces of its own", from)
			return false
		}
	}
	b.errs.add(pos, name, "//zlink:%s is on %s, which is defined as %s, not an interface", d.name, name, from)
	return false
}

// flatten appends the methods of iface to s in declaration order, embedded interfaces in
// place. it is the interface's syntax, read with fset, or nil when the source is not at hand:
// the methods then follow their source positions. args are where the type arguments that the
// literal's type parameters stand for are written. via are the embeddings that lead to iface
// from the Spot's declaration, outermost first (see Method.Via).
func (b *builder) flatten(s *Interface, iface *types.Interface, it *ast.InterfaceType, fset *token.FileSet, args typeArgs, seen map[string]bool, via []token.Position, stack []*types.TypeName) {
	if it == nil {
		ms := make([]*types.Func, iface.NumMethods())
		for i := range ms {
			ms[i] = iface.Method(i)
		}
		slices.SortStableFunc(ms, func(x, y *types.Func) int {
			px, py := b.fset.Position(x.Pos()), b.fset.Position(y.Pos())
			return cmp.Or(cmp.Compare(px.Filename, py.Filename), cmp.Compare(px.Line, py.Line), cmp.Compare(px.Column, py.Column))
		})
		for _, m := range ms {
			// A method whose source is not at hand is reported at the embedding: a position
			// from export data, such as $GOROOT/src/io/io.go, is no file the user can open,
			// and the standard library's own files are none of the user's.
			pos := b.fset.Position(m.Pos())
			if !pos.IsValid() || !filepath.IsAbs(pos.Filename) || b.sources.inGOROOT(pos.Filename) {
				pos = via[len(via)-1] // an interface without source is always reached by embedding
			}
			b.addMethod(s, m, pos, "", false, true, nil, fset, nil, seen, via)
		}
		return
	}
	k := 0
	for _, field := range it.Methods.List {
		if len(field.Names) > 0 {
			m := explicitMethod(iface, field.Names[0].Name)
			if m == nil {
				continue
			}
			send := false
			for _, d := range directivesOf(field.Doc) {
				send = send || d.name == "send"
			}
			ft, _ := field.Type.(*ast.FuncType)
			b.addMethod(s, m, fset.Position(field.Names[0].Pos()), field.Doc.Text(), send, false, ft, fset, args, seen, via)
			continue
		}
		if k >= iface.NumEmbeddeds() {
			continue
		}
		et := iface.EmbeddedType(k)
		k++
		b.embed(s, et, field.Type, fset, args, seen, append(slices.Clip(via), fset.Position(field.Type.Pos())), stack)
	}
}

// embed flattens the embedded type et (written as expr, in a literal whose type parameters
// stand for args) into s. via are the embeddings that lead to it, this one last.
func (b *builder) embed(s *Interface, et types.Type, expr ast.Expr, fset *token.FileSet, args typeArgs, seen map[string]bool, via []token.Position, stack []*types.TypeName) {
	// A problem of the embedding is reported where the user can fix it: in another module's
	// interface, at the embedding of the user's that leads there.
	fail := func(format string, args ...any) {
		b.errs.add(b.sources.userAt(via[len(via)-1], via[:len(via)-1]), s.Name, format, args...)
	}
	switch t := types.Unalias(et).(type) {
	case *types.Named:
		if t.TypeArgs().Len() > 0 {
			fail("embeds the generic interface %s, which is not supported", t.Obj().Name())
			return
		}
		ii, ok := t.Underlying().(*types.Interface)
		if !ok {
			return // the type checker reports it
		}
		if !ii.IsMethodSet() {
			fail("embeds the constraint interface %s, which has type terms", t.Obj().Name())
			return
		}
		if slices.Contains(stack, t.Obj()) {
			return
		}
		it, sfset, targs := b.literalOf(t.Obj(), nil)
		b.flatten(s, ii, it, sfset, targs, seen, via, append(stack, t.Obj()))
	case *types.Interface:
		lit, _ := ast.Unparen(expr).(*ast.InterfaceType)
		if !t.IsMethodSet() {
			fail("embeds a constraint interface, which has type terms")
			return
		}
		if a, ok := et.(*types.Alias); ok && lit == nil {
			// An alias of an interface literal, or an instance of one: the literal, where the
			// alias is declared, with the instance's type arguments where expr writes them.
			lit, fset, args = b.literalOf(a.Obj(), instanceArgs(expr, fset, args))
		}
		b.flatten(s, t, lit, fset, args, seen, via, stack)
	case *types.Basic:
		if t.Kind() == types.Invalid {
			// Undefined: a name that this run generates (any other fails the package's
			// compile check, which then reports it instead). Generated types are structs.
			fail("embeds %s, which zlinkgen generates: an interface can embed only interfaces of its own", types.ExprString(expr))
		}
	}
}

// addMethod appends m to s unless a method of that name is already there (an interface may
// embed two that declare the same method, or embed one and declare it again). A //zlink:send
// on any of its declarations makes the method one-way.
func (b *builder) addMethod(s *Interface, m *types.Func, pos token.Position, doc string, send, inferred bool, ft *ast.FuncType, fset *token.FileSet, args typeArgs, seen map[string]bool, via []token.Position) {
	if seen[m.Name()] {
		if send {
			if i := slices.IndexFunc(s.Methods, func(x *Method) bool { return x.Name == m.Name() }); i >= 0 {
				s.Methods[i].Send = true
			}
		}
		return
	}
	seen[m.Name()] = true
	sig := m.Type().(*types.Signature)
	meth := &Method{
		Obj:      m,
		Name:     m.Name(),
		Pos:      pos,
		Via:      via,
		Doc:      doc,
		Send:     send,
		Inferred: inferred,
		Variadic: sig.Variadic(),
	}
	var paramPos, resultPos []fieldPos
	if ft != nil {
		paramPos = fieldPositions(ft.Params, fset, args)
		resultPos = fieldPositions(ft.Results, fset, args)
	}
	meth.Params = params(sig.Params(), paramPos, pos)
	meth.Results = params(sig.Results(), resultPos, pos)
	if inferred {
		meth.Send = sig.Results().Len() == 1
	}
	if s.Channel == sdk.ChannelFanout {
		meth.Send = true // a Fanout channel's methods are all one-way; validation checks the shape
	}
	s.Methods = append(s.Methods, meth)
}

// typeDecl is the declaration of a type: its spec, read with fset, and the type information
// of its package when it was loaded, or else the file it was parsed from on demand.
type typeDecl struct {
	spec *ast.TypeSpec
	fset *token.FileSet
	info *types.Info
	file *ast.File
}

// maxDeclSteps bounds the declarations literalOf follows: a cycle is a type error, and a
// chain of defined types that long is no interface anyone writes.
const maxDeclSteps = 64

// literalOf follows the declaration of the interface type obj to the interface literal it is
// written as: through parentheses, and through the defined types, aliases and generic types
// it names in turn (type Lobby Room; type Room = interface{ ... }), whose methods are the
// literal's. inst are where the type arguments of the instance of obj that leads here are
// written, if it is one; the literal's type parameters stand for the arguments that args
// returns. It returns nil when a declaration on the way cannot be read: the methods then
// follow their source positions.
func (b *builder) literalOf(obj *types.TypeName, inst []typeArg) (*ast.InterfaceType, *token.FileSet, typeArgs) {
	for range maxDeclSteps {
		d, ok := b.declOf(obj)
		if !ok {
			return nil, nil, nil
		}
		if d.info == nil {
			// Read from source: the rest of the chain is followed by its syntax alone, so that
			// it reads the same whatever else the run loaded (a dependency's type information
			// holds only what the packages loaded refer to).
			return b.literalInSource(obj.Pkg().Path(), d, inst)
		}
		args := bindArgs(d.spec.TypeParams, inst)
		inst = instanceArgs(d.spec.Type, d.fset, args)
		switch x := genericOf(d.spec.Type).(type) {
		case *ast.InterfaceType:
			return x, d.fset, args
		case *ast.Ident, *ast.SelectorExpr:
			if obj = namedBy(d.info, x); obj == nil {
				return nil, nil, nil
			}
		default:
			return nil, nil, nil
		}
	}
	return nil, nil, nil
}

// typeArgs are where the type arguments that a declaration's type parameters stand for are
// written, by the parameters' names: a problem of a method's parameter or result whose type
// is one, or a pointer to one, is the argument's, and is reported there.
type typeArgs map[string]typeArg

// typeArg is where a type argument is written (at): the user's own when an instance passed
// a parameter on (G[T], or G[*T]); and, when one passed a pointer to it on (G[*T]), where that
// pointer is written (ptrAt), which a pointer to the parameter makes a pointer to a pointer.
type typeArg struct{ at, ptrAt token.Position }

// bindArgs binds the type parameters of a declaration to the type arguments that an instance
// of it writes, in order.
func bindArgs(params *ast.FieldList, inst []typeArg) typeArgs {
	if params == nil || len(inst) == 0 {
		return nil
	}
	args := typeArgs{}
	i := 0
	for _, f := range params.List {
		for _, name := range f.Names {
			if i < len(inst) {
				args[name.Name] = inst[i]
			}
			i++
		}
	}
	return args
}

// instanceArgs returns where the type arguments of the instance x (G[A, B]) are written: for
// an argument that is a type parameter of args, or a pointer to one, where that parameter's
// own argument is. It returns nil when x is no instance.
func instanceArgs(x ast.Expr, fset *token.FileSet, args typeArgs) []typeArg {
	var indices []ast.Expr
	switch ix := ast.Unparen(x).(type) {
	case *ast.IndexExpr:
		indices = []ast.Expr{ix.Index}
	case *ast.IndexListExpr:
		indices = ix.Indices
	default:
		return nil
	}
	out := make([]typeArg, len(indices))
	for i, e := range indices {
		out[i] = typeArg{at: fset.Position(e.Pos())}
		id, ptr := paramOf(e)
		if arg, ok := args[id]; ok && id != "" {
			out[i] = arg
			if ptr {
				if arg.ptrAt.IsValid() {
					// A second pointer: no argument makes a message of a pointer to a
					// pointer, which the instances on the way make.
					out[i].at = fset.Position(e.Pos())
				}
				out[i].ptrAt = fset.Position(e.Pos())
			}
		}
	}
	return out
}

// paramOf returns the name that the type expression x is, or is a pointer to (ptr); "" when
// it is neither.
func paramOf(x ast.Expr) (name string, ptr bool) {
	x = ast.Unparen(x)
	if star, ok := x.(*ast.StarExpr); ok {
		x, ptr = ast.Unparen(star.X), true
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name, ptr
	}
	return "", false
}

// of returns where the type argument is written that the type expression x stands for: x is
// a type parameter of args, or a pointer to one; a pointer to one that an instance on the way
// passed a pointer to is that instance's. A type that merely contains one (a slice of T, a
// func type) is the literal's to fix, and so are the method's shapes.
func (args typeArgs) of(x ast.Expr) (token.Position, bool) {
	id, ptr := paramOf(x)
	arg, ok := args[id]
	if !ok || id == "" {
		return token.Position{}, false
	}
	if ptr && arg.ptrAt.IsValid() {
		return arg.ptrAt, true
	}
	return arg.at, true
}

// genericOf is the type expression x without its parentheses and, for an instance of a generic
// type (G[T]), the generic type it instantiates, whose declaration has the instance's methods
// with their marks. (A Spot defined from, or embedding, an instance of a generic defined type
// is refused before its methods are read; one defined through a type of its own is not.)
func genericOf(x ast.Expr) ast.Expr {
	x = ast.Unparen(x)
	switch ix := x.(type) {
	case *ast.IndexExpr:
		return ast.Unparen(ix.X)
	case *ast.IndexListExpr:
		return ast.Unparen(ix.X)
	}
	return x
}

// namedBy returns the defined type or alias that the type expression x names, as info says,
// or nil.
func namedBy(info *types.Info, x ast.Expr) *types.TypeName {
	switch t := info.TypeOf(x).(type) {
	case *types.Alias:
		return t.Obj()
	case *types.Named:
		if t.TypeArgs().Len() == 0 {
			return t.Obj()
		}
	}
	return nil
}

// literalInSource follows, by their syntax, the declarations from d, read from the source of
// the package path, to the interface literal they lead to (see literalOf).
func (b *builder) literalInSource(path string, d typeDecl, inst []typeArg) (*ast.InterfaceType, *token.FileSet, typeArgs) {
	for range maxDeclSteps {
		var ok bool
		args := bindArgs(d.spec.TypeParams, inst)
		inst = instanceArgs(d.spec.Type, d.fset, args)
		switch x := genericOf(d.spec.Type).(type) {
		case *ast.InterfaceType:
			return x, d.fset, args
		case *ast.Ident:
			d, path, ok = b.sources.specNamed(path, d.file, x.Name)
		case *ast.SelectorExpr:
			if q, isIdent := x.X.(*ast.Ident); isIdent {
				path = b.sources.importedAs(d.file, q.Name)
				d, ok = b.sources.spec(path, x.Sel.Name)
			}
		}
		if !ok {
			return nil, nil, nil
		}
	}
	return nil, nil, nil
}

// declOf finds the declaration of a named type: in the loaded packages, or else in its source
// file, parsed on demand. It reports false when the source cannot be read.
func (b *builder) declOf(obj *types.TypeName) (typeDecl, bool) {
	if d, ok := b.decls[obj]; ok {
		return d, true
	}
	if obj.Pkg() == nil {
		return typeDecl{}, false
	}
	// By its file where the position names one, which holds the same declaration whether the
	// package's type information came from export data or from source; else (a trimmed path)
	// by its package.
	switch name := b.fset.Position(obj.Pos()).Filename; {
	case strings.HasPrefix(name, "$GOROOT/"):
		return typeDecl{}, false // the standard library's, from export data: never read
	case filepath.IsAbs(name):
		return b.sources.specIn(name, obj.Name())
	}
	return b.sources.spec(obj.Pkg().Path(), obj.Name())
}

// explicitMethod returns the method name declared in iface itself, or nil.
func explicitMethod(iface *types.Interface, name string) *types.Func {
	for i := range iface.NumExplicitMethods() {
		if m := iface.ExplicitMethod(i); m.Name() == name {
			return m
		}
	}
	return nil
}

// fieldPos is where a parameter's type is written, and where the type is decided (typeAt):
// the instance's type argument when the type is a type parameter of a generic alias (args), or
// a pointer to one; else the same.
type fieldPos struct{ at, typeAt token.Position }

// fieldPositions returns one fieldPos per parameter of a field list ((a, b *T) is two).
func fieldPositions(fl *ast.FieldList, fset *token.FileSet, args typeArgs) []fieldPos {
	if fl == nil {
		return nil
	}
	var ps []fieldPos
	for _, f := range fl.List {
		p := fieldPos{at: fset.Position(f.Type.Pos())}
		p.typeAt = p.at
		if at, ok := args.of(f.Type); ok {
			p.typeAt = at
		}
		for range max(len(f.Names), 1) {
			ps = append(ps, p)
		}
	}
	return ps
}

func params(t *types.Tuple, pos []fieldPos, fallback token.Position) []*Param {
	ps := make([]*Param, t.Len())
	for i := range ps {
		v := t.At(i)
		p := &Param{Name: v.Name(), Type: v.Type(), Pos: fallback, TypePos: fallback}
		if i < len(pos) {
			p.Pos, p.TypePos = pos[i].at, pos[i].typeAt
		}
		ps[i] = p
	}
	return ps
}

// describeTypeExpr names the kind of type an expression declares, for messages.
func describeTypeExpr(e ast.Expr) string {
	switch e.(type) {
	case *ast.StructType:
		return "a struct type"
	case *ast.FuncType:
		return "a func type"
	case *ast.MapType:
		return "a map type"
	case *ast.ArrayType:
		return "a slice or array type"
	case *ast.ChanType:
		return "a channel type"
	case *ast.StarExpr:
		return "a pointer type"
	default:
		return "a defined type"
	}
}
