package gen

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"
)

// Version is the generator's version, written into every file header. It changes only with
// the generated code, so that regenerating with an unchanged generator changes no byte.
const Version = "v0.1.0"

// SupportPackage is the constant of sdk that every generated file references, so that code
// generated for an sdk it does not match fails to compile with this name in the error. It
// changes when generated code starts to need a runtime feature that older sdk versions lack.
const SupportPackage = "SupportPackageIsVersion1"

// The packages generated code uses besides those of the messages.
const (
	contextPackage GoImportPath = "context"
	fmtPackage     GoImportPath = "fmt"
	timePackage    GoImportPath = "time"
	sdkPackage     GoImportPath = "github.com/zlink-go/zlink/sdk"
	protoPackage   GoImportPath = "google.golang.org/protobuf/proto"
)

// Identifiers of those packages that generated code uses often.
var (
	contextContext = contextPackage.Ident("Context")
	fmtErrorf      = fmtPackage.Ident("Errorf")
	protoMessage   = protoPackage.Ident("Message")
)

// emitter renders the output of one input file.
type emitter struct {
	pkg  *Package
	file *File
	f    *jen.File
	// loc are the names of the locals and parameters of generated functions, chosen so that
	// they shadow no import and no package-level name.
	loc locals
}

// locals are the identifiers generated function bodies declare.
type locals struct {
	r, c, id, node, ctx, req, msg, opts, out, err, reply, ok, impl, in, sc, v, s string
}

var localBases = locals{
	r: "r", c: "c", id: "id", node: "node", ctx: "ctx", req: "req", msg: "msg", opts: "opts",
	out: "out", err: "err", reply: "reply", ok: "ok", impl: "impl", in: "in", sc: "sc", v: "v", s: "s",
}

func (l locals) all() []string {
	return []string{l.r, l.c, l.id, l.node, l.ctx, l.req, l.msg, l.opts, l.out, l.err, l.reply, l.ok, l.impl, l.in, l.sc, l.v, l.s}
}

// emitFile renders the generated file for one input file of p.
func emitFile(p *Package, file *File) ([]byte, error) {
	e := &emitter{pkg: p, file: file, f: jen.NewFilePathName(string(p.Path), string(p.Name))}
	taken := e.packageNames()
	e.imports(taken)
	e.f.HeaderComment(e.header())

	e.f.Comment("This reference fails to compile when the generated code and the runtime in sdk do not match.")
	e.f.Const().Id("_").Op("=").Add(sdkID(SupportPackage))
	for _, s := range file.Spots {
		e.spot(s)
	}
	var buf bytes.Buffer
	if err := e.f.Render(&buf); err != nil {
		return nil, fmt.Errorf("render %s: %w", filepath.Base(file.Out), err)
	}
	return buf.Bytes(), nil
}

// header is the file's leading comment: the generated-code marker, the source and any build
// constraint of the source.
func (e *emitter) header() string {
	h := headerPrefix + Version + ". DO NOT EDIT.\n// source: " + filepath.Base(e.file.Source)
	if e.file.BuildConstraint != "" {
		h += "\n\n" + e.file.BuildConstraint
	}
	return h
}

// packageNames returns the names that imports and locals of the generated file must not take:
// every package-level name of the package, those the run generates, and the predeclared
// identifiers the generated code uses.
func (e *emitter) packageNames() map[string]bool {
	taken := map[string]bool{"any": true, "error": true, "new": true, "nil": true, "string": true}
	for _, n := range e.pkg.Declared {
		taken[n] = true
	}
	for _, f := range e.pkg.Files {
		for _, s := range f.Spots {
			for _, n := range topLevel(s) {
				taken[n] = true
			}
		}
	}
	return taken
}

// imports pins the name of every imported package, first avoiding the package's names and
// the locals' base names, then chooses the locals avoiding the imports.
func (e *emitter) imports(taken map[string]bool) {
	avoid := maps.Clone(taken)
	for _, n := range localBases.all() {
		avoid[n] = true
	}
	for _, s := range e.file.Spots {
		avoid[namesOf(s).Factory] = true
	}
	type imp struct {
		path GoImportPath
		name GoPackageName
	}
	fixed := []imp{{contextPackage, "context"}, {fmtPackage, "fmt"}, {timePackage, "time"}, {protoPackage, "proto"}, {sdkPackage, "sdk"}}
	var msgs []imp
	seen := map[GoImportPath]bool{}
	for _, s := range e.file.Spots {
		for _, m := range s.Methods {
			for _, msg := range []*Message{m.Request, m.Reply} {
				if msg == nil || msg.GoIdent.GoImportPath == e.pkg.Path || seen[msg.GoIdent.GoImportPath] {
					continue
				}
				path := msg.GoIdent.GoImportPath
				seen[path] = true
				msgs = append(msgs, imp{path, e.pkg.PackageNames[path]})
			}
		}
	}
	slices.SortFunc(msgs, func(a, b imp) int { return strings.Compare(string(a.path), string(b.path)) })
	used := map[string]bool{}
	for _, im := range append(fixed, msgs...) {
		base := string(im.name)
		name := base
		for i := 2; avoid[name] || used[name]; i++ {
			name = base + strconv.Itoa(i)
		}
		used[name] = true
		if name == base {
			e.f.ImportName(string(im.path), name)
		} else {
			e.f.ImportAlias(string(im.path), name)
		}
	}
	// Locals avoid package names and import names alike.
	for n := range used {
		taken[n] = true
	}
	pick := func(base string) string {
		name := base
		for i := 2; taken[name]; i++ {
			name = base + strconv.Itoa(i)
		}
		return name
	}
	b := localBases
	e.loc = locals{
		r: pick(b.r), c: pick(b.c), id: pick(b.id), node: pick(b.node), ctx: pick(b.ctx), req: pick(b.req),
		msg: pick(b.msg), opts: pick(b.opts), out: pick(b.out), err: pick(b.err), reply: pick(b.reply),
		ok: pick(b.ok), impl: pick(b.impl), in: pick(b.in), sc: pick(b.sc), v: pick(b.v), s: pick(b.s),
	}
}

// comment renders text as // lines; empty lines become "//".
func comment(text string) *jen.Statement {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines {
		switch {
		case l == "":
			lines[i] = "//"
		case strings.HasPrefix(l, "\t"):
			lines[i] = "//" + l
		default:
			lines[i] = "// " + l
		}
	}
	return jen.Comment(strings.Join(lines, "\n"))
}

// doc joins a generated first paragraph and a copied doc comment.
func doc(generated, copied string) string {
	copied = strings.TrimSpace(copied)
	if copied == "" {
		return generated
	}
	return generated + "\n\n" + copied
}

// duration renders d as a constant expression: 5 * time.Minute.
func duration(d time.Duration) *jen.Statement {
	units := []struct {
		d    time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"}}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return qual(timePackage.Ident(u.name))
			}
			return jen.Lit(int(d / u.d)).Op("*").Add(qual(timePackage.Ident(u.name)))
		}
	}
	return qual(timePackage.Ident("Duration")).Call(jen.Lit(int64(d)))
}

// qual refers to id: unqualified in the file's own package, else qualified by the name the
// file imports id's package as.
func qual(id GoIdent) *jen.Statement { return jen.Qual(string(id.GoImportPath), id.GoName) }

// msgType refers to message type m (without the pointer).
func msgType(m *Message) *jen.Statement { return qual(m.GoIdent) }

// msgString renders *m for error messages, qualified by the name its package declares:
// "*chat.JoinRequest".
func (e *emitter) msgString(m *Message) string {
	return "*" + string(e.pkg.PackageNames[m.GoIdent.GoImportPath]) + "." + m.GoIdent.GoName
}

func sdkID(name string) *jen.Statement { return qual(sdkPackage.Ident(name)) }
