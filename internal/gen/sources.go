package gen

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"
)

// sources reads the declarations of packages that the run did not load from their source
// files, parsed on demand: the interfaces that a Spot embeds or is defined from, and the
// chains of declarations behind them, with their order, doc comments and directives. A
// package is found by its import path, listed with the run's build settings, so that what is
// read does not depend on what else the run loaded.
type sources struct {
	fset *token.FileSet
	// list lists a package by its import path; nil: only the files that positions name are
	// read.
	list  *packages.Config
	files map[string]*ast.File // by file name; nil: unreadable
	pkgs  map[string]listedPackage
	// gorootSrc is the standard library's source directory, with a trailing separator, once
	// known: its declarations are never read (a position there is no file of the user's).
	gorootSrc string
	// owned says of a directory whether its files are the user's (see own).
	owned map[string]bool
}

// listedPackage is a package's name and Go files, as the go command lists them.
type listedPackage struct {
	name  string
	files []string
}

func newSources(fset *token.FileSet) *sources {
	return &sources{fset: fset, files: map[string]*ast.File{}, pkgs: map[string]listedPackage{}, owned: map[string]bool{}}
}

// userAt is where a problem found at pos, in a declaration that the embeddings via (outermost
// first) lead to, is reported: pos when its file is the user's (own), else the last of via that
// is, else the first of via, which is in the Spot's own declaration.
func (s *sources) userAt(pos token.Position, via []token.Position) token.Position {
	if len(via) == 0 || s.own(pos.Filename) {
		return pos
	}
	for _, at := range slices.Backward(via) {
		if s.own(at.Filename) {
			return at
		}
	}
	return via[0]
}

// own reports whether the file called name is the user's to edit: in a package that the run
// loaded, or in another package of a main module (of the workspace, when there is one); not
// in another module (the module cache, a vendor directory) nor in the standard library. The
// go command is asked once per directory, and only of files that a problem is reported in.
func (s *sources) own(name string) bool {
	if !filepath.IsAbs(name) {
		return false // a position from export data, such as $GOROOT/src/io/io.go
	}
	dir := filepath.Dir(name)
	if own, ok := s.owned[dir]; ok {
		return own
	}
	own := false
	switch {
	case s.inGOROOT(name):
	case s.list == nil:
		own = true // nothing to ask: the position stays
	default:
		cfg := *s.list
		cfg.Mode = packages.NeedName | packages.NeedFiles | packages.NeedModule // a file query matches by files
		ps, err := packages.Load(&cfg, "file="+name)
		own = err == nil && slices.ContainsFunc(ps, func(p *packages.Package) bool { return p.Module != nil && p.Module.Main })
	}
	s.owned[dir] = own
	return own
}

// listed returns the package path as the go command lists it, once per run; false when it
// cannot be listed.
func (s *sources) listed(path string) (listedPackage, bool) {
	s.listAll([]string{path})
	l := s.pkgs[path]
	return l, l.name != ""
}

// listAll lists, in one run of the go command, the packages of paths not listed yet.
func (s *sources) listAll(paths []string) {
	var todo []string
	for _, p := range paths {
		if _, ok := s.pkgs[p]; !ok && !slices.Contains(todo, p) {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return
	}
	if _, ok := s.pkgs[gorootWitness]; !ok && !slices.Contains(todo, gorootWitness) {
		// Where GOROOT is comes with the first listing (inGOROOT), at no run of its own.
		todo = append(todo, gorootWitness)
	}
	for _, p := range todo {
		s.pkgs[p] = listedPackage{} // unless listed below
	}
	if s.list == nil {
		return
	}
	ps, err := packages.Load(s.list, todo...)
	if err != nil {
		return
	}
	for _, p := range ps {
		if len(p.Errors) == 0 && slices.Contains(todo, p.PkgPath) {
			s.pkgs[p.PkgPath] = listedPackage{name: p.Name, files: p.GoFiles}
		}
	}
}

// gorootWitness is a package of GOROOT whose file tells where the go command's GOROOT is.
const gorootWitness = "unsafe"

// inGOROOT reports whether the file called name is the standard library's.
func (s *sources) inGOROOT(name string) bool {
	if s.gorootSrc == "" {
		root := build.Default.GOROOT
		// The go command's own: the directory of package unsafe's file, in GOROOT/src/unsafe.
		if l, ok := s.listed(gorootWitness); ok && len(l.files) > 0 {
			root = filepath.Dir(filepath.Dir(filepath.Dir(l.files[0])))
		}
		s.gorootSrc = filepath.Join(root, "src") + string(filepath.Separator)
	}
	return strings.HasPrefix(name, s.gorootSrc)
}

// file returns the file called name, parsed once with its comments; nil when it cannot be.
func (s *sources) file(name string) *ast.File {
	f, ok := s.files[name]
	if !ok {
		f, _ = parser.ParseFile(s.fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		s.files[name] = f
	}
	return f
}

// specIn returns the declaration of the type name in the file called file, unless that file
// is the standard library's.
func (s *sources) specIn(file, name string) (typeDecl, bool) {
	if s.inGOROOT(file) {
		return typeDecl{}, false
	}
	f := s.file(file)
	if f == nil {
		return typeDecl{}, false
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, sp := range gd.Specs {
			if ts := sp.(*ast.TypeSpec); ts.Name.Name == name {
				if ts.Doc == nil && len(gd.Specs) == 1 {
					ts.Doc = gd.Doc
				}
				return typeDecl{spec: ts, fset: s.fset, file: f}, true
			}
		}
	}
	return typeDecl{}, false
}

// spec returns the declaration of the type name in the package path.
func (s *sources) spec(path, name string) (typeDecl, bool) {
	if path == "" {
		return typeDecl{}, false // no package: a qualifier the file does not import
	}
	l, ok := s.listed(path)
	if !ok {
		return typeDecl{}, false
	}
	for _, file := range l.files {
		if d, ok := s.specIn(file, name); ok {
			return d, true
		}
	}
	return typeDecl{}, false
}

// specNamed returns the declaration of the type that file, of package path, names as name:
// declared in the package, or in one that the file dot-imports, which it returns too.
func (s *sources) specNamed(path string, file *ast.File, name string) (typeDecl, string, bool) {
	if d, ok := s.spec(path, name); ok {
		return d, path, true
	}
	for _, imp := range file.Imports {
		if imp.Name == nil || imp.Name.Name != "." {
			continue
		}
		if p, err := strconv.Unquote(imp.Path.Value); err == nil {
			if d, ok := s.spec(p, name); ok {
				return d, p, true
			}
		}
	}
	return typeDecl{}, "", false
}

// importedAs is the import path that file imports under name, or "" when it imports none. A
// named import says so itself; an unnamed one is known by its package's name, which is
// usually its path's last element: those are listed first, and the rest together.
func (s *sources) importedAs(file *ast.File, name string) string {
	var unnamed []string
	for _, imp := range file.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil || path == "C" {
			continue
		}
		if imp.Name != nil {
			if imp.Name.Name == name {
				return path
			}
			continue
		}
		unnamed = append(unnamed, path)
	}
	likely := slices.DeleteFunc(slices.Clone(unnamed), func(p string) bool { return lastElement(p) != name })
	for _, paths := range [][]string{likely, unnamed} {
		s.listAll(paths)
		for _, p := range paths {
			if l, ok := s.listed(p); ok && l.name == name {
				return p
			}
		}
	}
	return ""
}

// versionSuffix is a major version at the end of an import path: /v2, .v3.
var versionSuffix = regexp.MustCompile(`[/.]v[0-9]+$`)

// lastElement is the last element of an import path, without a major version suffix: the name
// its package usually has.
func lastElement(path string) string {
	path = versionSuffix.ReplaceAllString(path, "")
	return path[strings.LastIndex(path, "/")+1:]
}
