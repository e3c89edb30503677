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

// C1: ValidNow answers for a reading of the monotonic clock taken within the call, and the
// reading it returns is that instant on the wall clock too; past the deadline, or once the
// lease is lost, it answers invalid.
func TestC1_LeaseGuardValidNowReturnsItsReadingOfTheClock(t *testing.T) {
	g := newLeaseGuard()
	g.extend(g.base, 10*time.Second, time.Second)
	before := time.Now()
	at, ok := g.ValidNow()
	after := time.Now()
	assert.True(t, ok)
	assert.False(t, at.Before(before), "the reading is taken within the call")
	assert.False(t, at.After(after), "the reading is taken within the call")
	// Wall parts alone (Round(0)): the reading's is the wall clock's at the call, whatever the
	// wall clock did since the guard began.
	assert.False(t, at.Round(0).Before(before.Round(0)), "its wall part %v is before the call's %v", at.Round(0), before.Round(0))
	assert.False(t, at.Round(0).After(after.Round(0)), "its wall part %v is after the call's %v", at.Round(0), after.Round(0))
	assert.True(t, g.ValidAt(at), "ValidAt agrees on the same reading")

	short := newLeaseGuard()
	short.extend(short.base, 2*time.Millisecond, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	at, ok = short.ValidNow()
	assert.False(t, ok, "past the deadline")
	assert.Greater(t, at.Sub(short.base), 5*time.Millisecond)

	g.lose()
	_, ok = g.ValidNow()
	assert.False(t, ok, "a lost guard is valid at no instant")
	assert.False(t, g.Valid())
}
