package transport

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
)

// A peer's request context ends at its deadline whether or not anyone asked for Done first.
func TestCallCtxEndsAtItsDeadline(t *testing.T) {
	stream, stop := context.WithCancel(context.Background())
	defer stop()
	lazy := started(stream, time.Now().Add(20*time.Millisecond), time.Now())
	defer lazy.cancel()
	eager := started(stream, time.Now().Add(20*time.Millisecond), time.Now())
	defer eager.cancel()
	done := eager.Done()
	require.NoError(t, lazy.Err())
	dl, ok := lazy.Deadline()
	assert.True(t, ok)
	assert.False(t, dl.IsZero())
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed at the deadline")
	}
	assert.ErrorIs(t, eager.Err(), context.DeadlineExceeded)
	assert.ErrorIs(t, lazy.Err(), context.DeadlineExceeded, "no Done asked for: Err reads the clock")
	select {
	case <-lazy.Done():
	default:
		t.Fatal("Done asked for after the deadline is not closed")
	}
}

// A cancel before or after Done, and the stream's end, end the context; a context derived
// from it ends with it.
func TestCallCtxCancelAndStreamEnd(t *testing.T) {
	stream, stop := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	before := started(stream, time.Time{}, time.Time{})
	_, ok := before.Deadline()
	assert.False(t, ok)
	assert.Equal(t, "v", before.Value(ctxKey{}), "values come from the stream")
	before.cancel()
	assert.ErrorIs(t, before.Err(), context.Canceled)
	select {
	case <-before.Done():
	default:
		t.Fatal("Done of a context cancelled before it was asked for is not closed")
	}

	after := started(stream, time.Now().Add(time.Hour), time.Now())
	derived, cancelDerived := context.WithTimeout(after, time.Hour)
	defer cancelDerived()
	assert.Equal(t, "v", derived.Value(ctxKey{}))
	after.cancel()
	<-derived.Done()
	assert.ErrorIs(t, derived.Err(), context.Canceled)

	ended := started(stream, time.Time{}, time.Time{})
	defer ended.cancel()
	stop()
	assert.ErrorIs(t, ended.Err(), context.Canceled, "the stream ended")
	<-ended.Done()
}

type ctxKey struct{}

// A peer's request context carries its Core HWM charge, before and after Done made the context
// it reads, and a context derived from it finds the charge too; other values come from the
// stream.
func TestCallCtxCarriesTheCharge(t *testing.T) {
	type key struct{}
	stream, stop := context.WithCancel(context.WithValue(context.Background(), key{}, "stream's"))
	defer stop()
	var back releaser
	c := charged(100, &back)
	c.start(stream, time.Time{}, false, time.Time{})
	defer c.cancel()
	charge := capacity.ChargeOf(c)
	require.NotNil(t, charge)
	assert.Equal(t, int64(100), charge.Bytes())
	assert.Same(t, charge, capacity.ChargeOf(c))
	assert.Equal(t, "stream's", c.Value(key{}))
	_ = c.Done()
	assert.Same(t, charge, capacity.ChargeOf(c))
	derived, cancel := context.WithTimeout(c, time.Hour)
	defer cancel()
	assert.Same(t, charge, capacity.ChargeOf(derived))
	assert.Equal(t, "stream's", derived.Value(key{}))

	none := started(stream, time.Time{}, time.Time{})
	defer none.cancel()
	assert.Nil(t, capacity.ChargeOf(none))

	charge.Settle()
	charge.Release()
	assert.Equal(t, []int64{100}, back.released, "the charge goes back once, to its releaser")
}

// started returns a started request context without a charge, whose deadline is its caller's
// timeout.
func started(stream context.Context, deadline, now time.Time) *callCtx {
	c := &callCtx{}
	c.start(stream, deadline, false, now)
	return c
}

// releaser records the charges released to it.
type releaser struct{ released []int64 }

func (r *releaser) ReleaseCharge(n int64) { r.released = append(r.released, n) }

// A request's context answers the caller's deadline as it came: the timeout's, from this
// process's clock with its monotonic reading, so that a call it makes measures what is left
// on that clock; or the caller's absolute deadline, a wall clock time alone.
func TestCallCtxDeadlineIsTheCallersAsItCame(t *testing.T) {
	now := time.Now()
	byTimeout := now.Add(time.Second)
	dl, ok := started(context.Background(), byTimeout, now).Deadline()
	require.True(t, ok)
	assert.Equal(t, byTimeout, dl, "with its monotonic reading")

	absolute := time.Unix(0, now.Add(time.Second).UnixNano())
	c := &callCtx{}
	c.start(context.Background(), absolute, true, now)
	dl, ok = c.Deadline()
	require.True(t, ok)
	assert.Equal(t, absolute, dl, "a wall clock time alone")
}
