package templates_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"

	"github.com/zlink-go/zlink/templates"
)

func TestInitRefusesANonEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644))
	files, err := templates.Init(dir, "example.com/app", templates.SDK{})
	require.ErrorIs(t, err, templates.ErrNotEmpty)
	assert.Contains(t, err.Error(), dir)
	assert.Empty(t, files)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing written")
}

func TestInitRefusesAnInvalidModulePath(t *testing.T) {
	_, err := templates.Init(filepath.Join(t.TempDir(), "app"), "not a path", templates.SDK{})
	require.ErrorContains(t, err, "invalid module path")
}

func TestInitWritesTheTemplatesWithoutSuffix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "myapp")
	files, err := templates.Init(dir, "", templates.SDK{})
	require.NoError(t, err)
	for _, want := range []string{".gitignore", "Makefile", "README.md", "go.mod", "main.go",
		filepath.Join("game", "game.go"), filepath.Join("game", "game.pb.go"), filepath.Join("game", "game.proto"),
		filepath.Join("game", "lobby.go"), filepath.Join("game", "player.go"), filepath.Join("game", "room.go")} {
		assert.Contains(t, files, want)
	}
	for _, f := range files {
		assert.False(t, strings.HasSuffix(f, ".tmpl"), f)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(mod), "module myapp\n", "the module path defaults to the directory's name")
}

// readGoMod parses the go.mod that Init wrote into dir.
func readGoMod(t *testing.T, dir string) *modfile.File {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	f, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err, "%s", data)
	return f
}

// sdkRequire is the version go.mod requires of the SDK, or "" when it requires none.
func sdkRequire(f *modfile.File) string {
	for _, r := range f.Require {
		if r.Mod.Path == templates.SDKPath {
			return r.Mod.Version
		}
	}
	return ""
}

// TestInitPointsGoModAtACheckout: with an SDK directory, go.mod requires DevVersion and
// replaces the SDK with that directory, which is what lets the application build from a
// checkout of an unpublished module. TestReadmeWriteYourOwn (cmd/zlinkgen) builds and runs
// an application scaffolded so.
func TestInitPointsGoModAtACheckout(t *testing.T) {
	checkout := filepath.Join(t.TempDir(), "zlink checkout") // a space: the path must be quoted
	dir := filepath.Join(t.TempDir(), "app")
	_, err := templates.Init(dir, "example.com/app", templates.SDK{Version: templates.DevVersion, Dir: checkout})
	require.NoError(t, err)
	f := readGoMod(t, dir)
	assert.Equal(t, "example.com/app", f.Module.Mod.Path)
	assert.Equal(t, templates.DevVersion, sdkRequire(f))
	require.Len(t, f.Replace, 1)
	assert.Equal(t, templates.SDKPath, f.Replace[0].Old.Path)
	assert.Empty(t, f.Replace[0].Old.Version, "every version of the SDK is replaced")
	assert.Equal(t, checkout, f.Replace[0].New.Path)
	require.Len(t, f.Tool, 1, "the template's tool line survives the edit")
	assert.Equal(t, templates.SDKPath+"/cmd/zlinkgen", f.Tool[0].Path)
}

// TestInitStartsGoSumFromTheCheckout: the application's go.sum starts as the checkout's, so
// that go mod tidy needs no checksum database for the modules the SDK brings.
func TestInitStartsGoSumFromTheCheckout(t *testing.T) {
	checkout := t.TempDir()
	sum := []byte("golang.org/x/mod v0.42.0 h1:ICeL3t2L30ljSPHHxDnR4fqVcBt/zR2zJAb9juavmQg=\n")
	require.NoError(t, os.WriteFile(filepath.Join(checkout, "go.sum"), sum, 0o644))
	dir := filepath.Join(t.TempDir(), "app")
	files, err := templates.Init(dir, "example.com/app", templates.SDK{Version: templates.DevVersion, Dir: checkout})
	require.NoError(t, err)
	assert.Contains(t, files, "go.sum")
	got, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	require.NoError(t, err)
	assert.Equal(t, sum, got)

	// No checkout, or one without a go.sum: no go.sum.
	for _, s := range []templates.SDK{{Version: "v0.1.0"}, {Version: templates.DevVersion, Dir: t.TempDir()}} {
		dir := filepath.Join(t.TempDir(), "app")
		files, err := templates.Init(dir, "example.com/app", s)
		require.NoError(t, err)
		assert.NotContains(t, files, "go.sum")
		assert.NoFileExists(t, filepath.Join(dir, "go.sum"))
	}
}

func TestInitRequiresAReleasedVersionWithoutReplace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app")
	_, err := templates.Init(dir, "example.com/app", templates.SDK{Version: "v0.1.0"})
	require.NoError(t, err)
	f := readGoMod(t, dir)
	assert.Equal(t, "v0.1.0", sdkRequire(f))
	assert.Empty(t, f.Replace)
}

func TestInitWithTheZeroSDKWritesNeitherRequireNorReplace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app")
	_, err := templates.Init(dir, "example.com/app", templates.SDK{})
	require.NoError(t, err)
	f := readGoMod(t, dir)
	assert.Empty(t, sdkRequire(f))
	assert.Empty(t, f.Replace)
}

func TestInitRefusesAnUnusableSDK(t *testing.T) {
	for name, tc := range map[string]struct {
		sdk  templates.SDK
		want string
	}{
		"relative dir":      {templates.SDK{Version: templates.DevVersion, Dir: "../zlink"}, "not an absolute path"},
		"dir, no version":   {templates.SDK{Dir: t.TempDir()}, "needs a version"},
		"invalid version":   {templates.SDK{Version: "latest"}, "SDK version"},
		"non-canonical ver": {templates.SDK{Version: "v1"}, "SDK version"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "app")
			files, err := templates.Init(dir, "example.com/app", tc.sdk)
			require.ErrorContains(t, err, tc.want)
			assert.Empty(t, files)
			assert.NoDirExists(t, dir, "nothing written")
		})
	}
}

// The match template: the application's files, its Go code parsing, its main importing the
// application's own package; an unknown template writes nothing.
func TestInitMatchTemplate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "arena")
	files, err := templates.InitTemplate(dir, "example.com/arena", templates.SDK{}, "match")
	require.NoError(t, err)
	for _, want := range []string{".gitignore", "Makefile", "README.md", "go.mod", "main.go",
		filepath.Join("match", "match.go"), filepath.Join("match", "match.pb.go"), filepath.Join("match", "match.proto"),
		filepath.Join("match", "game.go"), filepath.Join("match", "matchmaker.go"), filepath.Join("match", "pawn.go")} {
		assert.Contains(t, files, want)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") {
			continue
		}
		_, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.AllErrors)
		require.NoError(t, err, f)
	}
	main, err := os.ReadFile(filepath.Join(dir, "main.go"))
	require.NoError(t, err)
	assert.Contains(t, string(main), `"example.com/arena/match"`)
	proto, err := os.ReadFile(filepath.Join(dir, "match", "match.proto"))
	require.NoError(t, err)
	assert.Contains(t, string(proto), `option go_package = "example.com/arena/match";`)

	other := filepath.Join(t.TempDir(), "x")
	_, err = templates.InitTemplate(other, "", templates.SDK{}, "chess")
	require.ErrorContains(t, err, `unknown template "chess"; the templates are app, match`)
	_, statErr := os.Stat(other)
	assert.True(t, os.IsNotExist(statErr), "nothing written")
}

// The match template's application package is the match example's, file for file, so that
// what `zlinkgen init -template match` scaffolds is what the example runs and tests.
func TestMatchTemplateIsTheExamplesPackage(t *testing.T) {
	for _, f := range []string{"match.go", "lobby.go", "pawn.go", "player.go", "game.go", "matchmaker.go", "leaderboard.go", "register.go", "match.pb.go"} {
		tmpl, err := os.ReadFile(filepath.Join("match", "match", f+".tmpl"))
		require.NoError(t, err)
		example, err := os.ReadFile(filepath.Join("..", "examples", "match", "match", f))
		require.NoError(t, err)
		assert.Equal(t, string(example), string(tmpl), "templates/match/match/%s.tmpl differs from examples/match/match/%s", f, f)
	}
}
