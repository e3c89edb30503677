//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"

	"github.com/zlink-go/zlink/templates"
)

// readmeBlock is the first ```sh block of the README section headed heading.
func readmeBlock(t *testing.T, readme, heading string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+heading+"\n")
	require.True(t, ok, "README has no %q", heading)
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "%q has no sh block", heading)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok, "%q: unterminated sh block", heading)
	return block
}

// TestReadmeWriteYourOwn runs the commands of the README's "Write your own", verbatim, from
// this checkout: scaffold with go run ./cmd/zlinkgen, tidy, generate and run the application.
// Nothing is added to the scaffolded go.mod by hand, and the module proxy is off once the
// checkout's module graph is in the module cache, so it proves that a newcomer with only this
// checkout and the modules it names gets a running first application.
func TestReadmeWriteYourOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a whole application")
	}
	for _, tool := range []string{"sh", "make", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's commands need %s: %v", tool, err)
		}
	}
	root := checkoutRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	script := readmeBlock(t, string(readme), "### Write your own")
	require.True(t, strings.HasPrefix(script, "go run ./cmd/zlinkgen init ../myapp "),
		"the first command is the one that works from a checkout:\n%s", script)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The checkout's whole module graph in the module cache, as the newcomer's go mod tidy
	// fetches it through the proxy (no network when it is there already): go mod tidy in the
	// application reads the modules that its dependencies' tests import, which building the
	// checkout does not fetch. go mod download all writes their sums into go.sum, so it runs
	// on a copy of the checkout's go.mod and go.sum. The README's commands then run with the
	// proxy off, so that nothing outside the module graph can be what makes them work.
	modCopy := copyModFiles(t, root)
	warm := exec.CommandContext(ctx, "go", "mod", "download", "-modfile="+modCopy, "all")
	warm.Dir = root
	warm.Env = append(os.Environ(), "GOWORK=off")
	out, err := warm.CombinedOutput()
	require.NoError(t, err, "go mod download all:\n%s", out)

	// The README writes ../myapp next to the checkout. Run it from a symbolic link to the
	// checkout in a temporary directory: go (os.Getwd honours $PWD) and sh's cd resolve ".."
	// logically, so the application lands in the temporary directory, not beside the checkout.
	tmp := t.TempDir()
	link := filepath.Join(tmp, "zlink")
	require.NoError(t, os.Symlink(root, link))
	app := filepath.Join(tmp, "myapp")

	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Dir = link
	cmd.Env = append(os.Environ(), "PWD="+link, "GOWORK=off", "GOPROXY=off")
	// A process group, so that a timeout kills go run and the application too, not only sh.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	require.NoError(t, err, "the README's commands:\n%s\nstdout:\n%s\nstderr:\n%s", script, &stdout, &stderr)

	assert.Contains(t, stdout.String(), "go.mod: "+templates.SDKPath+" comes from the checkout "+link+" (replace, require "+templates.DevVersion+")\n")
	data, err := os.ReadFile(filepath.Join(app, "go.mod"))
	require.NoError(t, err)
	mod, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err)
	require.Len(t, mod.Replace, 1, "%s", data)
	assert.Equal(t, link, mod.Replace[0].New.Path)
	for _, g := range []string{"lobby_zlink.go", "player_zlink.go", "room_zlink.go"} {
		assert.FileExists(t, filepath.Join(app, "game", g), "make run generates")
	}

	// The application's output: its three Spots answering.
	lines := strings.Split(stdout.String(), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "lobby: welcome, ann (node ") {
			start = i
			break
		}
	}
	require.GreaterOrEqual(t, start, 0, "no answer from the Lobby in:\n%s", &stdout)
	require.GreaterOrEqual(t, len(lines), start+7, "%s", &stdout)
	assert.Equal(t, []string{
		"player: created ann",
		"player: creating ann again fails: already exists",
		"player: ann has 10 points",
		"room: room-1 not found (a plain call never creates)",
		"room: room-1 has 2 members and 1 message",
		"room: room-1 closed",
	}, lines[start+1:start+7])
}

// copyModFiles copies root's go.mod and go.sum into a temporary directory and returns the
// copy of go.mod, for a go command that must not write the checkout's.
func copyModFiles(t *testing.T, root string) string {
	dir := t.TempDir()
	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	return filepath.Join(dir, "go.mod")
}
