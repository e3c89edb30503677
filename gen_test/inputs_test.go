package gen_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/gen"
)

// withoutPackageClause is fixtureRoomSrc after its package clause.
var withoutPackageClause = strings.TrimPrefix(fixtureRoomSrc, "package chat\n")

func TestACgoFileIsGeneratedBesideItsSource(t *testing.T) {
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Skip("cgo is not enabled")
	}
	dir := fixture(t, "cgo", map[string]string{
		"input/room.go": "package chat\n\n// #include <stdlib.h>\nimport \"C\"\n\n" + withoutPackageClause,
	})
	results := generateOne(t, gen.Config{Dir: dir})
	assert.Equal(t, filepath.Join(dir, "input", "room_zlink.go"), results[0].Path)
	assert.Equal(t, filepath.Join(dir, "input", "room.go"), results[0].Source)
	assert.Contains(t, string(results[0].Content), "//go:build cgo\n", "the output builds only when its input does")
	assert.Empty(t, compileErrors(t, dir, results))
}

func TestAnEmptyGoFileIsAPositionedError(t *testing.T) {
	dir := fixture(t, "empty_file", map[string]string{
		"input/room.go": fixtureRoomSrc,
		"input/junk.go": "",
	})
	list := inputErrors(t, dir)
	require.NotEmpty(t, list)
	assert.NotContains(t, list.Error(), "internal error")
	assert.Contains(t, list.Error(), "input/junk.go:1:1: zlinkgen: expected 'package', found 'EOF'")
}

func TestATestFileDeclaringAGeneratedNameIsACollision(t *testing.T) {
	dir := fixture(t, "test_file_collision", map[string]string{
		"input/room.go":      fixtureRoomSrc,
		"input/room_test.go": "package chat\n\nfunc OpenRoom() {}\n",
	})
	list := inputErrors(t, dir)
	require.Len(t, list, 1)
	assert.Equal(t, "input/room.go:10:6: zlinkgen: Room: the generated name OpenRoom collides with the func OpenRoom declared at input/room_test.go:3:6; rename one of them", list[0].Error())
}

func TestAnExternalTestPackageDoesNotCollide(t *testing.T) {
	dir := fixture(t, "external_test", map[string]string{
		"input/room.go":      fixtureRoomSrc,
		"input/room_test.go": "package chat_test\n\nfunc OpenRoom() {}\n",
	})
	_, err := generate(t, gen.Config{Dir: dir})
	require.NoError(t, err)
}

func TestOutputDoesNotDependOnTheGOOSOfTheRun(t *testing.T) {
	dir := fixture(t, "goos", map[string]string{
		"input/room.go":          fixtureRoomSrc,
		"input/other_windows.go": "package chat\n\nvar ctx = 1\n",
	})
	var outputs [][]byte
	for _, goos := range []string{"linux", "windows"} {
		results, err := generate(t, gen.Config{Dir: dir, Env: append(os.Environ(), "GOOS="+goos)})
		require.NoError(t, err, goos)
		require.Len(t, results, 1, goos)
		outputs = append(outputs, results[0].Content)
	}
	assert.True(t, bytes.Equal(outputs[0], outputs[1]), "linux:\n%s\nwindows:\n%s", outputs[0], outputs[1])
}

func TestAMessageAliasOfAnUnexportedTypeIsRefused(t *testing.T) {
	dir := fixture(t, "unexported_alias", map[string]string{
		"msgs/msgs.go": "package msgs\n\nimport \"github.com/zlink-go/zlink/gen_test/testdata/pb\"\n\n" +
			"type request struct{ pb.JoinRequest }\n\n// Request is a request.\ntype Request = request\n",
		"input/room.go": strings.NewReplacer(
			`"github.com/zlink-go/zlink/gen_test/testdata/pb"`,
			"\"github.com/zlink-go/zlink/gen_test/testdata/pb\"\n\t\"github.com/zlink-go/zlink/gen_test/testdata/tmp_unexported_alias/msgs\"",
			"req *pb.JoinRequest", "req *msgs.Request",
		).Replace(fixtureRoomSrc),
	})
	list := inputErrors(t, dir)
	require.Len(t, list, 1)
	assert.Equal(t, "input/room.go:12:32: zlinkgen: Room.Join: the request *msgs.Request is a pointer to request, which package msgs does not export: the generated code cannot name it", list[0].Error())
}

func TestAMessageOfAnInternalPackageTheSpotCannotImportIsRefused(t *testing.T) {
	const ipbPath = "github.com/zlink-go/zlink/gen_test/testdata/tmp_internal_message/lib/internal/ipb"
	dir := fixture(t, "internal_message", map[string]string{
		"lib/internal/ipb/ipb.go": "package ipb\n\nimport \"github.com/zlink-go/zlink/gen_test/testdata/pb\"\n\n" +
			"// Request is a request.\ntype Request struct{ pb.JoinRequest }\n",
		"lib/base.go": "package lib\n\nimport (\n\t\"context\"\n\n\t\"github.com/zlink-go/zlink/gen_test/testdata/pb\"\n\t\"" + ipbPath + "\"\n)\n\n" +
			"// Base is embedded.\ntype Base interface {\n\tJoin(ctx context.Context, req *ipb.Request) (*pb.JoinReply, error)\n}\n",
		"input/room.go": "package chat\n\nimport \"github.com/zlink-go/zlink/gen_test/testdata/tmp_internal_message/lib\"\n\n" +
			"//zlink:spot instance\ntype Room interface {\n\tlib.Base\n}\n",
	})
	list := inputErrors(t, dir)
	require.Len(t, list, 1)
	assert.Contains(t, list[0].Error(), "zlinkgen: Room.Join: the request *ipb.Request is a type of package "+ipbPath+", which is internal: package chat cannot import it")
}

func TestAPackageLevelDeclarationShadowingAPredeclaredNameIsRefused(t *testing.T) {
	for name, decl := range map[string]string{
		"nil":    "var nil = 0",
		"string": "type string = []byte",
		"any":    "type any = interface{ M() }",
	} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t, "predeclared_"+name, map[string]string{"input/room.go": fixtureRoomSrc + "\n" + decl + "\n"})
			list := inputErrors(t, dir)
			require.Len(t, list, 1)
			assert.Contains(t, list[0].Error(), "input/room.go:14:")
			assert.Contains(t, list[0].Error(), "the package declares "+name+", which hides the predeclared "+name+" that the generated code uses; rename it")
		})
	}
}

func TestEveryBuildConstraintSpellingIsCopiedToTheOutput(t *testing.T) {
	for name, header := range map[string]string{
		"plus_build":   "// +build special\n\n",
		"go_build_tab": "//go:build\tspecial\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t, "constraint_"+name, map[string]string{
				"input/room.go":  header + fixtureRoomSrc,
				"input/other.go": "package chat\n",
			})
			results := generateOne(t, gen.Config{Dir: dir, BuildFlags: []string{"-tags=special"}})
			assert.True(t, strings.Contains(string(results[0].Content), "\n//go:build special\n"), "%s", results[0].Content)
			assert.Empty(t, compileErrors(t, dir, results, "-tags=special"))
			assert.Empty(t, compileErrors(t, dir, results), "without the tag, the output is left out like its input")
		})
	}
}

func TestAMethodEmbeddedFromTheStandardLibraryIsReportedAtTheEmbedding(t *testing.T) {
	const module = "github.com/zlink-go/zlink/gen_test/testdata/"
	checkReportedAt(t, "std_", "$GOROOT", []reportedAt{{
		name:  "embedded",
		files: map[string]string{"input/room.go": "package chat\n\nimport \"io\"\n\n//zlink:spot user\ntype Room interface {\n\tio.Reader\n}\n"},
		at:    "input/room.go:7:2: ",
	}, {
		name: "embedded_beside_an_earlier_output",
		files: map[string]string{
			"input/room.go":        "package chat\n\nimport \"io\"\n\n//zlink:spot user\ntype Room interface {\n\tio.Reader\n}\n",
			"input/other_zlink.go": earlierOutput,
		},
		at: "input/room.go:7:2: ",
	}, {
		name: "through_a_chain",
		files: map[string]string{
			"input/room.go": "package chat\n\nimport \"" + module + "tmp_std_through_a_chain/near\"\n\n//zlink:spot user\ntype Room near.Relay\n",
			"near/near.go":  "package near\n\nimport \"io\"\n\n// Relay is defined from io.Reader.\ntype Relay io.Reader\n",
		},
		at: "input/room.go:6:6: ",
	}, {
		name: "through_a_chain_beside_an_earlier_output",
		files: map[string]string{
			"input/room.go":        "package chat\n\nimport \"" + module + "tmp_std_through_a_chain_beside_an_earlier_output/near\"\n\n//zlink:spot user\ntype Room near.Relay\n",
			"input/other_zlink.go": earlierOutput,
			"near/near.go":         "package near\n\nimport \"io\"\n\n// Relay is defined from io.Reader.\ntype Relay io.Reader\n",
		},
		at: "input/room.go:6:6: ",
	}})
}

// A problem of an embedding inside another module's interface is reported at the user's
// embedding that leads there, as a problem of its methods is.
func TestAProblemOfAnEmbeddingInAnotherModuleIsReportedAtTheUsersEmbedding(t *testing.T) {
	fixture(t, "mod_generic_embedded_there", map[string]string{
		"far/far.go": "package far\n\nimport \"context\"\n\n// G is generic.\ntype G[T any] interface {\n\tBad(ctx context.Context, msg T) error\n}\n\n" +
			"// Hop embeds an instance of G.\ntype Hop interface {\n\tG[int]\n}\n",
	})
	// The fixture is this module's; the temporary module's Spot is in another one.
	dir := tempModule(t, map[string]string{
		"chat/room.go": "package chat\n\nimport \"github.com/zlink-go/zlink/gen_test/testdata/tmp_mod_generic_embedded_there/far\"\n\n" +
			"//zlink:spot user\ntype Room interface {\n\tfar.Hop\n}\n",
	})
	_, err := gen.Generate(context.Background(), gen.Config{Dir: dir, Env: moduleEnv()}, []string{"./chat"})
	var list gen.ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 1)
	assert.Equal(t, "chat/room.go:7:2: zlinkgen: Room: embeds the generic interface G, which is not supported", list[0].Error())
}

// The go command is asked whose a file is only for the files that problems are found in: a
// run without problems asks nothing more of it, and a run with two problems in one file asks
// once for that file's directory and once for the embedding's that leads there.
func TestOnlyAProblemAsksTheGoCommandWhoseFileItIsIn(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the go command is wrapped by a shell script")
	}
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err)
	goCmd, err = filepath.Abs(goCmd)
	require.NoError(t, err)
	bin, log := t.TempDir(), filepath.Join(t.TempDir(), "go.log")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" + log + "'\nexec '" + goCmd + "' \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "go"), []byte(script), 0o755))
	// The go command is found on this process's PATH, not on the run's environment's.
	t.Setenv("PATH", bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	// The question is a listing of a file's package with its module, without its dependencies
	// (-find): the load of the packages asks for their modules too, with them.
	asked := func() int {
		out, err := os.ReadFile(log)
		require.NoError(t, err)
		require.NoError(t, os.Remove(log))
		n := 0
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, ",Module ") && strings.Contains(line, " -find=true ") {
				n++
			}
		}
		return n
	}
	const module = "github.com/zlink-go/zlink/gen_test/testdata/"
	for _, c := range []struct {
		name, near string
		asked      int
	}{{
		name:  "without_problems",
		near:  "package near\n\nimport (\n\t\"context\"\n\n\t\"" + module + "pb\"\n)\n\n// Relay answers pings.\ntype Relay interface {\n\tPing(ctx context.Context, req *pb.Ping) (*pb.Pong, error)\n}\n",
		asked: 0,
	}, {
		name:  "with_problems",
		near:  "package near\n\nimport \"google.golang.org/protobuf/reflect/protoreflect\"\n\n// Relay embeds protoreflect.ProtoMessage.\ntype Relay interface {\n\tprotoreflect.ProtoMessage\n}\n",
		asked: 2,
	}} {
		t.Run(c.name, func(t *testing.T) {
			dir := fixture(t, "ask_"+c.name, map[string]string{
				"input/room.go": "package chat\n\nimport \"" + module + "tmp_ask_" + c.name + "/near\"\n\n//zlink:spot user\ntype Room interface {\n\tnear.Relay\n}\n",
				"near/near.go":  c.near,
			})
			_, err := gen.Generate(context.Background(), gen.Config{Dir: dir}, []string{"./input"})
			if c.asked == 0 {
				require.NoError(t, err)
			} else {
				var list gen.ErrorList
				require.ErrorAs(t, err, &list)
				require.Len(t, list, 2, "two problems of ProtoReflect")
			}
			assert.Equal(t, c.asked, asked())
		})
	}
}

// earlierOutput is a file that zlinkgen generated earlier in a fixture's package: beside it,
// the run loads the dependencies from source, where their positions are files.
const earlierOutput = "// Code generated by zlinkgen v0.1.0. DO NOT EDIT.\n\npackage chat\n"

// reportedAt is a fixture whose every problem is reported at one position.
type reportedAt struct {
	name  string
	files map[string]string
	at    string // how each error starts: "input/room.go:7:2: "
}

// checkReportedAt runs each case as the fixture prefix+name: it has problems, each reported
// at the case's position and none naming notIn.
func checkReportedAt(t *testing.T, prefix, notIn string, cases []reportedAt) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			list := inputErrors(t, fixture(t, prefix+c.name, c.files))
			require.NotEmpty(t, list)
			for _, e := range list {
				assert.NotContains(t, e.Error(), notIn)
				assert.True(t, strings.HasPrefix(e.Error(), c.at), "%v", e)
			}
		})
	}
}

// A method declared in another module, whose files are the module cache's, is reported where
// the Spot's package brings it in: embedded, or through a chain of its own package's types.
// One of the module itself is reported at its declaration (the golden case err_defined).
func TestAMethodEmbeddedFromAnotherModuleIsReportedAtTheEmbedding(t *testing.T) {
	const module = "github.com/zlink-go/zlink/gen_test/testdata/"
	embedded := "package chat\n\nimport \"google.golang.org/protobuf/reflect/protoreflect\"\n\n//zlink:spot user\ntype Room interface {\n\tprotoreflect.ProtoMessage\n}\n"
	checkReportedAt(t, "mod_", "protobuf@", []reportedAt{{
		name:  "embedded",
		files: map[string]string{"input/room.go": embedded},
		at:    "input/room.go:7:2: ",
	}, {
		name:  "embedded_beside_an_earlier_output",
		files: map[string]string{"input/room.go": embedded, "input/other_zlink.go": earlierOutput},
		at:    "input/room.go:7:2: ",
	}, {
		name: "through_a_chain",
		files: map[string]string{
			"input/room.go": "package chat\n\nimport \"" + module + "tmp_mod_through_a_chain/near\"\n\n//zlink:spot user\ntype Room near.Relay\n",
			"near/near.go":  "package near\n\nimport \"google.golang.org/protobuf/reflect/protoreflect\"\n\n// Relay is defined from protoreflect.ProtoMessage.\ntype Relay protoreflect.ProtoMessage\n",
		},
		at: "input/room.go:6:6: ",
	}, {
		name: "embedded_in_an_interface_of_the_module",
		files: map[string]string{
			"input/room.go": "package chat\n\nimport \"" + module + "tmp_mod_embedded_in_an_interface_of_the_module/near\"\n\n//zlink:spot user\ntype Room interface {\n\tnear.Relay\n}\n",
			"near/near.go":  "package near\n\nimport \"google.golang.org/protobuf/reflect/protoreflect\"\n\n// Relay embeds protoreflect.ProtoMessage.\ntype Relay interface {\n\tprotoreflect.ProtoMessage\n}\n",
		},
		at: "near/near.go:7:2: ",
	}})
}

func TestAGoBuildLineRightAbovePackageIsCopiedToTheOutput(t *testing.T) {
	dir := fixture(t, "go_build_doc", map[string]string{
		"input/room.go": "//go:build linux\n" + fixtureRoomSrc,
	})
	results := generateOne(t, gen.Config{Dir: dir, Env: append(os.Environ(), "GOOS=linux")})
	assert.Contains(t, string(results[0].Content), "\n//go:build linux\n", "the go command honours a //go:build line in the package's doc comment")
}

func TestAnAliasIdenticalToAPredeclaredTypeIsAccepted(t *testing.T) {
	for name, file := range map[string]string{
		"compat.go":    "package chat\n\ntype any = interface{}\n",
		"any_go117.go": "//go:build !go1.18\n\npackage chat\n\ntype any = interface{}\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t, "predeclared_alias_"+strings.TrimSuffix(name, ".go"), map[string]string{
				"input/room.go": fixtureRoomSrc,
				"input/" + name: file,
			})
			results := generateOne(t, gen.Config{Dir: dir})
			assert.Empty(t, compileErrors(t, dir, results))
		})
	}
}

func TestAFileNoBuildIncludesDoesNotCollide(t *testing.T) {
	for name, header := range map[string]string{
		"go_build":   "//go:build ignore\n\n",
		"plus_build": "// +build ignore\n\n",
		"and":        "//go:build linux && ignore\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t, "ignored_file_"+name, map[string]string{
				"input/room.go":   fixtureRoomSrc,
				"input/sketch.go": header + "package chat\n\nfunc OpenRoom() {}\n",
			})
			results := generateOne(t, gen.Config{Dir: dir})
			assert.Empty(t, compileErrors(t, dir, results))
		})
	}
}

// A // +build line after a /* */ comment is a plain comment to the go command: the file
// builds (here on windows), and its names are reserved as any other file's.
func TestAPlusBuildLineAfterABlockCommentDoesNotLeaveTheFileOut(t *testing.T) {
	dir := fixture(t, "plus_build_after_block", map[string]string{
		"input/room.go":        fixtureRoomSrc,
		"input/sdk_windows.go": "/* Copyright. */\n// +build ignore\n\npackage chat\n\nvar sdk = 1\n",
	})
	results := generateOne(t, gen.Config{Dir: dir})
	t.Setenv("GOOS", "windows")
	assert.Empty(t, compileErrors(t, dir, results))
}

func TestATestFileDoesNotChangeTheGeneratedLocals(t *testing.T) {
	dir := fixture(t, "test_file_locals", map[string]string{"input/room.go": fixtureRoomSrc})
	before, err := generate(t, gen.Config{Dir: dir})
	require.NoError(t, err)
	require.Len(t, before, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "input", "room_test.go"), []byte("package chat\n\nvar ctx, impl, req = 1, 2, 3\n"), 0o644))
	after, err := generate(t, gen.Config{Dir: dir})
	require.NoError(t, err)
	require.Len(t, after, 1)
	assert.True(t, bytes.Equal(before[0].Content, after[0].Content), "before:\n%s\nafter:\n%s", before[0].Content, after[0].Content)
}

func TestALocalNamedLikeAMessageTypeOfThePackageIsRenamed(t *testing.T) {
	dir := fixture(t, "message_named_like_local", map[string]string{
		"input/room.go": strings.NewReplacer(
			"req *pb.JoinRequest", "req *in",
		).Replace(fixtureRoomSrc) + "\ntype in struct{ pb.JoinRequest }\n",
	})
	results := generateOne(t, gen.Config{Dir: dir})
	assert.Contains(t, string(results[0].Content), "in2, ok := req.(*in)")
	assert.Empty(t, compileErrors(t, dir, results))
}

// A struct that gets its ProtoReflect method through an embedded pointer or interface is no
// message: in a new one that field is nil, and decoding into it would panic.
func TestAStructThatEmbedsAMessageThroughAPointerOrInterfaceIsRefused(t *testing.T) {
	for name, field := range map[string]string{
		"pointer":   "*pb.JoinRequest",
		"interface": "proto.Message",
	} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t, "embeds_message_"+name, map[string]string{
				"input/room.go": `package chat

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// MyJoin wraps a message.
type MyJoin struct {
	` + field + `
	Extra string
}

var _ proto.Message = MyJoin{}

//zlink:spot instance
type Room interface {
	Join(ctx context.Context, req *MyJoin) (*pb.JoinReply, error)
}
`,
			})
			list := inputErrors(t, dir)
			require.Len(t, list, 1)
			assert.Contains(t, list[0].Error(), "input/room.go:21:32: zlinkgen: Room.Join: the request must be a pointer to a protobuf message")
			assert.Contains(t, list[0].Error(), "got *MyJoin")
		})
	}
}

// A directive in a _test.go file, or a doc comment written like a directive that is not one,
// is reported rather than left without generated code; prose that mentions zlink is not.
func TestDirectivesThatWouldBeSilentlyMissedAreReported(t *testing.T) {
	dir := fixture(t, "missed_directives", map[string]string{
		"input/room.go": fixtureRoomSrc + `
// zlink:spot user
type Player interface {
	// zlink:send
	Leave(ctx context.Context, req *pb.LeaveRequest) error
}

/*zlink:spot user*/
type Guest interface {
	Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
}

// Note is prose.
//
// zlink: server setup lives in main.go.
type Note interface{}

// zlink:spot is not a doc comment here.
var _ = 1
`,
		"input/room_test.go":  "package chat\n\n//zlink:spot entry\ntype Fake interface{}\n",
		"input/other_test.go": "package chat_test\n\n// zlink:spot entry\ntype Other interface{}\n",
	})
	list := inputErrors(t, dir)
	var msgs []string
	for _, e := range list {
		msgs = append(msgs, e.Error())
	}
	assert.ElementsMatch(t, []string{
		`input/room.go:14:1: zlinkgen: "// zlink:spot user" is not read as a directive: write //zlink:spot, with no space and as a line comment`,
		`input/room.go:16:2: zlinkgen: "// zlink:send" is not read as a directive: write //zlink:send, with no space and as a line comment`,
		`input/room.go:20:1: zlinkgen: "/*zlink:spot user*/" is not read as a directive: write //zlink:spot, with no space and as a line comment`,
		`input/room_test.go:3:1: zlinkgen: //zlink:spot in a _test.go file: zlinkgen reads only the package's other files; move the interface to one of them`,
	}, msgs)
}

// Stable names are not split inside a multi-byte character, some of whose bytes are white
// space in Latin-1.
func TestANonASCIIStableNameIsReadWhole(t *testing.T) {
	dir := fixture(t, "non_ascii_name", map[string]string{
		"input/room.go": strings.Replace(fixtureRoomSrc, "//zlink:spot instance", "//zlink:spot instance name=chat.Salà", 1),
	})
	results := generateOne(t, gen.Config{Dir: dir})
	assert.Contains(t, string(results[0].Content), `"chat.Salà"`)
}

func TestAChannelWithoutMethodsIsRefused(t *testing.T) {
	dir := fixture(t, "empty_channel", map[string]string{
		"input/room.go": fixtureRoomSrc + "\n//zlink:server\ntype Hub interface{}\n",
	})
	list := inputErrors(t, dir)
	require.Len(t, list, 1)
	assert.Equal(t, "input/room.go:14:1: zlinkgen: Hub: a channel needs at least one method: the runtime refuses to register one without", list[0].Error())
}

// A file the go command ignores (its name starts with _ or .) declares nothing that the
// generated code could collide with.
func TestAFileTheGoCommandIgnoresDoesNotCollide(t *testing.T) {
	dir := fixture(t, "ignored_file", map[string]string{
		"input/room.go": fixtureRoomSrc,
		"input/_old.go": "package chat\n\ntype RoomRef struct{}\n",
		"input/.tmp.go": "package chat\n\nfunc OpenRoom() {}\n",
	})
	_, err := generate(t, gen.Config{Dir: dir})
	require.NoError(t, err)
}

// A method declared twice, once through an embedded interface and once with //zlink:send, is
// one-way whichever comes first.
func TestASendMarkOnARepeatedMethodIsKept(t *testing.T) {
	dir := fixture(t, "repeated_send", map[string]string{
		"input/room.go": `package chat

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// Leaver leaves.
type Leaver interface {
	Leave(ctx context.Context, req *pb.LeaveRequest) error
}

//zlink:spot instance
type Room interface {
	Leaver
	//zlink:send
	Leave(ctx context.Context, req *pb.LeaveRequest) error
}
`,
	})
	results := generateOne(t, gen.Config{Dir: dir})
	assert.Contains(t, string(results[0].Content), "OneWay: true")
	assert.Empty(t, compileErrors(t, dir, results))
}

// A struct that embeds a message by value is one: a new one's message is there to decode into.
func TestAStructThatEmbedsAMessageByValueIsAccepted(t *testing.T) {
	dir := fixture(t, "embeds_message_value", map[string]string{
		"input/room.go": `package chat

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

// MyJoin wraps a message.
type MyJoin struct {
	pb.JoinRequest
}

//zlink:spot instance
type Room interface {
	Join(ctx context.Context, req *MyJoin) (*pb.JoinReply, error)
}
`,
	})
	results := generateOne(t, gen.Config{Dir: dir})
	assert.Empty(t, compileErrors(t, dir, results))
}

// Output that would not compile with the package around it is never written: each way the
// user's code can clash with the generated code is reported where the user wrote it, though
// the package compiles without the output.
func TestOutputThatWouldNotCompileWithItsPackageIsRefused(t *testing.T) {
	const module = "github.com/zlink-go/zlink/gen_test/testdata/"
	for _, c := range []struct {
		name     string
		files    map[string]string
		patterns []string
		want     []string
		cgo      bool
	}{{
		name: "dot_import",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc,
			"input/use.go":  "package chat\n\nimport . \"" + module + "tmp_output_check_dot_import/other\"\n\nvar _ = Helper\n",
			"other/other.go": "package other\n\n// OpenRoom opens a room.\nfunc OpenRoom() {}\n\n" +
				"// Helper helps.\nfunc Helper() {}\n",
		},
		want: []string{"input/use.go:3:8: zlinkgen: the dot import of \"" + module + "tmp_output_check_dot_import/other\" brings OpenRoom " +
			"into the file, and the generated code declares OpenRoom in the package; import it by name"},
	}, {
		name: "method_on_generated_type",
		files: map[string]string{
			"input/room.go":  fixtureRoomSrc,
			"input/extra.go": "package chat\n\n// Join is the user's own.\nfunc (r RoomRef) Join() {}\n",
		},
		want: []string{"input/extra.go:4:18: zlinkgen: with the generated code, package chat would not compile: " +
			"the generated room_zlink.go declares method RoomRef.Join as well; rename yours"},
	}, {
		// The output lands in the directory's package, files not named included.
		name: "a_file_not_named",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc,
			"input/use.go":  "package chat\n\n// Join is the user's own.\nfunc (r RoomRef) Join() {}\n",
		},
		patterns: []string{"input/room.go"},
		want: []string{"input/use.go:4:18: zlinkgen: with the generated code, package chat would not compile: " +
			"the generated room_zlink.go declares method RoomRef.Join as well; rename yours"},
	}, {
		// Named files make a package of their own, which the check loads with the output.
		name: "named_files",
		files: map[string]string{
			"input/room.go":  fixtureRoomSrc,
			"input/extra.go": "package chat\n\n// Join is the user's own.\nfunc (r RoomRef) Join() {}\n",
		},
		patterns: []string{"input/room.go", "input/extra.go"},
		want: []string{"input/extra.go:4:18: zlinkgen: with the generated code, package chat would not compile: " +
			"the generated room_zlink.go declares method RoomRef.Join as well; rename yours"},
	}, {
		name: "field_named_like_a_method",
		files: map[string]string{
			"input/room.go":  fixtureRoomSrc,
			"input/extra.go": "package chat\n\nfunc (r RoomRef) id() string { return \"\" }\n",
		},
		want: []string{"input/extra.go:3:18: zlinkgen: with the generated code, package chat would not compile: field and method with the same name id"},
	}, {
		// The user's own type that embeds a generated one gets a second Join.
		name: "ambiguous_selector",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc,
			"input/extra.go": "package chat\n\ntype other struct{}\n\nfunc (other) Join() {}\n\n" +
				"type both struct {\n\tRoomRef\n\tother\n}\n\nfunc use(b both) { b.Join() }\n",
		},
		want: []string{"input/extra.go:12:22: zlinkgen: with the generated code, package chat would not compile: ambiguous selector b.Join"},
	}, {
		// A package that uses cgo is checked by loading it again, the output in place.
		name: "method_on_generated_type_with_cgo",
		files: map[string]string{
			"input/room.go":  "package chat\n\n// #include <stdlib.h>\nimport \"C\"\n\n" + withoutPackageClause,
			"input/extra.go": "package chat\n\n// Join is the user's own.\nfunc (r RoomRef) Join() {}\n",
		},
		want: []string{"input/extra.go:4:18: zlinkgen: with the generated code, package chat would not compile: " +
			"the generated room_zlink.go declares method RoomRef.Join as well; rename yours"},
		cgo: true,
	}, {
		name: "embeds_own_intent",
		files: map[string]string{
			"input/room.go": strings.Replace(fixtureRoomSrc, "type Room interface {\n", "type Room interface {\n\tRoomIntent\n", 1),
		},
		want: []string{"input/room.go:11:2: zlinkgen: Room: embeds RoomIntent, which zlinkgen generates: an interface can embed only interfaces of its own"},
	}, {
		name: "defined_from_own_intent",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc + "\n//zlink:spot instance\ntype Lobby RoomIntent\n",
		},
		want: []string{"input/room.go:15:6: zlinkgen: Lobby: is defined from RoomIntent, which zlinkgen generates: an interface can be defined only from interfaces of its own"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); c.cgo && (err != nil || strings.TrimSpace(string(out)) != "1") {
				t.Skip("cgo is not enabled")
			}
			dir := fixture(t, "output_check_"+c.name, c.files)
			patterns := c.patterns
			if patterns == nil {
				patterns = []string{"./input"}
			}
			results, err := gen.Generate(context.Background(), gen.Config{Dir: dir}, patterns)
			var list gen.ErrorList
			require.ErrorAs(t, err, &list)
			for _, r := range results {
				require.Nil(t, r.Content, "%s: no content when the input has errors", r.Path)
			}
			var got []string
			for _, e := range list {
				got = append(got, e.Error())
			}
			assert.Equal(t, c.want, got)
		})
	}
}

// The output's check refuses only clashes: valid input whose output compiles is generated,
// however its package reaches the packages the output imports, and whatever the package's
// own code still says of the generated API it used before.
func TestOutputThatCompilesWithItsPackageIsGenerated(t *testing.T) {
	const module = "github.com/zlink-go/zlink/gen_test/testdata/"
	for _, c := range []struct {
		name     string
		files    map[string]string
		patterns []string
	}{{
		// The messages' package reaches the Spot's package only through api's export data.
		name: "embeds_another_packages_interface",
		files: map[string]string{
			"api/api.go": "package api\n\nimport (\n\t\"context\"\n\n\t\"" + module + "pb\"\n)\n\n" +
				"// Base is a service.\ntype Base interface {\n\tJoin(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)\n}\n",
			"input/room.go": "package chat\n\nimport \"" + module + "tmp_output_ok_embeds_another_packages_interface/api\"\n\n" +
				"//zlink:spot instance\ntype Room interface {\n\tapi.Base\n}\n",
		},
	}, {
		name:     "named_file",
		files:    map[string]string{"input/room.go": fixtureRoomSrc},
		patterns: []string{"input/room.go"},
	}, {
		// Code of the package that calls a method the interface no longer has is the user's to
		// fix once the output is there.
		name: "caller_of_a_renamed_method",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc,
			"input/use.go": "package chat\n\nimport (\n\t\"context\"\n\n\t\"github.com/zlink-go/zlink/sdk\"\n\t\"" + module + "pb\"\n)\n\n" +
				"func use(ctx context.Context, c sdk.Client) {\n\t_ = RoomOf(c, \"x\").Leave(ctx, &pb.LeaveRequest{})\n}\n",
		},
	}, {
		// Join was one-way, and the code still reads it so.
		name: "caller_of_a_method_no_longer_one_way",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc,
			"input/use.go": "package chat\n\nimport (\n\t\"context\"\n\n\t\"github.com/zlink-go/zlink/sdk\"\n\t\"" + module + "pb\"\n)\n\n" +
				"func use(ctx context.Context, c sdk.Client) bool {\n\treturn RoomOf(c, \"x\").Join(ctx, &pb.JoinRequest{}) != nil\n}\n",
		},
	}, {
		// A generic function's constraint names a method the Spot no longer has.
		name: "constraint_of_a_renamed_method",
		files: map[string]string{
			"input/room.go": fixtureRoomSrc,
			"input/use.go": "package chat\n\nimport (\n\t\"context\"\n\n\t\"github.com/zlink-go/zlink/sdk\"\n\t\"" + module + "pb\"\n)\n\n" +
				"func leave[R interface {\n\tLeave(context.Context, *pb.LeaveRequest, ...sdk.CallOption) error\n}](ctx context.Context, r R) error {\n\treturn r.Leave(ctx, &pb.LeaveRequest{})\n}\n\n" +
				"func use(ctx context.Context, c sdk.Client) error { return leave(ctx, RoomOf(c, \"x\")) }\n",
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			dir := fixture(t, "output_ok_"+c.name, c.files)
			patterns := c.patterns
			if patterns == nil {
				patterns = []string{"./input"}
			}
			results, err := gen.Generate(context.Background(), gen.Config{Dir: dir}, patterns)
			require.NoError(t, err)
			require.Len(t, results, 1)
			assert.NotEmpty(t, results[0].Content)
		})
	}
}
