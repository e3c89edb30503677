package transport

import (
	"context"
	"sync"
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

// Once a request's context answers an error, it answers that one for good, as the context
// package's do: a cancel, the stream's end or the deadline that comes later does not change it,
// nor does Done making the context it reads from then on.
func TestARequestContextsErrNeverChanges(t *testing.T) {
	expired := func(stream context.Context) *callCtx {
		c := started(stream, time.Now().Add(time.Millisecond), time.Now())
		time.Sleep(5 * time.Millisecond)
		return c
	}
	c := expired(context.Background())
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	c.cancel()
	assert.Equal(t, context.DeadlineExceeded, c.Err(), "deadline, then cancel")
	<-c.Done()
	assert.Equal(t, context.DeadlineExceeded, c.Err(), "deadline, cancel, then Done")

	stream, end := context.WithCancel(context.Background())
	c = expired(stream)
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	end()
	assert.Equal(t, context.DeadlineExceeded, c.Err(), "deadline, then the stream's end")

	c = started(context.Background(), time.Now().Add(time.Millisecond), time.Now())
	c.cancel()
	require.ErrorIs(t, c.Err(), context.Canceled)
	time.Sleep(5 * time.Millisecond)
	<-c.Done()
	assert.Equal(t, context.Canceled, c.Err(), "cancel, deadline, then Done")

	c = started(context.Background(), time.Now().Add(time.Hour), time.Now())
	done := c.Done()
	c.cancel()
	<-done
	assert.Equal(t, context.Canceled, c.Err(), "Done, then cancel")
	assert.Equal(t, context.Canceled, c.Err())
}

// ErrAt answers for the reading it is given, as Err answers for the clock's: a turn that read
// the clock for its lease check does not read it again, and the answer sticks as Err's does.
func TestErrAtAnswersForTheReadingItIsGiven(t *testing.T) {
	now := time.Now()
	c := started(context.Background(), now.Add(time.Hour), now)
	require.NoError(t, c.ErrAt(now.Add(59*time.Minute)), "before the deadline")
	require.NoError(t, c.Err())
	assert.Equal(t, context.DeadlineExceeded, c.ErrAt(now.Add(time.Hour)), "at the deadline")
	assert.Equal(t, context.DeadlineExceeded, c.Err(), "once answered, the clock's reading does not undo it")
	assert.Equal(t, context.DeadlineExceeded, c.ErrAt(now), "nor an earlier reading")

	c = started(context.Background(), time.Time{}, now)
	assert.NoError(t, c.ErrAt(now.Add(1000*time.Hour)), "no deadline, no end")
	c.cancel()
	assert.Equal(t, context.Canceled, c.ErrAt(now), "a cancel ends it at any reading")

	c = started(context.Background(), now.Add(time.Hour), now)
	done := c.Done()
	assert.NoError(t, c.ErrAt(now.Add(2*time.Hour)), "once Done is made, its context answers")
	c.cancel()
	<-done
	assert.Equal(t, context.Canceled, c.ErrAt(now))
}

// Once Err answers an error, Done is closed, whatever ended the context: the stream's own
// deadline included, before the caller's.
func TestARequestContextIsDoneOnceErrAnswers(t *testing.T) {
	stream, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	c := started(stream, time.Now().Add(time.Hour), time.Now())
	<-stream.Done()
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Err answered DeadlineExceeded, but Done is not closed")
	}
	assert.Equal(t, context.DeadlineExceeded, c.Err())
}

// Whatever order its cancel, the stream's end, its deadline, Err and Done come in, from several
// goroutines, a request's context answers one error for good, and the context Done reads ends
// with that same error.
func TestARequestContextEndsWithOneErrorUnderRaces(t *testing.T) {
	for i := range 300 {
		stream, end := context.WithCancel(context.Background())
		c := started(stream, time.Now().Add(time.Duration(i%7)*50*time.Microsecond), time.Now())
		first := make(chan error, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 10_000 {
				if err := c.Err(); err != nil {
					first <- err
					return
				}
			}
			<-c.Done()
			first <- c.Err()
		})
		wg.Go(func() {
			if i%2 == 0 {
				<-c.Done()
			}
		})
		wg.Go(func() {
			if i%3 == 0 {
				c.cancel()
			}
		})
		wg.Go(func() {
			if i%5 == 0 {
				end()
			}
		})
		wg.Wait()
		err := <-first
		require.Error(t, err)
		<-c.Done()
		require.Equal(t, err, c.Err(), "round %d", i)
		require.Equal(t, err, c.materialize().Err(), "round %d: the context Done reads", i)
		c.cancel()
		end()
		require.Equal(t, err, c.Err(), "round %d", i)
	}
}

type otherKey struct{}

// A look-up in a peer's request's context (a charge's, a turn's, a trace's: several per
// request) allocates nothing, whatever the key.
func TestALookUpInARequestsContextAllocatesNothing(t *testing.T) {
	c := &callCtx{stream: context.Background()}
	allocs := testing.AllocsPerRun(1000, func() { _ = c.Value(otherKey{}) })
	assert.Zero(t, allocs, "allocations per Value")
}
