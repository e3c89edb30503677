// Package floortest holds the tests that every remote floor passes, whatever its link: a
// floor's own test runs them on its echo and its client.
package floortest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/internal/floorclient"
	"github.com/zlink-go/zlink/bench/peers/workload"
)

// Floor is what the tests need of a floor.
type Floor struct {
	// Name begins the client's errors; Noun is what its link is in them.
	Name, Noun string
	// Serve serves on lis, until stop, an echo that answers each frame it reads with the
	// frames answer returns for it.
	Serve func(lis net.Listener, answer func(f []byte) [][]byte) (stop func())
	// ServeEcho serves the floor's own echo on lis until stop.
	ServeEcho func(lis net.Listener) (stop func())
	// Dial opens a client of callers callers to the echo at addr.
	Dial func(ctx context.Context, addr string, callers int) (*floorclient.Client, error)
	// Measure measures the echo at addr as the floor's Measure does.
	Measure func(ctx context.Context, addr string, callers int, warmup, duration time.Duration) (workload.Result, error)
}

// Echo answers each frame with itself.
func Echo(f []byte) [][]byte { return [][]byte{f} }

// serve serves with the floor's serve on a loopback port until stop or the test's end, and
// returns the address; stop may be called more than once.
func serve(t *testing.T, serve func(net.Listener) (stop func())) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var once sync.Once
	end := serve(lis)
	stop = func() { once.Do(end) }
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// serveAnswering serves f's echo whose answers answer makes of each frame on a loopback port until stop
// or the test's end, and returns its address.
func (f Floor) serveAnswering(t *testing.T, answer func([]byte) [][]byte) (addr string, stop func()) {
	t.Helper()
	return serve(t, func(lis net.Listener) func() { return f.Serve(lis, answer) })
}

// Run runs every test of the shared client on f.
func Run(t *testing.T, f Floor) {
	t.Run("TheEchoAnswersEachFrame", func(t *testing.T) { theEchoAnswersEachFrame(t, f) })
	t.Run("EveryCallerGetsItsOwnAnswer", func(t *testing.T) { everyCallerGetsItsOwnAnswer(t, f) })
	t.Run("ACallEndsWhenTheServerGoes", func(t *testing.T) { aCallEndsWhenTheServerGoes(t, f) })
	t.Run("MeasureReportsTheWindow", func(t *testing.T) { measureReportsTheWindow(t, f) })
	t.Run("GarbageEndsTheLink", func(t *testing.T) { garbageEndsTheLink(t, f) })
	t.Run("ADuplicateAnswerIsDropped", func(t *testing.T) { aDuplicateAnswerIsDropped(t, f) })
	t.Run("AnswersNoCallerTakesHoldNoOne", func(t *testing.T) { answersNoCallerTakesHoldNoOne(t, f) })
	t.Run("ALateAnswerIsNotTakenForTheNext", func(t *testing.T) { aLateAnswerIsNotTakenForTheNext(t, f) })
	t.Run("CloseEndsWaitingCalls", func(t *testing.T) { closeEndsWaitingCalls(t, f) })
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// theEchoAnswersEachFrame calls the floor's own echo: each call gets its own answer.
func theEchoAnswersEachFrame(t *testing.T, f Floor) {
	ctx := testContext(t)
	addr, _ := serve(t, f.ServeEcho)
	callOnce(ctx, t, f, addr, 20)
}

// everyCallerGetsItsOwnAnswer calls from many callers at once: each gets back the sequence
// number it sent, however the requests were framed.
func everyCallerGetsItsOwnAnswer(t *testing.T, f Floor) {
	ctx := testContext(t)
	addr, _ := f.serveAnswering(t, Echo)
	const callers, calls = 16, 500
	c, err := f.Dial(ctx, addr, callers)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for caller := range callers {
		wg.Go(func() {
			for i := range calls {
				seq := int64(caller*1_000_000 + i)
				got, err := c.Call(ctx, caller, seq)
				if err == nil && got != seq {
					err = fmt.Errorf("caller %d sent %d and got %d", caller, seq, got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	_, err = c.Call(ctx, 0, 1)
	require.Error(t, err, "a call after Close")
	_, err = c.Call(ctx, callers, 1)
	require.ErrorContains(t, err, "caller 16 of 16")
	_, err = c.Call(ctx, 0, -1)
	require.ErrorContains(t, err, "sequence number -1 is negative")
}

// aCallEndsWhenTheServerGoes stops the server under a client: its calls fail instead of
// waiting for ever.
func aCallEndsWhenTheServerGoes(t *testing.T, f Floor) {
	ctx := testContext(t)
	addr, stop := f.serveAnswering(t, Echo)
	c, err := f.Dial(ctx, addr, 1)
	require.NoError(t, err)
	defer c.Close()
	CallInOrder(ctx, t, c, 7, 7)
	stop()
	_, err = c.Call(ctx, 0, 8)
	require.ErrorContains(t, err, f.Name+": the "+f.Noun+" ended")
}

// measureReportsTheWindow measures a short run: it counts calls and their latency.
func measureReportsTheWindow(t *testing.T, f Floor) {
	ctx := testContext(t)
	addr, _ := f.serveAnswering(t, Echo)
	res, err := f.Measure(ctx, addr, 4, 20*time.Millisecond, 100*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, res.Ops)
	require.InDelta(t, 0.1, res.Seconds, 0.09)
	require.NotNil(t, res.Latency)
	require.Positive(t, res.Latency.P50)
}

// garbageEndsTheLink answers with bytes that are no answer to a request: the calls fail, naming
// it, and Close still returns.
func garbageEndsTheLink(t *testing.T, f Floor) {
	ctx := testContext(t)
	tooLarge := binary.AppendUvarint(binary.AppendUvarint(nil, 0), math.MaxInt64+1)
	for name, c := range map[string]struct {
		answer func([]byte) [][]byte
		err    string
	}{
		"unknown caller": {func([]byte) [][]byte { return [][]byte{{0x7f, 1}} }, "answered a request no caller sent"},
		"cut short":      {func(b []byte) [][]byte { return [][]byte{b[:len(b)-1]} }, "answered a request cut short"},
		"sequence number past int64": {func([]byte) [][]byte { return [][]byte{append(tooLarge, make([]byte, floorclient.PayloadSize)...)} },
			"answered a sequence number no caller sent"},
	} {
		t.Run(name, func(t *testing.T) {
			addr, _ := f.serveAnswering(t, c.answer)
			cl, err := f.Dial(ctx, addr, 2)
			require.NoError(t, err)
			short, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err = cl.Call(short, 0, 1)
			require.ErrorContains(t, err, f.Name+": the echo "+c.err)
			_, err = cl.Call(ctx, 1, 2)
			require.Error(t, err, "the link has ended")
			require.NoError(t, cl.Close())
		})
	}
}

// aDuplicateAnswerIsDropped answers every frame twice: each call still gets its own answer,
// and none waits for ever.
func aDuplicateAnswerIsDropped(t *testing.T, f Floor) {
	ctx := testContext(t)
	addr, _ := f.serveAnswering(t, func(b []byte) [][]byte { return [][]byte{b, b} })
	callOnce(ctx, t, f, addr, 50)
}

// answersNoCallerTakesHoldNoOne has the echo answer the first frame again in front of every
// later one, so that its caller, which has its answer, gets answers that no one takes: they
// neither stop the receiver from answering the other caller, nor keep that caller's next answer
// from it, which comes right behind one of them.
func answersNoCallerTakesHoldNoOne(t *testing.T, f Floor) {
	ctx := testContext(t)
	var mu sync.Mutex
	var first []byte
	addr, _ := f.serveAnswering(t, func(b []byte) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = append([]byte(nil), b...) // b's array is the echo's again once answered
			return [][]byte{b}
		}
		return [][]byte{first, b}
	})
	c, err := f.Dial(ctx, addr, 2)
	require.NoError(t, err)
	defer closeWithin(t, c)
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := c.Call(short, 0, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), got)
	for seq := int64(1); seq <= 10; seq++ {
		// Each brings caller 0's answer again: no one takes it.
		got, err := c.Call(short, 1, seq)
		require.NoError(t, err, "caller 1's call %d, while caller 0's extra answers wait", seq)
		require.Equal(t, seq, got)
	}
	for seq := int64(2); seq <= 20; seq++ {
		got, err = c.Call(short, 0, seq)
		require.NoError(t, err, "caller 0's call %d, right behind its stale answer", seq)
		require.Equal(t, seq, got)
	}
}

// closeWithin closes c, failing the test rather than waiting for ever when its goroutines do
// not end.
func closeWithin(t *testing.T, c *floorclient.Client) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for the client's goroutines")
	}
}

// callOnce dials the echo at addr with one caller, which calls it with the sequence numbers 1
// to last: each call must get its own answer.
func callOnce(ctx context.Context, t *testing.T, f Floor, addr string, last int64) {
	t.Helper()
	c, err := f.Dial(ctx, addr, 1)
	require.NoError(t, err)
	defer c.Close()
	CallInOrder(ctx, t, c, 1, last)
}

// aLateAnswerIsNotTakenForTheNext lets a call's context end before its answer comes: the
// caller's next call gets its own answer, not the late one.
func aLateAnswerIsNotTakenForTheNext(t *testing.T, f Floor) {
	ctx := testContext(t)
	var mu sync.Mutex
	hold := true
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // a failing test leaves no answer held
	addr, _ := f.serveAnswering(t, func(b []byte) [][]byte {
		mu.Lock()
		h := hold
		hold = false
		mu.Unlock()
		if h {
			<-release // the first answer comes only after its call gave up
		}
		return [][]byte{b}
	})
	c, err := f.Dial(ctx, addr, 1)
	require.NoError(t, err)
	defer c.Close()
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Call(short, 0, 1)
	cancelShort()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	free()
	CallInOrder(ctx, t, c, 2, 4)
}

// closeEndsWaitingCalls closes a client while a call waits for an echo that never answers.
func closeEndsWaitingCalls(t *testing.T, f Floor) {
	ctx := testContext(t)
	addr, _ := f.serveAnswering(t, func([]byte) [][]byte { return nil })
	c, err := f.Dial(ctx, addr, 1)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, 0, 1)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	closeWithin(t, c)
	select {
	case err := <-errc:
		require.ErrorContains(t, err, f.Name+": the "+f.Noun+" ended")
	case <-ctx.Done():
		t.Fatal("the call still waits after Close")
	}
}

// CallInOrder calls as caller 0 with the sequence numbers from to last: each call must get its
// own answer.
func CallInOrder(ctx context.Context, t *testing.T, c *floorclient.Client, from, last int64) {
	t.Helper()
	for seq := from; seq <= last; seq++ {
		got, err := c.Call(ctx, 0, seq)
		require.NoError(t, err)
		require.Equal(t, seq, got)
	}
}
