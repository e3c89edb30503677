package transport

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A peer's request context ends at its deadline whether or not anyone asked for Done first.
func TestCallCtxEndsAtItsDeadline(t *testing.T) {
	stream, stop := context.WithCancel(context.Background())
	defer stop()
	lazy := newCallCtx(stream, time.Now().Add(20*time.Millisecond))
	defer lazy.cancel()
	eager := newCallCtx(stream, time.Now().Add(20*time.Millisecond))
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
	before := newCallCtx(stream, time.Time{})
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

	after := newCallCtx(stream, time.Now().Add(time.Hour))
	derived, cancelDerived := context.WithTimeout(after, time.Hour)
	defer cancelDerived()
	assert.Equal(t, "v", derived.Value(ctxKey{}))
	after.cancel()
	<-derived.Done()
	assert.ErrorIs(t, derived.Err(), context.Canceled)

	ended := newCallCtx(stream, time.Time{})
	defer ended.cancel()
	stop()
	assert.ErrorIs(t, ended.Err(), context.Canceled, "the stream ended")
	<-ended.Done()
}

type ctxKey struct{}
