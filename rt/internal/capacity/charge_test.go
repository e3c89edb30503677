package capacity_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
)

// keeper is a stream that lets its jobs keep at most limit bytes.
type keeper struct {
	limit, kept, released int64
}

func (k *keeper) ReleaseCharge(n int64) { k.released += n }

func (k *keeper) KeepCharge(n int64) bool {
	if k.kept > 0 && k.kept+n > k.limit {
		return false
	}
	k.kept += n
	return true
}

func (k *keeper) UnkeepCharge(n int64) { k.kept -= n }

// A kept charge counts at its stream until it is released or given back, once; a keep past the
// stream's bound changes nothing, and the stream's Settle returns that charge as usual.
func TestE6_AChargeKeptCountsAtItsStreamUntilItEnds(t *testing.T) {
	s := &keeper{limit: 100}
	var a, b, c capacity.Charge
	a.Init(60, s)
	b.Init(60, s)
	c.Init(30, s)

	require.True(t, a.Keep())
	assert.Equal(t, int64(60), s.kept)
	assert.False(t, b.Keep(), "60 more would pass the bound")
	assert.Equal(t, int64(60), s.kept)
	b.Settle()
	assert.Equal(t, int64(60), s.released, "the refused message's charge returns with its refusal")

	require.True(t, c.Keep())
	c.Unkeep() // refused before it was admitted
	assert.Equal(t, int64(60), s.kept)
	c.Unkeep()
	assert.Equal(t, int64(60), s.kept, "given back once")
	c.Settle()
	assert.Equal(t, int64(90), s.released)

	a.Settle()
	assert.Equal(t, int64(90), s.released, "a kept charge is not the stream's to settle")
	a.Release()
	a.Release()
	assert.Zero(t, s.kept)
	assert.Equal(t, int64(150), s.released, "released once")
}
