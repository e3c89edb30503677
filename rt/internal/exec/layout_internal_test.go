//go:build amd64 || arm64

package exec

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// What a sender touches stays on the executor's first two cache lines, and the executor is a
// whole number of lines, so that its allocation class starts each one on a line.
func TestSubmitTouchesTheFirstTwoCacheLines(t *testing.T) {
	var e Executor
	assert.Equal(t, uintptr(192), unsafe.Sizeof(e))
	for name, end := range map[string]uintptr{
		"mu":      unsafe.Offsetof(e.mu) + unsafe.Sizeof(e.mu),
		"flags":   unsafe.Offsetof(e.stripe) + unsafe.Sizeof(e.stripe),
		"app":     unsafe.Offsetof(e.app) + unsafe.Sizeof(e.app),
		"cfg":     unsafe.Offsetof(e.cfg) + unsafe.Sizeof(e.cfg),
		"gauges":  unsafe.Offsetof(e.gauges) + unsafe.Sizeof(e.gauges),
		"owner":   unsafe.Offsetof(e.owner) + unsafe.Sizeof(e.owner),
		"running": unsafe.Offsetof(e.running) + unsafe.Sizeof(e.running),
	} {
		assert.LessOrEqual(t, end, uintptr(128), name)
	}
	assert.LessOrEqual(t, unsafe.Offsetof(e.app)+unsafe.Offsetof(e.app.start)+unsafe.Sizeof(e.app.start), uintptr(64),
		"the application lane's ring and its indexes share the lock's line")
}

// A queued entry is one cache line, so that a push and a pop each touch one line of the ring.
func TestAnEntryIsOneCacheLine(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(entry{}))
}
