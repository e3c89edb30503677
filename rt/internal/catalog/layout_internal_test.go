//go:build amd64 || arm64

package catalog

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A shard is two cache lines, its lock, map and version on the first, so that a read lock of
// one never writes a line that another's readers or the Spot cache's lookups use.
func TestAShardTakesTwoCacheLines(t *testing.T) {
	var sh shard[*slot]
	assert.Equal(t, uintptr(128), unsafe.Sizeof(sh))
	assert.LessOrEqual(t, unsafe.Offsetof(sh.version)+unsafe.Sizeof(sh.version), uintptr(64))
}
