package gen

import (
	"go/ast"
	"go/build/constraint"
	"go/token"
	"strings"
	"testing"
)

// FuzzDirectives feeds any text after //zlink: to the directive parser: it never panics, and
// every problem it reports is placed on the comment itself.
func FuzzDirectives(f *testing.F) {
	for _, seed := range []string{
		"spot instance", "spot instance idle=5m name=chat.Room", "spot user idle=5m", "spot", "send",
		"send now", "", "spot entry entry", "spot instance idle=-1s", "spot instance name=", "spot Instance",
		"spot instance idle=5m idle=6m", "frobnicate", "spot\tuser\tname=a/b", "spot instance name=\x00",
		"actor", "actor name=game.Pawn", "actor idle=5m", "actor instance", "actor name=a name=b", "spot actor", "spot Actor",
		"server", "server channel=matchmaker", "fanout channel=results", "server channel", "fanout channel=", "server idle=5m",
		"fanout name=a.B", "server channel=a channel=b", "fanout user", "server channel=a/b", "fanout\tchannel=x\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if strings.ContainsAny(text, "\n\r") {
			return // a // comment ends at the line's end
		}
		fset := token.NewFileSet()
		comment := "//zlink:" + text
		file := fset.AddFile("room.go", -1, len(comment)+1)
		c := &ast.Comment{Slash: token.Pos(file.Base()), Text: comment}
		d, ok := parseDirective(c)
		if !ok {
			t.Fatalf("a //zlink: comment was not taken for a directive: %q", comment)
		}
		errs := &errorCollector{}
		p := &directiveParser{fset: fset, errs: errs}
		if p.known(d, "Room") {
			switch d.name {
			case "spot", "actor":
				p.spot(d, "Room")
			case "server", "fanout":
				p.channel(d, "Room")
			case "send":
				p.send(d, "Room")
			}
		}
		for _, e := range errs.errs {
			if e.Pos.Filename != "room.go" || e.Pos.Line != 1 || e.Pos.Column < 1 || e.Pos.Column > len(comment)+1 {
				t.Fatalf("problem %q placed off the comment %q: %v", e.Msg, comment, e.Pos)
			}
		}
	})
}

// FuzzBuildConstraint feeds any file header to buildConstraint: it never panics, and the
// output's //go:build line, with a file name and cgo term added, is one the go command parses
// back to the same expression.
func FuzzBuildConstraint(f *testing.F) {
	for _, seed := range []string{
		"//go:build special", "//go:build\tspecial", "// +build special", "// +build a b\n// +build c,!d",
		"//go:build (a || b) && !c", "//go:build", "// +build", "//go:build a &&", "// +build !!a", "/* x */",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		line := outputConstraint("/x/room_linux.go", buildConstraint([]byte(header+"\n\npackage p\n")), true)
		x, err := constraint.Parse(line)
		if err != nil {
			t.Fatalf("the output's %q does not parse: %v", line, err)
		}
		if got := "//go:build " + x.String(); got != line {
			t.Fatalf("the output's %q parses back as %q", line, got)
		}
	})
}
