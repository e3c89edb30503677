package transport_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

func noNest(context.Context) bool { return false }

// A node whose application job queue hovers at its pause threshold: intake pauses after
// each admitted request and resumes 300 ms later (a job ends). Each of the reader's waits is
// shorter than readingEvery, so it never says Reading; the caller's long calls produce no
// reply yet, and its probe sits behind them on the stream. The reader reads on steadily, every
// call is taken in and would be answered, yet the caller closes the stream.
func TestAStreamWhoseIntakeResumesBrieflyIsKept(t *testing.T) {
	const stall = 2 * time.Second // readingEvery 500 ms; the caller's stall 2 s
	meter, s := jobMeter(t, 2)
	require.EqualValues(t, 2, s.PauseAt)
	require.EqualValues(t, 1, s.ResumeAt)
	base, err := meter.Acquire(ctx, noNest) // the node's other work: one job for good
	require.NoError(t, err)
	defer meter.Return(base)

	release := make(chan struct{})
	var admitted atomic.Int64
	var jobs sync.WaitGroup
	t.Cleanup(jobs.Wait)
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		// On the reader, as a lane's admission takes a job's permit: intake pauses.
		reserved, err := meter.Acquire(ctx, noNest)
		if err != nil {
			reply(&wire.Reply{Error: wire.EncodeError(err)})
			return
		}
		admitted.Add(1)
		jobs.Go(func() {
			time.Sleep(300 * time.Millisecond) // the job ends: intake resumes
			meter.Return(reserved)
			select { // the call then waits for an event, as a long poll does
			case <-release:
				reply(&wire.Reply{})
			case <-ctx.Done():
			}
		})
	}}, func(c *transport.Config) { c.Meter, c.StallTimeout = meter, stall })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	const calls = 20 // 20 × 300 ms of intake waits: 6 s, three stalls
	ends := make(chan error, calls)
	for range calls {
		go func() {
			_, err := a.Call(context.Background(), "b", &wire.Request{})
			ends <- err
		}()
	}
	began := time.Now()
	for admitted.Load() < calls {
		select {
		case err := <-ends:
			require.Failf(t, "a call to a peer that reads on ended", "after %v, with %d of %d calls admitted: %v", time.Since(began), admitted.Load(), calls, err)
		case <-time.After(10 * time.Millisecond):
		}
		require.Less(t, time.Since(began), 20*time.Second)
	}
	close(release)
	for range calls {
		require.NoError(t, <-ends)
	}
}

// A handler that waits on the stream's reader for a job's permit, as the catalog's
// submit does (mesh Handle -> Catalog.Admit -> submit -> Meter.Acquire, with the request's
// context): the queue was below its pause threshold when the request was read, and local
// callers took the last permits before its Acquire. DESIGN.md counts "for a permit" among a
// reader's waits. The wait ends after 3 s, but the caller closes the stream first.
func TestAReaderThatWaitsForAJobPermitKeepsTheStream(t *testing.T) {
	const stall = 500 * time.Millisecond
	meter, _ := jobMeter(t, 2)
	entered, filled := make(chan struct{}), make(chan struct{})
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, _ *wire.Request, reply func(*wire.Reply)) {
		close(entered)
		<-filled
		reserved, err := meter.Acquire(ctx, noNest) // on the reader
		if err != nil {
			reply(&wire.Reply{Error: wire.EncodeError(err)})
			return
		}
		meter.Return(reserved)
		reply(&wire.Reply{Payload: []byte("ran")})
	}}, func(c *transport.Config) { c.Meter, c.StallTimeout = meter, stall })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	done := make(chan error, 1)
	go func() {
		r, err := a.Call(context.Background(), "b", &wire.Request{})
		if err == nil {
			err = wire.DecodeError(r.Error)
		}
		done <- err
	}()
	<-entered
	var local []bool
	for range 2 { // local jobs take every permit
		reserved, err := meter.Acquire(ctx, noNest)
		require.NoError(t, err)
		local = append(local, reserved)
	}
	close(filled)
	time.Sleep(3 * time.Second) // the local jobs run
	for _, r := range local {
		meter.Return(r)
	}
	select {
	case err := <-done:
		require.NoError(t, err, "the peer's request got its permit and ran")
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
}

// A reader that read ahead while it waited for room (for the cancellations behind the waiting
// request), and then stops in a handler that never returns, is found out as any stopped
// reader is: what is read once the wait has ended, probes included, waits for the reader.
func TestAReaderThatStopsAfterItReadAheadIsFoundOut(t *testing.T) {
	const maxMessage, payload = 256 << 10, 200 << 10
	const stall = time.Second
	var polling atomic.Int64
	release, stuck := make(chan struct{}), make(chan struct{})
	var handlers sync.WaitGroup
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		switch req.Method {
		case "poll":
			handlers.Go(func() {
				polling.Add(1)
				<-ctx.Done()
				polling.Add(-1)
				reply(&wire.Reply{})
			})
		case "stuck":
			close(stuck)
			<-release // the reader stops here
			reply(&wire.Reply{})
		default:
			reply(&wire.Reply{})
		}
	}}, func(c *transport.Config) {
		c.Meter, c.MaxMessageSize, c.StallTimeout = budgetMeter(t, maxMessage), maxMessage, stall
	})
	t.Cleanup(handlers.Wait)
	t.Cleanup(func() { close(release) })
	a := start(t, "a", handler{}, func(c *transport.Config) { c.StallTimeout = stall })
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")

	polls, giveUp := context.WithCancel(context.Background())
	for range 2 { // they fill the stream's share
		go func() { _, _ = a.Call(polls, "b", &wire.Request{Method: "poll", Payload: make([]byte, payload)}) }()
	}
	require.Eventually(t, func() bool { return polling.Load() == 2 }, 10*time.Second, time.Millisecond)
	r, err := a.Call(ctx, "b", &wire.Request{Method: "quick", Payload: make([]byte, payload)})
	require.NoError(t, err)
	require.ErrorIs(t, wire.DecodeError(r.Error), sdk.ErrInboundBudget, "the stream now waits for room, and reads ahead")
	stuckEnd := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), "b", &wire.Request{Method: "stuck"})
		stuckEnd <- err
	}()
	time.Sleep(100 * time.Millisecond)
	giveUp() // the cancellations read ahead end the polls: the room comes, and "stuck" is taken
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request was never taken in")
	}
	select {
	case err := <-stuckEnd:
		require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	case <-time.After(10 * stall):
		require.FailNow(t, "the caller still finds the stream read", "its reader has been stopped for %v", 10*stall)
	}
}
