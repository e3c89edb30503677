package gen_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/gen"
)

// bigPackage is a package of n annotated interfaces (kinds in turn), four methods each, five
// interfaces per file.
func bigPackage(n int) map[string]string {
	files := map[string]string{}
	kinds := []string{"instance", "user", "entry"}
	for f := 0; f*5 < n; f++ {
		var b strings.Builder
		b.WriteString("package big\n\nimport (\n\t\"context\"\n\n\t\"google.golang.org/protobuf/types/known/wrapperspb\"\n)\n")
		for i := f * 5; i < min(n, f*5+5); i++ {
			fmt.Fprintf(&b, `
// Spot%[1]d is annotated interface number %[1]d.
//
//zlink:spot %[2]s
type Spot%[1]d interface {
	// Get answers a value.
	Get(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	// Add adds.
	Add(ctx context.Context, req *wrapperspb.Int64Value) (*wrapperspb.Int64Value, error)
	// Put is one-way.
	//
	//zlink:send
	Put(ctx context.Context, msg *wrapperspb.StringValue) error
	// Tick is one-way too.
	//
	//zlink:send
	Tick(ctx context.Context, msg *wrapperspb.Int64Value) error
}
`, i, kinds[i%len(kinds)])
		}
		files[fmt.Sprintf("big/spots%02d.go", f)] = b.String()
	}
	return files
}

// BenchmarkGenerate50 is the generator's wall time on a package of 50 annotated interfaces
// (target: under 3 s on a 2-core machine). Run with:
//
//	go test ./gen_test -run '^$' -bench Generate50 -benchtime 10x
func BenchmarkGenerate50(b *testing.B) {
	dir := tempModule(b, bigPackage(50))
	cfg := gen.Config{Dir: dir, Env: moduleEnv()}
	ctx := context.Background()
	results, err := gen.Generate(ctx, cfg, []string{"./big"}) // warms the build cache
	require.NoError(b, err)
	require.Len(b, results, 10)
	for b.Loop() {
		if _, err := gen.Generate(ctx, cfg, []string{"./big"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGenerate50Interfaces generates a package of 50 annotated interfaces, checks that the
// output compiles, and logs the wall time of a warm run.
func TestGenerate50Interfaces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large package")
	}
	dir := tempModule(t, bigPackage(50))
	cfg := gen.Config{Dir: dir, Env: moduleEnv()}
	ctx := context.Background()
	_, err := gen.Generate(ctx, cfg, []string{"./big"}) // warms the build cache
	require.NoError(t, err)
	start := time.Now()
	results, err := gen.Generate(ctx, cfg, []string{"./big"})
	elapsed := time.Since(start)
	require.NoError(t, err)
	t.Logf("generated 50 interfaces into %d files in %v", len(results), elapsed)
	_, err = gen.Write(results)
	require.NoError(t, err)
	again, err := gen.Generate(ctx, cfg, []string{"./big"})
	require.NoError(t, err, "the package with its generated files loads again")
	stale, err := gen.Check(again)
	require.NoError(t, err)
	require.Empty(t, stale, "regenerating changes nothing")
	buildPackage(t, dir, "./big")
}
