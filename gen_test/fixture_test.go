package gen_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/packages"

	"github.com/zlink-go/zlink/internal/gen"
)

// fixturePrefix starts the names of the directories that fixture writes under testdata; the
// golden cases leave them out.
const fixturePrefix = "tmp_"

// fixtureRoomSrc is a valid Spot file of package chat, for fixtures that add to it.
const fixtureRoomSrc = `package chat

import (
	"context"

	"github.com/zlink-go/zlink/gen_test/testdata/pb"
)

//zlink:spot instance
type Room interface {
	Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinReply, error)
}
`

// fixture writes files (slash-separated names relative to it) into testdata/tmp_<name>, a
// directory of this module, so that they may import the golden cases' pb, and removes it at
// the end of the test. It returns the directory's absolute path.
func fixture(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", fixturePrefix+name))
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(dir))
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

// generate runs the generator on dir/input.
func generate(t *testing.T, cfg gen.Config) ([]gen.Result, error) {
	t.Helper()
	return gen.Generate(context.Background(), cfg, []string{"./input"})
}

// generateOne generates with cfg and returns the one output it must give.
func generateOne(t *testing.T, cfg gen.Config) []gen.Result {
	t.Helper()
	results, err := generate(t, cfg)
	require.NoError(t, err)
	require.Len(t, results, 1)
	return results
}

// compileErrors type-checks dir/input together with the contents of results, built with
// buildFlags, and returns its errors.
func compileErrors(t *testing.T, dir string, results []gen.Result, buildFlags ...string) []string {
	t.Helper()
	overlay := map[string][]byte{}
	for _, r := range results {
		overlay[r.Path] = r.Content
	}
	cfg := &packages.Config{
		Dir:        dir,
		Mode:       packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Overlay:    overlay,
		BuildFlags: buildFlags,
	}
	pkgs, err := packages.Load(cfg, "./input")
	require.NoError(t, err)
	require.Len(t, pkgs, 1)
	var msgs []string
	for _, e := range pkgs[0].Errors {
		msgs = append(msgs, e.Error())
	}
	return msgs
}

// inputErrors runs the generator on dir/input and returns its problems, which there must be.
func inputErrors(t *testing.T, dir string) gen.ErrorList {
	t.Helper()
	results, err := generate(t, gen.Config{Dir: dir})
	var list gen.ErrorList
	require.ErrorAs(t, err, &list)
	for _, r := range results {
		require.Nil(t, r.Content, "%s: no content when the input has errors", r.Path)
	}
	return list
}
