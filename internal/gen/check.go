package gen

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// checkOutput type-checks the run's packages again with results in place of their outputs,
// and returns what would then not compile. Each package compiled without its output (run
// stops otherwise), so each of these is a clash between the user's code and the generated
// code that only the two together show: a name that a dot import brings in and the output
// declares, a method of the user's on a generated type named like one the output declares. A
// clash at the user's code is reported there; an error in an output at its input file, naming
// the output's line. A package is checked in this process against the packages its first load
// imported (with sdk, which that load brought in); one whose output imports a package that
// load knows only in part (or that uses cgo) is loaded again with the output in place, which
// costs another run of the go command.
func checkOutput(ctx context.Context, cfg Config, patterns []string, loaded []*packages.Package, sdk *packages.Package, results []Result, generated map[GoImportPath]map[string]bool) ([]*Error, error) {
	sources := map[string]string{} // output -> its input
	for _, r := range results {
		if r.Content != nil {
			sources[r.Path] = r.Source
		}
	}
	var checked []checkedPackage
	for _, p := range loaded {
		if !hasOutput(p, results) {
			continue // nothing of it changes
		}
		c, ok := checkHere(p, sdk, results, generated)
		if !ok {
			var err error
			if checked, err = checkByLoading(ctx, cfg, patterns, loaded, results, generated); err != nil {
				return nil, err
			}
			break
		}
		checked = append(checked, c)
	}
	// An error at the user's code is the cause; the errors it leaves in the output only
	// repeat it, and are reported only when nothing is found at the user's code.
	atUser, inOutput := &errorCollector{}, &errorCollector{}
	for _, c := range checked {
		for _, e := range c.errs {
			reportClash(atUser, inOutput, c, e, sources, cfg.Dir)
		}
	}
	if len(atUser.errs) > 0 {
		return atUser.errs, nil
	}
	return inOutput.errs, nil
}

// checkedPackage is a package type-checked with its output: its files and their type errors.
type checkedPackage struct {
	name  string
	fset  *token.FileSet
	files []*ast.File
	errs  []types.Error
}

// reportClash adds e, a type error of c with its output in place, to atUser when it is, or
// is told, at the user's code, else to inOutput.
func reportClash(atUser, inOutput *errorCollector, c checkedPackage, e types.Error, sources map[string]string, dir string) {
	if strings.HasPrefix(e.Msg, "\t") {
		return // a continuation ("\tother declaration of X") of the error before it
	}
	pos := c.fset.Position(e.Pos)
	source, output := sources[pos.Filename]
	// A declaration of the user's and one of the output's: whichever the checker met second
	// names the other.
	if m := declaredAtRE.FindStringSubmatch(e.Msg); m != nil {
		user, out := pos, parsePos(m[2])
		if output {
			user, out = out, pos
		}
		if user.Filename != "" && !isOutput(sources, user.Filename) && isOutput(sources, out.Filename) {
			atUser.add(user, "", "with the generated code, package %s would not compile: the generated %s declares %s as well; rename yours",
				c.name, filepath.Base(out.Filename), m[1])
			return
		}
	}
	if !output {
		// The user's code: a declaration of its that the output's declarations make invalid
		// is a clash. Anything else is code that uses what the output declared before (a
		// method since renamed or made one-way, a message since changed), which the user
		// fixes once the output is there.
		if clashAtUserRE.MatchString(e.Msg) {
			atUser.add(pos, "", "with the generated code, package %s would not compile: %s", c.name,
				strings.ReplaceAll(e.Msg, dir+string(filepath.Separator), ""))
		}
		return
	}
	if strings.HasPrefix(e.Msg, "could not import ") {
		// The module cannot import what the output imports (it does not require the zlink
		// module yet, say): no clash to judge, and the build names what is missing.
		return
	}
	if m := dotImportedRE.FindStringSubmatch(e.Msg); m != nil {
		if at, ok := dotImportOf(c, m[2]); ok {
			atUser.add(at, "", "the dot import of %q brings %s into the file, and the generated code declares %s in the package; import it by name",
				m[2], m[1], m[1])
			return
		}
	}
	inOutput.add(token.Position{Filename: source}, "", "the generated %s would not compile in package %s: %s: %s",
		filepath.Base(pos.Filename), c.name, positionIn(pos), strings.ReplaceAll(e.Msg, dir+string(filepath.Separator), ""))
}

// The type checker's words for a clash at the user's code (a declaration that another makes
// invalid), with a name that a dot import brings in, and with a declaration elsewhere
// ("method RoomRef.Join already declared at room.go:4:18").
var (
	clashAtUserRE = regexp.MustCompile(`redeclared|already declared|field and method with the same name|ambiguous selector|` +
		`duplicate (method|field)|invalid recursive type|initialization cycle`)
	dotImportedRE = regexp.MustCompile(`^(\w+) already declared through dot-import of package \w+ \("([^"]+)"\)$`)
	declaredAtRE  = regexp.MustCompile(`^(.+) already declared at (\S+)$`)
)

// isOutput reports whether path is one of the run's outputs.
func isOutput(sources map[string]string, path string) bool {
	_, ok := sources[path]
	return ok
}

// dotImportOf finds the dot import of the package at importPath in c's files.
func dotImportOf(c checkedPackage, importPath string) (token.Position, bool) {
	for _, f := range c.files {
		for _, spec := range f.Imports {
			if spec.Name != nil && spec.Name.Name == "." && strings.Trim(spec.Path.Value, "`\"") == importPath {
				return c.fset.Position(spec.Pos()), true
			}
		}
	}
	return token.Position{}, false
}

// positionIn renders pos as "line:col" of its file, or "line" without a column.
func positionIn(pos token.Position) string {
	if pos.Column == 0 {
		return fmt.Sprint(pos.Line)
	}
	return fmt.Sprintf("%d:%d", pos.Line, pos.Column)
}

// errNotLoaded is the answer of checkHere's importer for a package the first load did not
// import.
var errNotLoaded = errors.New("not imported by the package as loaded")

// checkHere type-checks p with its outputs among results in place of the files zlinkgen
// generated earlier, against the packages that p and sdk, loaded with it, import. It reports
// false when that cannot tell: an output imports a package that neither imports in full
// (directly or through their imports), or p uses cgo. A reference of p to a name that another
// package of the run generates is no clash: that package was imported without its output.
func checkHere(p, sdk *packages.Package, results []Result, generated map[GoImportPath]map[string]bool) (checkedPackage, bool) {
	if p.Types == nil || p.Fset == nil || len(p.Syntax) != len(p.CompiledGoFiles) || !slices.Equal(p.GoFiles, p.CompiledGoFiles) {
		return checkedPackage{}, false // cgo, or what go/packages did not type-check from source
	}
	mine := map[string]bool{}
	for _, f := range p.GoFiles {
		mine[f] = true
	}
	replaced := map[string]bool{}
	var outputs []*ast.File
	for _, r := range results {
		if r.Remove && mine[r.Path] {
			replaced[r.Path] = true
		}
		if r.Content == nil || !mine[r.Source] {
			continue
		}
		replaced[r.Path] = true
		f, err := parser.ParseFile(p.Fset, r.Path, r.Content, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return checkedPackage{}, false
		}
		outputs = append(outputs, f)
	}
	var files []*ast.File
	for _, f := range p.Syntax {
		if !replaced[p.Fset.Position(f.FileStart).Filename] {
			files = append(files, f)
		}
	}
	files = append(files, outputs...)

	imported := map[string]*types.Package{}
	var walk func(*types.Package)
	walk = func(t *types.Package) {
		for _, i := range t.Imports() {
			if imported[i.Path()] == nil {
				imported[i.Path()] = i
				walk(i)
			}
		}
	}
	walk(p.Types)
	if sdk != nil {
		imported[sdk.PkgPath] = sdk.Types
		walk(sdk.Types)
	}
	missing := false
	c := checkedPackage{name: p.Name, fset: p.Fset, files: files}
	conf := types.Config{
		Sizes: p.TypesSizes,
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if path == "unsafe" {
				return types.Unsafe, nil
			}
			// A package reached only through another's export data is known in part: what
			// that package's API mentions of it.
			if t := imported[path]; t != nil && t.Complete() {
				return t, nil
			}
			missing = true
			return nil, errNotLoaded
		}),
		Error: func(err error) {
			if e, ok := err.(types.Error); ok {
				c.errs = append(c.errs, e)
			}
		},
	}
	_, _ = conf.Check(p.PkgPath, p.Fset, files, nil)
	if missing {
		return checkedPackage{}, false
	}
	c.errs = tolerated(p, c.errs, generated)
	return c, true
}

// tolerated leaves out of errs, p's type errors with its output in place, those that only say
// that another package of the run lacks a name this run generates for it: that package was
// imported without its output.
func tolerated(p *packages.Package, errs []types.Error, generated map[GoImportPath]map[string]bool) []types.Error {
	return slices.DeleteFunc(errs, func(e types.Error) bool {
		pe := packages.Error{Pos: e.Fset.Position(e.Pos).String(), Msg: e.Msg, Kind: packages.TypeError}
		return refersToGenerated(p, e.Fset, pe, generated)
	})
}

// hasOutput reports whether results write or remove a file of p.
func hasOutput(p *packages.Package, results []Result) bool {
	for _, r := range results {
		if r.Content != nil && slices.Contains(p.GoFiles, r.Source) || r.Remove && slices.Contains(p.GoFiles, r.Path) {
			return true
		}
	}
	return false
}

// importerFunc is a types.Importer of a function.
type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// checkByLoading type-checks the run's packages with the go command, results in place of
// their outputs.
func checkByLoading(ctx context.Context, cfg Config, patterns []string, loaded []*packages.Package, results []Result, generated map[GoImportPath]map[string]bool) ([]checkedPackage, error) {
	overlay := map[string][]byte{}
	if slices.ContainsFunc(patterns, namedFile) {
		// Named files make a package of just those files, but the outputs land in their
		// directory's package: that package is checked, the files not named included.
		var dirs []string
		for _, p := range patterns {
			if !filepath.IsAbs(p) {
				p = filepath.Join(cfg.Dir, p)
			}
			if d := filepath.Dir(p); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		patterns = dirs
	}
	for _, r := range results {
		switch {
		case r.Remove:
			if name, ok := packageOfFile(loaded, r.Path); ok {
				overlay[r.Path] = []byte("package " + name + "\n")
			}
		case r.Content != nil:
			overlay[r.Path] = r.Content
		}
	}
	fset := token.NewFileSet()
	withOutput := cfg.packages(ctx, loadMode)
	withOutput.Fset, withOutput.Overlay = fset, overlay
	pkgs, err := packages.Load(withOutput, patterns...)
	if err != nil {
		return nil, fmt.Errorf("zlinkgen: check the output: load %s: %w", strings.Join(patterns, " "), err)
	}
	var checked []checkedPackage
	for _, p := range pkgs {
		checked = append(checked, checkedPackage{name: p.Name, fset: fset, files: p.Syntax, errs: tolerated(p, slices.Clone(p.TypeErrors), generated)})
	}
	return checked, nil
}

// packageOfFile names the package of loaded that path, one of its Go files, belongs to.
func packageOfFile(loaded []*packages.Package, path string) (string, bool) {
	for _, p := range loaded {
		if slices.Contains(p.GoFiles, path) {
			return p.Name, true
		}
	}
	return "", false
}
