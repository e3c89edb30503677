package gen_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ruleID matches a rule ID of the design documents in parentheses, such as "(B1)",
// "(A2, B5)" or "(default 30 s, F8)". A reader of the public docs cannot look those up, so
// exported doc comments say the rule in words; internal comments and test names keep the IDs.
var ruleID = regexp.MustCompile(`\([^()]*\b[A-K][0-9]{1,2}\b[^()]*\)`)

// TestExportedDocsHaveNoRuleIDs reads the exported doc comments (package, constants,
// variables, types with their fields and methods, functions) of the public packages and of
// every generated file, the golden outputs included, and fails on a rule ID in any of them.
func TestExportedDocsHaveNoRuleIDs(t *testing.T) {
	dirs := []string{"../sdk", "../rt", "../rt/devetcd", "e2e/sample", "../examples/chat/chat", "../bench/peers/zl"}
	// The golden cases whose want/ holds generated files (the others hold errors.txt).
	wants, err := filepath.Glob("testdata/*/want/*_zlink.go")
	require.NoError(t, err)
	require.NotEmpty(t, wants)
	for _, w := range wants {
		if d := filepath.Dir(w); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			for _, c := range exportedDocs(t, dir) {
				for i, line := range strings.Split(c.text, "\n") {
					if ruleID.MatchString(line) {
						t.Errorf("%s: a rule ID in the exported doc of %s (line %d): %q", c.pos, c.name, i+1, line)
					}
				}
			}
		})
	}
}

type docComment struct {
	name string
	pos  token.Position
	text string
}

// exportedDocs returns the doc comments go doc shows for the package in dir: those of its
// exported declarations only, read through go/doc from the non-test .go files.
func exportedDocs(t *testing.T, dir string) []docComment {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files, "no Go files in %s", dir)
	pkg, err := doc.NewFromFiles(fset, files, "example.com/"+filepath.Base(dir))
	require.NoError(t, err)

	var out []docComment
	add := func(name string, pos token.Pos, text string) {
		if text != "" {
			out = append(out, docComment{name: name, pos: fset.Position(pos), text: text})
		}
	}
	group := func(name string, g *ast.CommentGroup) {
		if g != nil {
			add(name, g.Pos(), g.Text())
		}
	}
	// decl adds the comments inside a declaration that go doc prints with it: those of its
	// specs and of the exported fields and methods of its struct and interface types (go/doc
	// has already removed the unexported ones).
	decl := func(name string, d *ast.GenDecl) {
		ast.Inspect(d, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				group(name, n.Doc)
				group(name, n.Comment)
			case *ast.TypeSpec:
				group(name, n.Doc)
				group(name, n.Comment)
			case *ast.Field:
				group(name, n.Doc)
				group(name, n.Comment)
			}
			return true
		})
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			add(strings.Join(v.Names, ", "), v.Decl.Pos(), v.Doc)
			decl(strings.Join(v.Names, ", "), v.Decl)
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			name := f.Name
			if f.Recv != "" {
				name = f.Recv + "." + f.Name
			}
			add(name, f.Decl.Pos(), f.Doc)
		}
	}
	add("package "+pkg.Name, files[0].Package, pkg.Doc)
	values(pkg.Consts)
	values(pkg.Vars)
	funcs(pkg.Funcs)
	for _, ty := range pkg.Types {
		add(ty.Name, ty.Decl.Pos(), ty.Doc)
		decl(ty.Name, ty.Decl)
		values(ty.Consts)
		values(ty.Vars)
		funcs(ty.Funcs)
		funcs(ty.Methods)
	}
	return out
}
