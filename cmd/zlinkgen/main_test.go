package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const counterSrc = `package counter

import (
	"context"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Counter counts.
//
//zlink:spot instance
type Counter interface {
	// Add adds and answers the sum.
	Add(ctx context.Context, req *wrapperspb.Int64Value) (*wrapperspb.Int64Value, error)
}
`

// module makes a module in a temporary directory that uses this repository, changes into it
// and returns its root.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	mod := "module example.com/tmp\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/zlink-go/zlink v0.0.0\n\tgoogle.golang.org/protobuf v1.36.12\n)\n\n" +
		"replace github.com/zlink-go/zlink => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOWORK", "off")
	t.Chdir(dir)
	return dir
}

func zlinkgen(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestGenerateThenCheck(t *testing.T) {
	dir := module(t, map[string]string{"counter/counter.go": counterSrc})
	out := filepath.Join(dir, "counter", "counter_zlink.go")

	code, _, stderr := zlinkgen("-check", "./...")
	assert.Equal(t, 1, code)
	assert.Equal(t, "zlinkgen: counter/counter_zlink.go is stale or missing; run go generate (make gen)\n", stderr)
	assert.NoFileExists(t, out, "-check writes nothing")

	// As go generate runs it: in the package directory, with no arguments.
	t.Chdir(filepath.Join(dir, "counter"))
	code, stdout, stderr := zlinkgen("-v")
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "counter_zlink.go\n", stdout)
	assert.FileExists(t, out)

	code, stdout, stderr = zlinkgen("-v")
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout, "nothing changed, nothing written")

	code, _, stderr = zlinkgen("-check")
	assert.Equal(t, 0, code, stderr)
}

func TestErrorsExitOneAndWriteNothing(t *testing.T) {
	bad := `package counter

import "context"

// Broken has two problems.
//
//zlink:spot instance idle=often
type Broken interface {
	Add(ctx context.Context, n int) (int, error)
}
`
	dir := module(t, map[string]string{"counter/counter.go": counterSrc, "counter/broken.go": bad})
	code, _, stderr := zlinkgen("./counter")
	assert.Equal(t, 1, code)
	assert.Equal(t, "counter/broken.go:7:23: zlinkgen: Broken: invalid idle=\"often\": not a duration such as 30s or 5m\n"+
		"counter/broken.go:9:29: zlinkgen: Broken.Add: the request must be a pointer to a protobuf message, got int\n"+
		"counter/broken.go:9:35: zlinkgen: Broken.Add: the reply must be a pointer to a protobuf message, got int\n", stderr)
	assert.NoFileExists(t, filepath.Join(dir, "counter", "counter_zlink.go"))
	assert.NoFileExists(t, filepath.Join(dir, "counter", "broken_zlink.go"))
}

func TestUsageAndVersion(t *testing.T) {
	code, _, stderr := zlinkgen("-no-such-flag")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "usage: zlinkgen [-check] [-tags list] [-v] [packages]\n"+
		"       zlinkgen -version\n"+
		"       zlinkgen init [-template app|match] [-sdk DIR|none] <dir> [module path]\n")
	code, _, stderr = zlinkgen("init")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "usage: zlinkgen init [-template app|match] [-sdk DIR|none] <dir> [module path]")

	// The test binary is built from this checkout: the module's version is (devel).
	code, stdout, stderr := zlinkgen("-version")
	assert.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^zlinkgen \(devel\)(, revision [0-9a-f]+(, modified)?)?\n`+
		`sdk github\.com/zlink-go/zlink \(devel\)\n`+
		`generated code: zlinkgen v\d+\.\d+\.\d+, sdk\.SupportPackageIsVersion\d+\n$`, stdout)
}

func TestInitRefusesANonEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644))
	code, _, stderr := zlinkgen("init", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "directory is not empty")

	fresh := filepath.Join(t.TempDir(), "app")
	code, stdout, stderr := zlinkgen("init", fresh, "example.com/app")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, filepath.Join(fresh, "go.mod"))
	assert.FileExists(t, filepath.Join(fresh, "game", "room.go"))
}

func TestInitTemplates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "arena")
	code, stdout, stderr := zlinkgen("init", "-template", "match", dir, "example.com/arena")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, filepath.Join(dir, "match", "matchmaker.go"))
	assert.FileExists(t, filepath.Join(dir, "main.go"))

	other := filepath.Join(t.TempDir(), "x")
	code, _, stderr = zlinkgen("init", "-template", "chess", other)
	assert.Equal(t, 1, code)
	assert.Equal(t, "zlinkgen init: unknown template \"chess\"; the templates are app, match\n", stderr, "one clear line")
	assert.NoDirExists(t, other)
}

// A module that does not require zlink yet gets its output, as before the output was checked
// with its package: the output's check cannot import sdk, which go mod tidy adds after. The
// run changes nothing but the output.
func TestAModuleThatDoesNotRequireZlinkYetIsGenerated(t *testing.T) {
	dir := module(t, map[string]string{"counter/counter.go": counterSrc})
	mod := "module example.com/tmp\n\ngo 1.26.0\n\nrequire google.golang.org/protobuf v1.36.12\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	t.Setenv("GOFLAGS", "-mod=readonly")
	t.Setenv("GOPROXY", "off")
	code, _, stderr := zlinkgen("./counter")
	assert.Equal(t, 0, code, stderr)
	assert.FileExists(t, filepath.Join(dir, "counter", "counter_zlink.go"))
	got, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Equal(t, mod, string(got))
}
