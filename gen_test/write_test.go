package gen_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/gen"
)

const counterSrc = `package counter

import (
	"context"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Counter counts.
//
//zlink:spot instance
type Counter interface {
	// Add adds and answers the sum.
	Add(ctx context.Context, req *wrapperspb.Int64Value) (*wrapperspb.Int64Value, error)
}
`

func TestDeterministicOutput(t *testing.T) {
	ctx := context.Background()
	var dirs []string
	for _, name := range cases(t) {
		if _, err := os.Stat(filepath.Join("testdata", name, "want", "errors.txt")); err == nil {
			continue
		}
		dirs = append(dirs, filepath.Join("testdata", name, "input"))
	}
	dirs = append(dirs, filepath.Join("e2e", "sample"))
	for _, dir := range dirs {
		abs, err := filepath.Abs(dir)
		require.NoError(t, err)
		first, err := gen.Generate(ctx, gen.Config{Dir: abs}, nil)
		require.NoError(t, err, dir)
		second, err := gen.Generate(ctx, gen.Config{Dir: abs}, nil)
		require.NoError(t, err, dir)
		require.Equal(t, len(first), len(second))
		for i := range first {
			assert.Equal(t, first[i].Path, second[i].Path)
			assert.True(t, bytes.Equal(first[i].Content, second[i].Content), "%s: two runs differ", first[i].Path)
		}
	}
}

func TestCommittedSampleIsCurrent(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("e2e", "sample"))
	require.NoError(t, err)
	results, err := gen.Generate(context.Background(), gen.Config{Dir: dir}, nil)
	require.NoError(t, err)
	stale, err := gen.Check(results)
	require.NoError(t, err)
	assert.Empty(t, stale, "run make gen")
}

// A Spot defined through a chain of declarations in packages that it does not import is
// generated from the literal at the chain's end, its docs included, on the first run as on the
// next one, which loads the package with its output: the chain is read from source both times,
// with the dependencies' file names trimmed (-trimpath) or not.
func TestAChainReadFromSourceIsGeneratedTheSameOnTheNextRun(t *testing.T) {
	const module = "github.com/zlink-go/zlink/gen_test/testdata/"
	for name, flags := range map[string][]string{"paths": nil, "trimmed": {"-trimpath"}} {
		t.Run(name, func(t *testing.T) {
			tmp := module + "tmp_chain_rerun_" + name
			dir := fixture(t, "chain_rerun_"+name, map[string]string{
				"input/desk.go": "package desk\n\nimport \"" + tmp + "/near\"\n\n" +
					"//zlink:spot instance\ntype Desk near.Relay\n",
				"near/near.go": "package near\n\nimport f \"" + tmp + "/far\"\n\n" +
					"// Relay is defined from far.Hop.\ntype Relay f.Hop\n",
				"far/far.go": "package far\n\nimport (\n\t\"context\"\n\n\t\"" + module + "pb\"\n)\n\n" +
					"// Hop is defined from hidden.\ntype Hop hidden\n\ntype hidden interface {\n" +
					"\t// Ping answers a ping.\n\tPing(ctx context.Context, req *pb.Ping) (*pb.Pong, error)\n}\n",
			})
			ctx, cfg := context.Background(), gen.Config{Dir: dir, BuildFlags: flags}
			results, err := gen.Generate(ctx, cfg, []string{"./input"})
			require.NoError(t, err)
			require.Len(t, results, 1)
			assert.True(t, strings.Contains(string(results[0].Content), "// Ping answers a ping.\nfunc (r DeskRef) Ping("),
				"the method has the doc comment of the literal at the chain's end")
			changed, err := gen.Write(results)
			require.NoError(t, err)
			require.Len(t, changed, 1)

			results, err = gen.Generate(ctx, cfg, []string{"./input"})
			require.NoError(t, err)
			stale, err := gen.Check(results)
			require.NoError(t, err)
			assert.Empty(t, stale, "the next run generates the same")
		})
	}
}

func TestWriteRewritesOnlyChangedFilesAndCheckFindsStaleOnes(t *testing.T) {
	dir := tempModule(t, map[string]string{"counter/counter.go": counterSrc})
	cfg := gen.Config{Dir: dir, Env: moduleEnv()}
	ctx := context.Background()
	out := filepath.Join(dir, "counter", "counter_zlink.go")

	results, err := gen.Generate(ctx, cfg, []string{"./counter"})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.Equal(t, out, results[0].Path)
	assert.Equal(t, filepath.Join(dir, "counter", "counter.go"), results[0].Source)

	stale, err := gen.Check(results)
	require.NoError(t, err)
	assert.Equal(t, []string{out}, stale, "missing is stale")

	changed, err := gen.Write(results)
	require.NoError(t, err)
	assert.Equal(t, []string{out}, changed)
	past := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(out, past, past))

	// A second run loads the package with its output and changes nothing.
	results, err = gen.Generate(ctx, cfg, []string{"./counter"})
	require.NoError(t, err)
	changed, err = gen.Write(results)
	require.NoError(t, err)
	assert.Empty(t, changed)
	st, err := os.Stat(out)
	require.NoError(t, err)
	assert.True(t, st.ModTime().Equal(past), "an unchanged file is not rewritten")

	// An edited output is stale.
	require.NoError(t, os.WriteFile(out, append(results[0].Content, "// edited\n"...), 0o644))
	stale, err = gen.Check(results)
	require.NoError(t, err)
	assert.Equal(t, []string{out}, stale)

	// A stale output that no longer compiles does not stop the next run: the method changed.
	changedSrc := bytes.ReplaceAll([]byte(counterSrc), []byte("Add("), []byte("Plus("))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "counter", "counter.go"), changedSrc, 0o644))
	results, err = gen.Generate(ctx, cfg, []string{"./counter"})
	require.NoError(t, err)
	_, err = gen.Write(results)
	require.NoError(t, err)
	buildPackage(t, dir, "./counter")

	// Without annotations, the generated file is removed.
	plain := bytes.ReplaceAll(changedSrc, []byte("//zlink:spot instance"), nil)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "counter", "counter.go"), plain, 0o644))
	results, err = gen.Generate(ctx, cfg, []string{"./counter"})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.True(t, results[0].Remove)
	stale, err = gen.Check(results)
	require.NoError(t, err)
	assert.Equal(t, []string{out}, stale, "a file that must go is stale")
	_, err = gen.Write(results)
	require.NoError(t, err)
	assert.NoFileExists(t, out)
}

func TestNothingIsWrittenWhenAnyFileHasErrors(t *testing.T) {
	bad := `package counter

import "context"

//zlink:spot instance
type Broken interface {
	Add(ctx context.Context, n int) error
}
`
	dir := tempModule(t, map[string]string{"counter/counter.go": counterSrc, "counter/broken.go": bad})
	results, err := gen.Generate(context.Background(), gen.Config{Dir: dir, Env: moduleEnv()}, []string{"./counter"})
	var list gen.ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 2)
	assert.Equal(t, "counter/broken.go:7:2: zlinkgen: Broken.Add: a method that returns only error is one-way: mark it //zlink:send, or return (*R, error)", list[0].Error())
	assert.Equal(t, "counter/broken.go:7:29: zlinkgen: Broken.Add: the request must be a pointer to a protobuf message, got int", list[1].Error())
	_, err = gen.Write(results)
	require.Error(t, err)
	assert.NoFileExists(t, filepath.Join(dir, "counter", "counter_zlink.go"), "the valid file is not written either")
}

func TestGenerateReportsAMissingPackage(t *testing.T) {
	dir := tempModule(t, nil)
	_, err := gen.Generate(context.Background(), gen.Config{Dir: dir, Env: moduleEnv()}, []string{"./nothing"})
	require.Error(t, err)
	var list gen.ErrorList
	require.True(t, errors.As(err, &list), "%v", err)
	t.Log(err)
}

func TestGenerateStopsOnACancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := gen.Generate(ctx, gen.Config{}, []string{"./testdata/instance/input"})
	require.Error(t, err)
}
