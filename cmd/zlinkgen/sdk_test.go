package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"

	"github.com/zlink-go/zlink/templates"
)

// checkoutRoot is this repository's root: the checkout the tests run in.
func checkoutRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.Equal(t, templates.SDKPath, modulePath(root))
	return root
}

// fakeModule writes a go.mod declaring path into a new temporary directory.
func fakeModule(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+path+"\n\ngo 1.26.0\n"), 0o644))
	return dir
}

var (
	devel    = &debug.BuildInfo{Main: debug.Module{Path: templates.SDKPath, Version: "(devel)"}}
	released = &debug.BuildInfo{Main: debug.Module{Path: templates.SDKPath, Version: "v0.1.0", Sum: "h1:abc="}}
)

func TestSDKForAReleasedZlinkgenRequiresItsVersion(t *testing.T) {
	// Even run inside a checkout: a released zlinkgen belongs with its own SDK version.
	sdk, err := sdkFor("", released, []string{checkoutRoot(t)})
	require.NoError(t, err)
	assert.Equal(t, templates.SDK{Version: "v0.1.0"}, sdk)

	// As a tool of an application that requires a released SDK.
	asTool := &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
		Deps: []*debug.Module{{Path: templates.SDKPath, Version: "v0.2.3", Sum: "h1:def="}}}
	sdk, err = sdkFor("", asTool, nil)
	require.NoError(t, err)
	assert.Equal(t, templates.SDK{Version: "v0.2.3"}, sdk)
}

func TestSDKForADevelZlinkgenFindsTheCheckoutAbove(t *testing.T) {
	root := checkoutRoot(t)
	// From a subdirectory, past bench/peers' own go.mod, up to the SDK's.
	for _, start := range []string{root, filepath.Join(root, "rt", "internal"), filepath.Join(root, "bench", "peers")} {
		sdk, err := sdkFor("", devel, []string{start})
		require.NoError(t, err, start)
		assert.Equal(t, templates.SDK{Version: templates.DevVersion, Dir: root}, sdk, start)
	}
	// The first start that leads to a checkout wins.
	sdk, err := sdkFor("", devel, []string{t.TempDir(), root})
	require.NoError(t, err)
	assert.Equal(t, root, sdk.Dir)

	// Built from source with VCS stamping: a pseudo-version but no checksum, still a checkout.
	stamped := &debug.BuildInfo{Main: debug.Module{Path: templates.SDKPath, Version: "v0.0.0-20260101000000-abcdefabcdef+dirty"}}
	sdk, err = sdkFor("", stamped, []string{root})
	require.NoError(t, err)
	assert.Equal(t, root, sdk.Dir)

	// A tool of an application that replaces the SDK with a directory.
	replaced := &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
		Deps: []*debug.Module{{Path: templates.SDKPath, Version: templates.DevVersion, Replace: &debug.Module{Path: root}}}}
	sdk, err = sdkFor("", replaced, []string{root})
	require.NoError(t, err)
	assert.Equal(t, root, sdk.Dir)
}

func TestSDKForADevelZlinkgenOutsideACheckoutNamesSDKFlag(t *testing.T) {
	elsewhere := fakeModule(t, "example.com/other")
	for _, bi := range []*debug.BuildInfo{devel, nil} {
		_, err := sdkFor("", bi, []string{elsewhere})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no github.com/zlink-go/zlink checkout was found above "+elsewhere)
		assert.Contains(t, err.Error(), "-sdk DIR")
		assert.Contains(t, err.Error(), "-sdk none")
	}
}

func TestSDKFlag(t *testing.T) {
	root := checkoutRoot(t)
	sdk, err := sdkFor("none", devel, []string{root})
	require.NoError(t, err)
	assert.Equal(t, templates.SDK{}, sdk, "-sdk none writes neither require nor replace")

	t.Chdir(filepath.Join(root, "cmd"))
	sdk, err = sdkFor("..", released, nil)
	require.NoError(t, err)
	assert.Equal(t, templates.SDK{Version: templates.DevVersion, Dir: root}, sdk, "-sdk DIR wins over a release, made absolute")

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for dir, want := range map[string]string{
		filepath.Join(t.TempDir(), "missing"):   "no such directory",
		file:                                    "not a directory",
		t.TempDir():                             "no go.mod with a module line there",
		fakeModule(t, "example.com/other"):      "its go.mod is module example.com/other, not github.com/zlink-go/zlink",
		filepath.Join(root, "rt"):               "no go.mod with a module line there", // -sdk names the root, it does not walk up
		fakeModule(t, templates.SDKPath+"/sub"): "its go.mod is module github.com/zlink-go/zlink/sub, not github.com/zlink-go/zlink",
	} {
		_, err := sdkFor(dir, devel, []string{root})
		require.Error(t, err, dir)
		assert.Contains(t, err.Error(), "-sdk "+dir+": "+want)
	}
}

// TestInitFromTheTestBinaryUsesThisCheckout: the test binary is built from this checkout
// ((devel), no checksum), so init's default is the checkout's replace, and the next steps
// say so.
func TestInitFromTheTestBinaryUsesThisCheckout(t *testing.T) {
	root := checkoutRoot(t)
	t.Chdir(t.TempDir()) // found through the compiled source path, not the working directory
	dir := filepath.Join(t.TempDir(), "app")
	code, stdout, stderr := zlinkgen("init", dir, "example.com/app")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "go.mod: github.com/zlink-go/zlink comes from the checkout "+root+" (replace, require "+templates.DevVersion+")\n")
	assert.Contains(t, stdout, "next: cd "+dir+" && go mod tidy && make run\n")
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	f, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err)
	require.Len(t, f.Replace, 1)
	assert.Equal(t, root, f.Replace[0].New.Path)
}

func TestInitSDKNoneAndFlagsAfterArguments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app")
	code, stdout, stderr := zlinkgen("init", dir, "example.com/app", "-sdk", "none")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "go.mod: no require of github.com/zlink-go/zlink (-sdk none)")
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.NotContains(t, string(data), "require")
	assert.NotContains(t, string(data), "replace")
}

// TestInitBadInputExitsOneAndWritesNothing: every refusal is one line naming the problem.
func TestInitBadInputExitsOneAndWritesNothing(t *testing.T) {
	full := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(full, "main.go"), []byte("package main\n"), 0o644))
	missing := filepath.Join(t.TempDir(), "nope")
	app := filepath.Join(t.TempDir(), "app")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown -sdk dir":    {[]string{"-sdk", missing, app}, "zlinkgen init: -sdk " + missing + ": no such directory"},
		"-sdk not zlink":      {[]string{app, "-sdk", fakeModule(t, "example.com/other")}, "its go.mod is module example.com/other"},
		"invalid module path": {[]string{app, "not a path"}, `zlinkgen init: invalid module path "not a path"`},
		"dir not empty":       {[]string{full}, "zlinkgen init: " + full + ": directory is not empty"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := zlinkgen(append([]string{"init"}, tc.args...)...)
			assert.Equal(t, 1, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.want)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
			assert.NoDirExists(t, app)
			entries, err := os.ReadDir(full)
			require.NoError(t, err)
			assert.Len(t, entries, 1)
		})
	}
	code, _, stderr := zlinkgen("init", "-sdk")
	assert.Equal(t, 2, code, "a flag without its value is usage")
	assert.Contains(t, stderr, "usage: zlinkgen init [-template app|match] [-sdk DIR|none] <dir> [module path]")
	code, _, _ = zlinkgen("init", "a", "b", "c")
	assert.Equal(t, 2, code)
}
