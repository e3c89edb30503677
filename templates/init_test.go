package templates_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/templates"
)

func TestInitRefusesANonEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644))
	files, err := templates.Init(dir, "example.com/app")
	require.ErrorIs(t, err, templates.ErrNotEmpty)
	assert.Contains(t, err.Error(), dir)
	assert.Empty(t, files)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing written")
}

func TestInitRefusesAnInvalidModulePath(t *testing.T) {
	_, err := templates.Init(filepath.Join(t.TempDir(), "app"), "not a path")
	require.ErrorContains(t, err, "invalid module path")
}

func TestInitWritesTheTemplatesWithoutSuffix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "myapp")
	files, err := templates.Init(dir, "")
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

// TestScaffoldedAppBuildsAndRuns scaffolds an application, points it at this repository,
// generates its Spot code with go generate, builds it and runs it.
func TestScaffoldedAppBuildsAndRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a whole application")
	}
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "zlinkapp")
	_, err := templates.Init(dir, "example.com/zlinkapp")
	require.NoError(t, err)

	f, err := os.OpenFile(filepath.Join(dir, "go.mod"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("\nreplace github.com/zlink-go/zlink => " + root + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	goCmd(ctx, t, dir, "mod", "tidy")
	goCmd(ctx, t, dir, "generate", "./...")
	for _, g := range []string{"lobby_zlink.go", "player_zlink.go", "room_zlink.go"} {
		require.FileExists(t, filepath.Join(dir, "game", g))
	}
	bin := filepath.Join(dir, "zlinkapp")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	goCmd(ctx, t, dir, "build", "-o", bin, ".")

	run := exec.CommandContext(ctx, bin)
	run.Dir = dir
	out, err := run.Output()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 7, "%s", out)
	assert.True(t, strings.HasPrefix(lines[0], "lobby: welcome, ann (node "), lines[0])
	assert.Equal(t, []string{
		"player: created ann",
		"player: creating ann again fails: already exists",
		"player: ann has 10 points",
		"room: room-1 not found (a plain call never creates)",
		"room: room-1 has 2 members and 1 message",
		"room: room-1 closed",
	}, lines[1:])
}

func goCmd(ctx context.Context, t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return filepath.Dir(wd) // this package is templates/ at the root
}
