package gen

import (
	"bytes"
	"fmt"
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
	// loc are the names of the locals and parameters of generated functions.
	loc locals
}

// emitFile renders the generated file for one input file of p.
func emitFile(p *Package, file *File) ([]byte, error) {
	e := &emitter{pkg: p, file: file, f: jen.NewFilePathName(string(p.Path), string(p.Name))}
	ids := e.identifiers()
	e.loc = newLocals(ids)
	ids.reserve(e.pkg.Declared...)
	e.imports(ids)
	e.f.HeaderComment(e.header())

	e.f.Comment("This reference fails to compile when the generated code and the runtime in sdk do not match.")
	e.f.Const().Id("_").Op("=").Add(sdkID(SupportPackage))
	for _, s := range file.Spots {
		if s.IsChannel() {
			e.channel(s)
		} else {
			e.spot(s)
		}
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

// identifiers hands out the names that a generated file declares itself: its import names and
// the locals and parameters of its functions. Each name it gives differs from every name given
// before and from every name reserved, so that none shadows another. A base name that is
// taken becomes the first free one of base2, base3, ...: the same input always gets the same
// names.
type identifiers struct{ taken map[string]bool }

// reserve marks names as taken.
func (ids *identifiers) reserve(names ...string) {
	for _, n := range names {
		ids.taken[n] = true
	}
}

// fresh returns base, or base with the smallest number from 2 that makes it free, and takes it.
func (ids *identifiers) fresh(base string) string {
	name := base
	for i := 2; ids.taken[name]; i++ {
		name = base + strconv.Itoa(i)
	}
	ids.taken[name] = true
	return name
}

// predeclaredUsed are the predeclared identifiers that generated code uses. A package that
// declares one of them at package level changes what the generated code means: validation
// refuses it.
var predeclaredUsed = []string{"any", "error", "int64", "new", "nil", "string", "true"}

// identifiers returns the file's identifiers with the names reserved that the locals and
// parameters of its functions must not take: the names their bodies refer to. Those are the
// predeclared identifiers that generated code uses, the names the run generates in the
// package, the parameters the file's functions take under generated names (the factories of
// RegisterX), and the package's own declarations that the file names: its interfaces and the
// message types of the package itself. A local shadows a package-level name only within its
// function, so no other declaration of the package matters to the locals, and they are the
// same whatever _test.go files, GOOS, GOARCH and tags there are. Import names are another
// matter: emitFile reserves every package-level name of the package before it takes them.
func (e *emitter) identifiers() *identifiers {
	ids := &identifiers{taken: map[string]bool{}}
	ids.reserve(predeclaredUsed...)
	for _, f := range e.pkg.Files {
		for _, s := range f.Spots {
			ids.reserve(topLevel(s)...)
		}
	}
	for _, s := range e.file.Spots {
		if f := namesOf(s).Factory; f != "" {
			ids.reserve(f)
		}
		ids.reserve(s.Name)
		for _, m := range s.Methods {
			for _, msg := range []*Message{m.Request, m.Reply} {
				if msg != nil && msg.GoIdent.GoImportPath == e.pkg.Path {
					ids.reserve(msg.GoIdent.GoName)
				}
			}
		}
	}
	return ids
}

// locals are the identifiers that generated functions declare as parameters and locals.
// Each is the fresh name of its field's name.
type locals struct {
	r, c, id, node, ctx, req, msg, opts, out, err, reply, ok, impl, in, sc, v, s, ac, to, handler string
}

// newLocals takes the locals from ids, in the order of the fields.
func newLocals(ids *identifiers) locals {
	return locals{
		r: ids.fresh("r"), c: ids.fresh("c"), id: ids.fresh("id"), node: ids.fresh("node"), ctx: ids.fresh("ctx"),
		req: ids.fresh("req"), msg: ids.fresh("msg"), opts: ids.fresh("opts"), out: ids.fresh("out"), err: ids.fresh("err"),
		reply: ids.fresh("reply"), ok: ids.fresh("ok"), impl: ids.fresh("impl"), in: ids.fresh("in"), sc: ids.fresh("sc"),
		v: ids.fresh("v"), s: ids.fresh("s"), ac: ids.fresh("ac"), to: ids.fresh("to"), handler: ids.fresh("handler"),
	}
}

// imports pins the name of every package the file may import, in a fixed order: the packages
// generated code always uses, then those of the messages by import path. A package is
// imported under its own name when that is free, else under a fresh one.
func (e *emitter) imports(ids *identifiers) {
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
	for _, im := range append(fixed, msgs...) {
		if name := ids.fresh(string(im.name)); name == string(im.name) {
			e.f.ImportName(string(im.path), name)
		} else {
			e.f.ImportAlias(string(im.path), name)
		}
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
