package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// C1: a guard answers for the instants from its own beginning until its deadline: a clock
// reading taken before it began (a turn whose check read the clock, then found a guard of a
// registration made since) is not valid, however long the guard runs.
func TestC1_LeaseGuardIsValidOnlyFromItsBeginningToItsDeadline(t *testing.T) {
	before := time.Now()
	g := newLeaseGuard()
	g.extend(g.base, 10*time.Second, time.Second)
	assert.True(t, g.ValidAt(g.base.Add(time.Second)))
	assert.True(t, g.Valid())
	assert.False(t, g.ValidAt(g.base.Add(9*time.Second)), "the margin is taken off the deadline")
	assert.False(t, g.ValidAt(before.Add(-time.Nanosecond)), "a reading from before the guard began")
	g.lose()
	assert.False(t, g.ValidAt(g.base.Add(time.Second)), "a lost guard is valid at no instant")
}
