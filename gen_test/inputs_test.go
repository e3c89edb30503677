package gen_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/gen"
)

// withoutPackageClause is fixtureRoomSrc after its package clause.
var withoutPackageClause = strings.TrimPrefix(fixtureRoomSrc, "package chat\n")

func TestACgoFileIsGeneratedBesideItsSource(t *testing.T) {
	dir := fixture(t, "cgo", map[string]string{
		"input/room.go": "package chat\n\n// #include <stdlib.h>\nimport \"C\"\n\n" + withoutPackageClause,
	})
	results, err := generate(t, gen.Config{Dir: dir})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.Equal(t, filepath.Join(dir, "input", "room_zlink.go"), results[0].Path)
	assert.Equal(t, filepath.Join(dir, "input", "room.go"), results[0].Source)
	assert.Contains(t, string(results[0].Content), "//go:build cgo\n", "the output builds only when its input does")
	assert.Empty(t, compileErrors(t, dir, results))
}

func TestAnEmptyGoFileIsAPositionedError(t *testing.T) {
	dir := fixture(t, "empty_file", map[string]string{
		"input/room.go": fixtureRoomSrc,
		"input/junk.go": "",
	})
	list := inputErrors(t, dir)
	require.NotEmpty(t, list)
	assert.NotContains(t, list.Error(), "internal error")
	assert.Contains(t, list.Error(), "input/junk.go:1:1: zlinkgen: expected 'package', found 'EOF'")
}
