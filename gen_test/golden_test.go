// Package gen_test holds zlinkgen's golden tests: each directory testdata/<case> has an input
// package in input/ and the expected output in want/ (the generated files, or errors.txt with
// every problem, positions relative to the case directory). Run with -update to rewrite want/.
package gen_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/gen"
)

var update = flag.Bool("update", false, "rewrite the want/ files of the golden cases")

// cases lists the directories of testdata that hold an input/ package, the fixtures of the
// tests that write their own (fixturePrefix) left out.
func cases(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("testdata")
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fixturePrefix) {
			continue
		}
		if st, err := os.Stat(filepath.Join("testdata", e.Name(), "input")); err == nil && st.IsDir() {
			out = append(out, e.Name())
		}
	}
	require.NotEmpty(t, out)
	return out
}

func TestGolden(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir, err := filepath.Abs(filepath.Join("testdata", name))
			require.NoError(t, err)
			results, genErr := gen.Generate(context.Background(), gen.Config{Dir: dir}, []string{"./input"})
			var list gen.ErrorList
			if genErr != nil && !errors.As(genErr, &list) {
				t.Fatalf("the run failed: %v", genErr)
			}
			wantErrs := filepath.Join(dir, "want", "errors.txt")
			if _, err := os.Stat(wantErrs); err == nil || (*update && genErr != nil) {
				checkErrors(t, name, wantErrs, results, genErr)
				return
			}
			require.NoError(t, genErr, "a case without want/errors.txt must generate cleanly")
			got := map[string][]byte{}
			for _, r := range results {
				require.False(t, r.Remove, "%s: nothing is removed in a golden case", r.Path)
				got[filepath.Base(r.Path)] = r.Content
			}
			compareFiles(t, name, filepath.Join(dir, "want"), got)
			compiles(t, dir, results)
		})
	}
}

// checkErrors compares the run's errors with want/errors.txt, and checks that nothing would
// be written.
func checkErrors(t *testing.T, name, path string, results []gen.Result, err error) {
	t.Helper()
	require.Error(t, err, "want/errors.txt exists: the case must fail")
	for _, r := range results {
		require.Nil(t, r.Content, "%s: no content when the input has errors", r.Path)
	}
	if len(results) > 0 {
		_, werr := gen.Write(results)
		require.Error(t, werr, "Write refuses results with errors")
	}
	got := []byte(err.Error() + "\n")
	if *update {
		require.NoError(t, os.RemoveAll(filepath.Dir(path)))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	if !bytes.Equal(got, want) {
		t.Errorf("errors differ from %s:\n%s\n%s", path, diff(path, want, got), updateHint(name))
	}
}

// compareFiles compares the generated files with want/.
func compareFiles(t *testing.T, name, wantDir string, got map[string][]byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.RemoveAll(wantDir))
		require.NoError(t, os.MkdirAll(wantDir, 0o755))
		for base, content := range got {
			require.NoError(t, os.WriteFile(filepath.Join(wantDir, base), content, 0o644))
		}
		return
	}
	entries, err := os.ReadDir(wantDir)
	require.NoError(t, err)
	var wantNames []string
	for _, e := range entries {
		wantNames = append(wantNames, e.Name())
	}
	var gotNames []string
	for base := range got {
		gotNames = append(gotNames, base)
	}
	slices.Sort(gotNames)
	if !slices.Equal(wantNames, gotNames) {
		t.Errorf("generated files %v, want %v\n%s", gotNames, wantNames, updateHint(name))
		return
	}
	for _, base := range gotNames {
		want, err := os.ReadFile(filepath.Join(wantDir, base))
		require.NoError(t, err)
		if !bytes.Equal(want, got[base]) {
			t.Errorf("%s differs:\n%s\n%s", base, diff(filepath.Join("want", base), want, got[base]), updateHint(name))
		}
	}
}

// compiles type-checks the case's input package together with its generated files.
func compiles(t *testing.T, dir string, results []gen.Result) {
	t.Helper()
	require.Empty(t, compileErrors(t, dir, results), "the input package with its generated files must compile")
}

func diff(name string, want, got []byte) string { return unifiedDiff(name, string(want), string(got)) }

func updateHint(name string) string {
	return fmt.Sprintf("if the new output is right, update it with:\n\tgo test ./gen_test -run 'TestGolden/^%s$' -update", strings.ReplaceAll(name, "/", "_"))
}
