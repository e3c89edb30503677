package gen

import (
	"bytes"
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

// buildConstraint returns the build constraint of a Go file whose source is src, or nil, read
// as the go command reads it: its //go:build line, if one comes before the first text that is
// not a comment; else its // +build lines (all of them must hold), of which only those count
// that come before the last blank line of the file's leading run of blank lines and //
// comments (a /* */ comment ends that run, and a // +build line right above the package
// clause is its doc comment, not a constraint).
func buildConstraint(src []byte) constraint.Expr {
	src = bytes.TrimPrefix(src, []byte("\ufeff")) // a byte order mark, which the go command drops
	var (
		goBuild   constraint.Expr
		plus      []string // the // +build lines so far, with the offset where each began
		plusAt    []int
		header    = 0     // the offset after the last blank line of the leading run
		ended     = false // a line other than a blank line or a // comment was met
		inComment = false // inside a /* */ comment
	)
	for rest, at := src, 0; len(rest) > 0; {
		line, next, found := bytes.Cut(rest, []byte("\n"))
		lineAt := at
		if at += len(line); found {
			at++
		}
		rest = next
		text := bytes.TrimSpace(line)
		if len(text) == 0 && !ended {
			header = at
			continue
		}
		if !bytes.HasPrefix(text, []byte("//")) {
			ended = true
		}
		if !inComment && goBuild == nil && constraint.IsGoBuild(string(text)) {
			if x, err := constraint.Parse(string(text)); err == nil {
				goBuild = x
			}
		}
		if !inComment && !ended && constraint.IsPlusBuild(string(text)) {
			plus, plusAt = append(plus, string(text)), append(plusAt, lineAt)
		}
		// Past the comments on this line, is there text? Then the header is over.
		for len(text) > 0 {
			switch {
			case inComment:
				i := bytes.Index(text, []byte("*/"))
				if i < 0 {
					text = nil
					continue
				}
				inComment, text = false, bytes.TrimSpace(text[i+2:])
			case bytes.HasPrefix(text, []byte("//")):
				text = nil
			case bytes.HasPrefix(text, []byte("/*")):
				inComment, text = true, text[2:]
			default:
				return decide(goBuild, plus, plusAt, header)
			}
		}
	}
	return decide(goBuild, plus, plusAt, header) // a file with no code: what its comments say
}

// decide is buildConstraint's answer: goBuild if the file has one, else the // +build lines
// that began before header, all of which must hold.
func decide(goBuild constraint.Expr, plus []string, plusAt []int, header int) constraint.Expr {
	if goBuild != nil {
		return goBuild
	}
	var x constraint.Expr
	for i, l := range plus {
		if plusAt[i] >= header {
			break
		}
		if y, err := constraint.Parse(l); err == nil {
			x = and(x, y)
		}
	}
	return x
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
			if len(tags) <= maxTags && x.Tag != "ignore" && !slices.Contains(tags, x.Tag) { // past the bound, one more tells
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
	// As the go command reads the name: up to its first dot (room.api_linux.go is no Linux file).
	name, _, _ := strings.Cut(filepath.Base(source), ".")
	parts := strings.Split(name, "_")
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
