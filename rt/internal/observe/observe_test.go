package observe_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/internal/observe"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type status struct {
	Seq      int
	Terminal bool
}

func newHub() *observe.Hub[status] {
	return observe.NewHub(status{}, func(missed, next *status) bool { return missed.Terminal && !next.Terminal })
}

// observeInto ranges over an observation on a goroutine of its own, handing each item to out
// and waiting for a token on step before taking the next: a consumer exactly as slow as the test
// wants.
func observeInto(ctx context.Context, h *observe.Hub[status], out chan<- sdk.Observed[status], step <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(out)
		for o := range h.Observe(ctx) {
			select {
			case out <- o:
			case <-ctx.Done():
				return
			}
			if step != nil {
				select {
				case <-step:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return &wg
}

func next(t *testing.T, c <-chan sdk.Observed[status]) sdk.Observed[status] {
	t.Helper()
	select {
	case o, ok := <-c:
		require.True(t, ok, "the observation ended")
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("no status within 5 s")
	}
	return sdk.Observed[status]{}
}

func TestObservationStartsWithTheCurrentStatus(t *testing.T) {
	h := newHub()
	h.Publish(status{Seq: 7})
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan sdk.Observed[status], 16)
	wg := observeInto(ctx, h, out, nil)
	assert.Equal(t, 7, next(t, out).Status.Seq)
	h.Publish(status{Seq: 8})
	o := next(t, out)
	assert.Equal(t, 8, o.Status.Seq)
	assert.Zero(t, o.Loss.CoalescedCount)
	cancel()
	wg.Wait()
}

// H1: a consumer slower than the changes gets the newest status, and the observation counts
// what it skipped, as a running total.
func TestH1_SlowObserverGetsLatestAndCountsCoalesced(t *testing.T) {
	h := newHub()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan sdk.Observed[status], 16)
	step := make(chan struct{})
	wg := observeInto(ctx, h, out, step)
	assert.Equal(t, 0, next(t, out).Status.Seq)
	// The consumer holds the first status; 100 changes come meanwhile.
	for i := 1; i <= 100; i++ {
		h.Publish(status{Seq: i})
	}
	step <- struct{}{}
	o := next(t, out)
	assert.Equal(t, 100, o.Status.Seq, "the newest status")
	assert.Equal(t, uint64(99), o.Loss.CoalescedCount, "99 replaced before it was taken")
	for i := 101; i <= 110; i++ {
		h.Publish(status{Seq: i})
	}
	step <- struct{}{}
	o = next(t, out)
	assert.Equal(t, 110, o.Status.Seq)
	assert.Equal(t, uint64(108), o.Loss.CoalescedCount, "the loss is the running total of the observation")
	cancel()
	wg.Wait()
}

// H1: a terminal status replaced before an observer took it counts in DiscardedTerminalCount;
// the last status, terminal, is delivered before the observation ends.
func TestH1_TerminalStatusIsNeverLostSilently(t *testing.T) {
	h := newHub()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan sdk.Observed[status], 16)
	step := make(chan struct{})
	wg := observeInto(ctx, h, out, step)
	next(t, out)
	h.Publish(status{Seq: 1, Terminal: true})
	h.Publish(status{Seq: 2})
	h.Publish(status{Seq: 3, Terminal: true})
	h.Close()
	h.Publish(status{Seq: 4}) // after Close: ignored
	step <- struct{}{}
	o := next(t, out)
	assert.Equal(t, 3, o.Status.Seq, "the final, terminal status is delivered")
	assert.True(t, o.Status.Terminal)
	assert.Equal(t, uint64(2), o.Loss.CoalescedCount)
	assert.Equal(t, uint64(1), o.Loss.DiscardedTerminalCount, "the first terminal status was replaced: counted")
	step <- struct{}{}
	_, ok := <-out
	assert.False(t, ok, "the observation ends after the hub closed")
	wg.Wait()

	// An observation that starts after the close gets the final status and ends.
	var got []int
	for o := range h.Observe(context.Background()) {
		got = append(got, o.Status.Seq)
	}
	assert.Equal(t, []int{3}, got)
}

// H4: cancelling one observation ends only it; after the cancellation is seen nothing more is
// delivered to it, and the others go on.
func TestH4_CancelEndsOnlyThatObservation(t *testing.T) {
	h := newHub()
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	out1, out2 := make(chan sdk.Observed[status], 64), make(chan sdk.Observed[status], 64)
	wg1, wg2 := observeInto(ctx1, h, out1, nil), observeInto(ctx2, h, out2, nil)
	next(t, out1)
	next(t, out2)
	cancel1()
	wg1.Wait()
	require.Eventually(t, func() bool { return h.Observers() == 1 }, 5*time.Second, time.Millisecond)
	h.Publish(status{Seq: 1})
	assert.Equal(t, 1, next(t, out2).Status.Seq, "the other observation goes on")
	for o := range out1 {
		t.Errorf("delivered after the cancellation: %+v", o)
	}
	// A context already cancelled delivers nothing.
	done, stop := context.WithCancel(context.Background())
	stop()
	for o := range h.Observe(done) {
		t.Errorf("delivered on a cancelled context: %+v", o)
	}
	cancel2()
	wg2.Wait()
}

// An observer that never takes anything blocks neither the publisher nor the other observers.
func TestObserverThatNeverReadsBlocksNoOne(t *testing.T) {
	h := newHub()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck := make(chan sdk.Observed[status]) // nobody receives
	wgStuck := observeInto(ctx, h, stuck, nil)
	out := make(chan sdk.Observed[status], 1024)
	wg := observeInto(ctx, h, out, nil)
	next(t, out)
	published := make(chan struct{})
	go func() {
		for i := 1; i <= 10_000; i++ {
			h.Publish(status{Seq: i})
		}
		close(published)
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on an observer")
	}
	for o := range out {
		if o.Status.Seq == 10_000 {
			break
		}
	}
	cancel()
	wg.Wait()
	wgStuck.Wait()
}

// BenchmarkObserve publishes changes of one status to 1,000 observers: ones that read as fast as
// they can (each change wakes each of them: their work shares the 2 cores with the publisher),
// and ones busy elsewhere (the publisher's own cost: one snapshot, one slot update per
// observer).
func BenchmarkObserve(b *testing.B) {
	for _, reading := range []bool{true, false} {
		name := "observers=reading"
		if !reading {
			name = "observers=busy"
		}
		b.Run(name, func(b *testing.B) {
			h := newHub()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 1000 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range h.Observe(ctx) {
						if !reading {
							<-ctx.Done()
						}
					}
				}()
			}
			for h.Observers() < 1000 {
				time.Sleep(time.Millisecond)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				h.Publish(status{Seq: i})
			}
			b.StopTimer()
			cancel()
			wg.Wait()
		})
	}
}
