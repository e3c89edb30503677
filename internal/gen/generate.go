package gen

import (
	"cmp"
	"context"
	"fmt"
	"go/token"
	"go/types"
	"os"
	"regexp"
	"runtime/debug"
	"slices"

	"golang.org/x/tools/go/packages"
)

// Config configures a run of the generator.
type Config struct {
	// Dir is the directory the package patterns are relative to, and error positions too.
	// Empty: the current directory.
	Dir string
	// BuildFlags are passed to the build system when loading (for example "-tags=foo").
	BuildFlags []string
	// Env is the environment of the build system; nil: this process's.
	Env []string
}

// packages is the configuration of a load of mode with the run's directory, environment and
// build flags.
func (c Config) packages(ctx context.Context, mode packages.LoadMode) *packages.Config {
	return &packages.Config{Context: ctx, Dir: c.Dir, Env: c.Env, BuildFlags: c.BuildFlags, Mode: mode}
}

// Result is one output file of a run.
type Result struct {
	// Path is the output file's absolute path (dir/room_zlink.go).
	Path string
	// Source is the input file's absolute path (dir/room.go); empty when Remove is set.
	Source string
	// Content is the file's content; nil when the input has errors or Remove is set.
	Content []byte
	// Remove is set for a file that zlinkgen generated earlier whose input no longer declares
	// a Spot or Actor type or a channel: it must go.
	Remove bool
	// Errors are the problems found in the input file; when any result has errors, nothing
	// may be written.
	Errors []*Error
}

// Generate loads the packages that patterns match ("." when none are given), and returns
// one Result per output file, sorted by path. When the input has problems, the error is an
// ErrorList holding every one of them, positioned, and the results carry theirs; an error
// that is not an ErrorList means the run itself failed. Generate writes nothing: see Write.
//
// An internal failure of the generator is returned as an error, never a panic.
func Generate(ctx context.Context, cfg Config, patterns []string) ([]Result, error) {
	return guard(func() ([]Result, error) { return generate(ctx, cfg, patterns) })
}

// guard runs f, turning a panic into an error: whatever the input, the generator answers
// with an error, never a crash of the process that runs it.
func guard(f func() ([]Result, error)) (results []Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			results, err = nil, fmt.Errorf("zlinkgen: internal error (please report it): %v\n%s", v, debug.Stack())
		}
	}()
	return f()
}

func generate(ctx context.Context, cfg Config, patterns []string) (results []Result, err error) {
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("zlinkgen: %w", err)
		}
	}
	pkgs, fset, sdk, err := load(ctx, cfg, patterns)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, ErrorList{{Msg: fmt.Sprintf("no packages match %q", patterns)}}
	}
	results, generated, err := run(ctx, cfg, pkgs, fset)
	if err != nil || len(results) == 0 {
		return results, err
	}
	// The output is checked with its package before anything may be written: a clash that
	// only the two together show would otherwise surface as a compile error of the output.
	clashes, err := checkOutput(ctx, cfg, patterns, pkgs, sdk, results, generated)
	if err != nil {
		return nil, err
	}
	if len(clashes) == 0 {
		return results, nil
	}
	for i := range results {
		r := &results[i]
		r.Content = nil
		for _, e := range clashes {
			if e.Pos.Filename == r.Source && r.Source != "" {
				r.Errors = append(r.Errors, e)
			}
		}
	}
	return results, finish(clashes, cfg.Dir)
}

// run builds, validates and emits the loaded packages. It also returns the names the run
// generates in each package.
func run(ctx context.Context, cfg Config, pkgs []*packages.Package, fset *token.FileSet) ([]Result, map[GoImportPath]map[string]bool, error) {
	errs := &errorCollector{}
	b := newBuilder(fset, errs, pkgs)
	b.sources.list = cfg.packages(ctx, packages.NeedName|packages.NeedFiles)
	v := &validator{fset: fset, errs: errs, rel: func(p token.Position) string {
		p.Filename = relPath(cfg.Dir, p.Filename)
		return p.String()
	}, place: b.sources.userAt}

	// Model first: the names the run generates are known before compile errors are judged.
	type loaded struct {
		pkg   *packages.Package
		model *Package
		errs  *errorCollector
	}
	var all []loaded
	generated := map[GoImportPath]map[string]bool{} // names generated in each package
	for _, p := range pkgs {
		pe := &errorCollector{}
		b.errs, b.dirs.errs = pe, pe
		m := b.pkg(p)
		all = append(all, loaded{p, m, pe})
		if generated[m.Path] == nil {
			generated[m.Path] = map[string]bool{}
		}
		for _, f := range m.Files {
			for _, s := range f.Spots {
				for _, n := range topLevel(s) {
					generated[m.Path][n] = true
				}
			}
		}
	}

	var results []Result
	for _, l := range all {
		compile := &errorCollector{}
		loadErrors(l.pkg, func(e packages.Error) bool { return refersToGenerated(l.pkg, fset, e, generated) }, compile)
		if len(compile.errs) > 0 || l.pkg.Types == nil {
			// The package does not compile: its own errors are what the user needs, and
			// checking a half-typed package would only add noise.
			errs.errs = append(errs.errs, compile.errs...)
			continue
		}
		v.errs = l.errs
		v.pkg(l.model)
		results = append(results, emitPackage(l.model, l.errs)...)
		errs.errs = append(errs.errs, l.errs.errs...)
	}

	list := finish(errs.errs, cfg.Dir)
	slices.SortFunc(results, func(a, b Result) int { return cmp.Compare(a.Path, b.Path) })
	results = slices.CompactFunc(results, func(a, b Result) bool { return a.Path == b.Path })
	if len(list) > 0 {
		return results, generated, list
	}
	return results, generated, nil
}

// emitPackage renders the outputs of one valid package, and marks its orphaned generated
// files for removal. Errors already found in an input file leave its result without content.
func emitPackage(p *Package, errs *errorCollector) []Result {
	bySource := map[string][]*Error{}
	for _, e := range errs.errs {
		bySource[e.Pos.Filename] = append(bySource[e.Pos.Filename], e)
	}
	var results []Result
	outs := map[string]bool{}
	for _, f := range p.Files {
		outs[f.Out] = true
		r := Result{Path: f.Out, Source: f.Source, Errors: bySource[f.Source]}
		if err := ownedOrAbsent(f.Out); err != nil {
			e := &Error{Pos: token.Position{Filename: f.Out, Line: 1, Column: 1}, Msg: err.Error()}
			errs.errs = append(errs.errs, e)
			r.Errors = append(r.Errors, e)
		}
		if len(errs.errs) == 0 {
			content, err := emitFile(p, f)
			if err != nil {
				e := &Error{Pos: token.Position{Filename: f.Source}, Msg: err.Error()}
				errs.errs = append(errs.errs, e)
				r.Errors = append(r.Errors, e)
			} else {
				r.Content = content
			}
		}
		results = append(results, r)
	}
	for _, g := range p.Generated {
		if !outs[g] {
			results = append(results, Result{Path: g, Remove: true})
		}
	}
	return results
}

// ownedOrAbsent refuses an output path that holds a file zlinkgen did not write.
func ownedOrAbsent(path string) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if isGenerated(path) {
		return nil
	}
	return fmt.Errorf("this file exists and was not generated by zlinkgen; refusing to overwrite it (rename it, or the input file)")
}

// undefinedRE matches the type checker's "undefined: X" and "undefined: pkg.X".
var undefinedRE = regexp.MustCompile(`^undefined: (?:(\w+)\.)?(\w+)$`)

// refersToGenerated reports whether a type error of p only says that a name this run
// generates is not there yet: the package may use its generated API before the first
// generation, and the previous output is left out of loading on purpose. In "undefined: q.X",
// q is the name under which the file imports a package, an alias perhaps: the package is the
// one the file's import of that name resolves to, told by its import path.
func refersToGenerated(p *packages.Package, fset *token.FileSet, e packages.Error, generated map[GoImportPath]map[string]bool) bool {
	if e.Kind != packages.TypeError {
		return false
	}
	m := undefinedRE.FindStringSubmatch(e.Msg)
	if m == nil {
		return false
	}
	in := GoImportPath(p.PkgPath)
	if m[1] != "" {
		var ok bool
		if in, ok = importedAs(p, fset, parsePos(e.Pos).Filename, m[1]); !ok {
			return false
		}
	}
	return generated[in][m[2]]
}

// importedAs returns the import path of the package that the file named filename of p
// imports under name.
func importedAs(p *packages.Package, fset *token.FileSet, filename, name string) (GoImportPath, bool) {
	if p.TypesInfo == nil {
		return "", false
	}
	for _, f := range p.Syntax {
		if name, _, ok := sourceName(fset, p, f); !ok || name != filename {
			continue
		}
		if pn, ok := p.TypesInfo.Scopes[f].Lookup(name).(*types.PkgName); ok {
			return GoImportPath(pn.Imported().Path()), true
		}
	}
	return "", false
}
