package gen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"

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
}

// listedPackage is a package's name and Go files, as the go command lists them.
type listedPackage struct {
	name  string
	files []string
}

func newSources(fset *token.FileSet) *sources {
	return &sources{fset: fset, files: map[string]*ast.File{}, pkgs: map[string]listedPackage{}}
}

// listed returns the package path as the go command lists it, once per run; false when it
// cannot be listed.
func (s *sources) listed(path string) (listedPackage, bool) {
	if l, ok := s.pkgs[path]; ok {
		return l, l.name != ""
	}
	var l listedPackage
	if s.list != nil {
		if ps, err := packages.Load(s.list, path); err == nil && len(ps) == 1 && len(ps[0].Errors) == 0 {
			l = listedPackage{name: ps[0].Name, files: ps[0].GoFiles}
		}
	}
	s.pkgs[path] = l
	return l, l.name != ""
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

// specIn returns the declaration of the type name in the file called file.
func (s *sources) specIn(file, name string) (typeDecl, bool) {
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

// importedAs is the import path that file imports under name, or "" when it imports none.
func (s *sources) importedAs(file *ast.File, name string) string {
	for _, imp := range file.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		if imp.Name != nil {
			if imp.Name.Name == name {
				return path
			}
			continue
		}
		if l, ok := s.listed(path); ok && l.name == name {
			return path
		}
	}
	return ""
}
