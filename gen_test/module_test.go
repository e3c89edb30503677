package gen_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// tempModule writes files (slash-separated names relative to the root) into a new module in
// a temporary directory that requires this repository through a replace directive, and
// returns its root. Loading it needs GOFLAGS=-mod=mod, which Env returns.
func tempModule(t testing.TB, files map[string]string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	mod := "module example.com/tmp\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/zlink-go/zlink v0.0.0\n\tgoogle.golang.org/protobuf v1.36.12\n)\n\n" +
		"replace github.com/zlink-go/zlink => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

// moduleEnv is the environment for loading a tempModule.
func moduleEnv() []string { return append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off") }

// buildPackage runs go build on pattern in a tempModule.
func buildPackage(t testing.TB, dir, pattern string) {
	t.Helper()
	cmd := exec.Command("go", "build", pattern)
	cmd.Dir = dir
	cmd.Env = moduleEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pattern, out)
}
