package gen

import (
	"errors"
	"go/ast"
	"go/build/constraint"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

func TestGuardTurnsAPanicIntoAnError(t *testing.T) {
	results, err := guard(func() ([]Result, error) {
		var m map[string]*Interface
		_ = m["x"].Name // a nil dereference inside the generator
		return []Result{{Path: "unreachable"}}, nil
	})
	require.Error(t, err)
	assert.Nil(t, results)
	assert.Contains(t, err.Error(), "zlinkgen: internal error")
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Pos: token.Position{Filename: "room.go", Line: 12, Column: 2}, Where: "Room.Join", Msg: "what is wrong"}
	assert.Equal(t, "room.go:12:2: zlinkgen: Room.Join: what is wrong", e.Error())
	list := ErrorList{e, {Msg: "no position"}}
	assert.Equal(t, "room.go:12:2: zlinkgen: Room.Join: what is wrong\nzlinkgen: no position", list.Error())
	var got *Error
	require.True(t, errors.As(error(list), &got))
	assert.Same(t, e, got)
}

func TestParseDirective(t *testing.T) {
	d, ok := parseDirective(&ast.Comment{Text: "//zlink:spot instance  idle=5m name=chat.Room"})
	require.True(t, ok)
	assert.Equal(t, "spot", d.name)
	require.Len(t, d.args, 3)
	assert.Equal(t, directiveArg{"instance", 13}, d.args[0])
	assert.Equal(t, directiveArg{"idle=5m", 23}, d.args[1])
	_, ok = parseDirective(&ast.Comment{Text: "// zlink:spot instance"})
	assert.False(t, ok, "a space after the slashes makes it prose, like //go: directives")
}

func TestSpotDirectiveOptions(t *testing.T) {
	fset := token.NewFileSet()
	fset.AddFile("x.go", -1, 1000)
	errs := &errorCollector{}
	p := directiveParser{fset: fset, errs: errs}
	d, _ := parseDirective(&ast.Comment{Slash: 1, Text: "//zlink:spot instance idle=90s name=a.B"})
	s, ok := p.spot(d, "B")
	require.True(t, ok, "%v", errs.errs)
	assert.Equal(t, sdk.KindInstance, s.kind)
	assert.Equal(t, "a.B", s.name)
	assert.Equal(t, "1m30s", s.idle.String())

	for _, bad := range []string{
		"//zlink:spot", "//zlink:spot Instance", "//zlink:spot user idle=1m", "//zlink:spot instance idle=0s",
		"//zlink:spot instance idle=x", "//zlink:spot instance name=", "//zlink:spot instance x=1", "//zlink:spot entry user",
	} {
		errs.errs = nil
		d, _ := parseDirective(&ast.Comment{Slash: 1, Text: bad})
		_, ok := p.spot(d, "B")
		assert.False(t, ok, bad)
		assert.NotEmpty(t, errs.errs, bad)
	}
}

func TestChannelDirectiveOptions(t *testing.T) {
	fset := token.NewFileSet()
	fset.AddFile("x.go", -1, 1000)
	errs := &errorCollector{}
	p := directiveParser{fset: fset, errs: errs}
	for text, want := range map[string]channelDirective{
		"//zlink:server channel=matchmaker": {kind: sdk.ChannelClientServer, name: "matchmaker"},
		"//zlink:fanout channel=results":    {kind: sdk.ChannelFanout, name: "results"},
		"//zlink:server":                    {kind: sdk.ChannelClientServer},
		"//zlink:fanout":                    {kind: sdk.ChannelFanout},
	} {
		d, _ := parseDirective(&ast.Comment{Slash: 1, Text: text})
		c, ok := p.channel(d, "B")
		require.True(t, ok, "%s: %v", text, errs.errs)
		assert.Equal(t, want, c, text)
	}

	for _, bad := range []string{
		"//zlink:server channel=", "//zlink:server channel", "//zlink:fanout channel=a/b", "//zlink:server idle=5m",
		"//zlink:fanout name=a.B", "//zlink:server instance", "//zlink:fanout color=red", "//zlink:server channel=a channel=b",
	} {
		errs.errs = nil
		d, _ := parseDirective(&ast.Comment{Slash: 1, Text: bad})
		_, ok := p.channel(d, "B")
		assert.False(t, ok, bad)
		assert.NotEmpty(t, errs.errs, bad)
	}
	// A stray option names the one a channel takes.
	errs.errs = nil
	d, _ := parseDirective(&ast.Comment{Slash: 1, Text: "//zlink:fanout idle=5m"})
	p.channel(d, "B")
	require.Len(t, errs.errs, 1)
	assert.Contains(t, errs.errs[0].Msg, "channel=")
}

// The generated names of a channel follow its interface's name; a Fanout channel has no
// RegisterXServer and a ClientServer channel no SubscribeX.
func TestChannelNames(t *testing.T) {
	server := &Interface{Name: "Matchmaker", Channel: sdk.ChannelClientServer, Methods: []*Method{{Name: "Find"}}}
	assert.Equal(t, []string{
		"MatchmakerChannelName", "Matchmaker_ChannelDesc", "RegisterMatchmakerServer", "MatchmakerClientRef", "MatchmakerClient",
		"Matchmaker_Find_FullMethodName",
	}, topLevel(server))
	fanout := &Interface{Name: "Results", Channel: sdk.ChannelFanout, Methods: []*Method{{Name: "Reported"}}}
	assert.Equal(t, []string{
		"ResultsChannelName", "Results_ChannelDesc", "ResultsPublisherRef", "ResultsPublisher", "SubscribeResults",
		"Results_Reported_FullMethodName",
	}, topLevel(fanout))
	assert.Empty(t, refMethods(server))
	assert.Empty(t, refMethods(fanout))
	assert.Equal(t, "channel", objectWord(fanout))
}

func TestParsePos(t *testing.T) {
	assert.Equal(t, token.Position{Filename: "/a/b.go", Line: 3, Column: 7}, parsePos("/a/b.go:3:7"))
	assert.Equal(t, token.Position{Filename: "/a/b.go", Line: 3}, parsePos("/a/b.go:3"))
	assert.Equal(t, token.Position{Filename: "/a/b"}, parsePos("/a/b"))
	assert.Equal(t, token.Position{}, parsePos("-"))
}

func TestOutPath(t *testing.T) {
	assert.Equal(t, "/x/room_zlink.go", outPath("/x/room.go"))
	assert.Equal(t, "/x/room_linux_zlink.go", outPath("/x/room_linux.go"))
}

func TestOutputConstraint(t *testing.T) {
	expr := func(line string) constraint.Expr {
		x, err := constraint.Parse(line)
		require.NoError(t, err)
		return x
	}
	assert.Equal(t, "", outputConstraint("/x/room.go", nil, false))
	assert.Equal(t, "//go:build foo", outputConstraint("/x/room.go", expr("//go:build foo"), false))
	assert.Equal(t, "//go:build linux", outputConstraint("/x/room_linux.go", nil, false))
	assert.Equal(t, "//go:build linux && arm64", outputConstraint("/x/room_linux_arm64.go", nil, false))
	assert.Equal(t, "//go:build amd64 && (foo || bar)", outputConstraint("/x/room_amd64.go", expr("//go:build foo || bar"), false))
	assert.Equal(t, "//go:build cgo && linux && !foo", outputConstraint("/x/room_linux.go", expr("//go:build !foo"), true))
	assert.Equal(t, "", outputConstraint("/x/linux.go", nil, false), "a name that is only the OS is no constraint")
	assert.Equal(t, "", outputConstraint("/x/room.api_linux.go", nil, false), "the go command reads a name up to its first dot")
}

func TestBuildConstraintReadsEverySpelling(t *testing.T) {
	for src, want := range map[string]string{
		"//go:build special\n\npackage p\n":                     "special",
		"//go:build\tspecial\n\npackage p\n":                    "special",
		"// +build special\n\npackage p\n":                      "special",
		"// +build a b\n// +build c,!d\n\npackage p\n":          "(a || b) && c && !d",
		"// +build old\n//go:build new\n\npackage p\n":          "new",
		"// Package p is a package.\n// +build no\npackage p\n": "",
		"package p\n\n// +build no\n":                           "",
		"//go:build linux\npackage p\n":                         "linux",
		"/* c */\n//go:build linux\n\npackage p\n":              "linux",
		// A /* */ comment ends the lines where // +build counts, as for the go command.
		"/* Copyright. */\n// +build ignore\n\npackage p\n": "",
		"// +build ignore\n/* c */\n\npackage p\n":          "",
		"// +build a\n\n// +build b\n\npackage p\n":         "a && b",
		"// +build a\n\n// +build b\npackage p\n":           "a",
		"package p\n//go:build no\n":                        "",
		"/* //go:build no */ package p\n":                   "",
		"\ufeff//go:build linux\n\npackage p\n":             "linux",
		"\ufeff// +build linux\n\npackage p\n":              "linux",
		"// +build linux\n\n// only comments\n":             "linux",
	} {
		got := ""
		if x := buildConstraint([]byte(src)); x != nil {
			got = x.String()
		}
		assert.Equal(t, want, got, "%q", src)
	}
}

func TestCanImportFollowsTheInternalRule(t *testing.T) {
	assert.True(t, canImport("a/b", "c/d"))
	assert.True(t, canImport("a/b", "a/internal/x"))
	assert.True(t, canImport("a", "a/internal"))
	assert.False(t, canImport("a/b/c", "a/b/internal/x/internal/y"), "the last internal decides")
	assert.True(t, canImport("a/b/internal/x/z", "a/b/internal/x/internal/y"))
	assert.False(t, canImport("c/d", "a/internal/x"))
	assert.False(t, canImport("ab/c", "a/internal/x"), "a prefix of the path is not its tree")
	assert.False(t, canImport("example.com/m", "internal/poll"))
}

func TestCanHold(t *testing.T) {
	for line, want := range map[string]bool{
		"//go:build ignore":                 false,
		"//go:build !ignore":                true,
		"//go:build linux":                  true,
		"//go:build linux && !linux":        false,
		"//go:build (a || ignore) && !a":    false,
		"//go:build (a || ignore) && b":     true,
		"//go:build a && b && c && !(a&&b)": false,
		"//go:build t1 && t2 && t3 && t4 && t5 && t6 && t7 && t8 && t9 && t10 && t11 && t12 && t13 && !t1": true,
	} {
		x, err := constraint.Parse(line)
		require.NoError(t, err, line)
		assert.Equal(t, want, canHold(x), line)
	}
}
