package gen

import (
	"go/ast"
	"go/build/constraint"
	"path/filepath"
	"slices"
	"strings"
)

// The GOOS and GOARCH values that a file name suffix constrains a file to (go/build's lists).
var (
	knownOS = []string{"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js",
		"linux", "nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos"}
	knownArch = []string{"386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64", "mips",
		"mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le", "riscv",
		"riscv64", "s390", "s390x", "sparc", "sparc64", "wasm"}
)

// buildConstraint returns the build constraint of f, or nil: its //go:build line, or else its
// // +build lines (all of them must hold), in every spelling the go command accepts. Only the
// comments before the package clause count. As for the go command, a //go:build line counts
// in the package's doc comment too (directly above the package clause), a // +build line
// only in a comment group of its own.
func buildConstraint(f *ast.File) constraint.Expr {
	var plus constraint.Expr
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			switch {
			case constraint.IsGoBuild(c.Text):
				if x, err := constraint.Parse(c.Text); err == nil {
					return x
				}
			case constraint.IsPlusBuild(c.Text) && g != f.Doc:
				if x, err := constraint.Parse(c.Text); err == nil {
					plus = and(plus, x)
				}
			}
		}
	}
	return plus
}

// maxTags bounds the distinct tags of a build constraint that canHold tries every assignment
// of; beyond it, a constraint is taken to hold in some build.
const maxTags = 12

// canHold reports whether some build satisfies x: whether an assignment of its tags, the tag
// "ignore" false (the tag no build sets, by convention), makes x true. A file whose
// constraint cannot hold, such as //go:build ignore, belongs to no build of its package.
func canHold(x constraint.Expr) bool {
	var tags []string
	var walk func(constraint.Expr)
	walk = func(x constraint.Expr) {
		switch x := x.(type) {
		case *constraint.TagExpr:
			if x.Tag != "ignore" && !slices.Contains(tags, x.Tag) {
				tags = append(tags, x.Tag)
			}
		case *constraint.NotExpr:
			walk(x.X)
		case *constraint.AndExpr:
			walk(x.X)
			walk(x.Y)
		case *constraint.OrExpr:
			walk(x.X)
			walk(x.Y)
		}
	}
	walk(x)
	if len(tags) > maxTags {
		return true
	}
	for set := 0; set < 1<<len(tags); set++ {
		if x.Eval(func(tag string) bool {
			i := slices.Index(tags, tag)
			return i >= 0 && set&(1<<i) != 0
		}) {
			return true
		}
	}
	return false
}

// and returns x && y; a nil operand is true.
func and(x, y constraint.Expr) constraint.Expr {
	if x == nil {
		return y
	}
	return &constraint.AndExpr{X: x, Y: y}
}

// outputConstraint returns the //go:build line of the output of source, whose own build
// constraint is expr (or nil), or "": the output must build exactly when its input does. A
// file name suffix such as _linux or _linux_arm64 constrains the input, but the output's
// name ends in _zlink, so the suffix becomes part of the output's //go:build line. A cgo
// input (one that imports "C") builds only with cgo, and its output imports no "C": cgo is a
// term too.
func outputConstraint(source string, expr constraint.Expr, cgo bool) string {
	var x constraint.Expr
	if cgo {
		x = and(x, &constraint.TagExpr{Tag: "cgo"})
	}
	parts := strings.Split(strings.TrimSuffix(filepath.Base(source), ".go"), "_")
	if n := len(parts); n >= 3 && slices.Contains(knownOS, parts[n-2]) && slices.Contains(knownArch, parts[n-1]) {
		x = and(and(x, &constraint.TagExpr{Tag: parts[n-2]}), &constraint.TagExpr{Tag: parts[n-1]})
	} else if n >= 2 && (slices.Contains(knownOS, parts[n-1]) || slices.Contains(knownArch, parts[n-1])) {
		x = and(x, &constraint.TagExpr{Tag: parts[n-1]})
	}
	if expr != nil {
		x = and(x, expr)
	}
	if x == nil {
		return ""
	}
	return "//go:build " + x.String()
}
