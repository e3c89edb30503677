package tcpfloor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoAt serves the echo for the test and returns its address.
func echoAt(t *testing.T) string {
	t.Helper()
	return misbehaving(t, func(f []byte) [][]byte { return [][]byte{f} })
}

// misbehaving serves an echo whose answers answer makes of each frame.
func misbehaving(t *testing.T, answer func([]byte) [][]byte) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := serve(lis, answer)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestEveryCallerGetsItsOwnAnswer calls from many callers at once: each gets back the
// sequence number it sent, however the requests were framed.
func TestEveryCallerGetsItsOwnAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := Serve(lis)
	defer s.Stop()
	const callers, calls = 16, 500
	c, err := Dial(ctx, lis.Addr().String(), callers)
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
}

// TestACallEndsWhenTheServerGoes stops the server under a client: its calls fail instead of
// waiting for ever.
func TestACallEndsWhenTheServerGoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := Serve(lis)
	c, err := Dial(ctx, lis.Addr().String(), 1)
	require.NoError(t, err)
	defer c.Close()
	got, err := c.Call(ctx, 0, 7)
	require.NoError(t, err)
	require.Equal(t, int64(7), got)
	s.Stop()
	_, err = c.Call(ctx, 0, 8)
	require.ErrorContains(t, err, "the connection ended")
}

// TestMeasureReportsTheWindow measures a short run: it counts calls and their latency.
func TestMeasureReportsTheWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Measure(ctx, echoAt(t), 4, 20*time.Millisecond, 100*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, res.Ops)
	require.InDelta(t, 0.1, res.Seconds, 0.09)
	require.NotNil(t, res.Latency)
	require.Positive(t, res.Latency.P50)
}

// TestGarbageEndsTheConnection answers with bytes that are no request: the calls fail, naming
// it, and Close still returns.
func TestGarbageEndsTheConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, answer := range map[string]func([]byte) [][]byte{
		"unknown caller": func([]byte) [][]byte { return [][]byte{{0x7f, 1}} },
		"cut short":      func(f []byte) [][]byte { return [][]byte{f[:len(f)-1]} },
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Dial(ctx, misbehaving(t, answer), 2)
			require.NoError(t, err)
			_, err = c.Call(ctx, 0, 1)
			require.ErrorContains(t, err, "tcpfloor: the echo answered a request")
			_, err = c.Call(ctx, 1, 2)
			require.Error(t, err, "the connection has ended")
			require.NoError(t, c.Close())
		})
	}
}

// TestAnOversizedFrameIsRefused sends the server a frame header past the limit: the server
// drops the connection rather than allocate for it, and the client's calls fail.
func TestAnOversizedFrameIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := echoAt(t)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(binary.BigEndian.AppendUint32(nil, maxFrame+1))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err, "the server answered an oversized frame instead of closing")
	var ne net.Error
	if errors.As(err, &ne) {
		require.False(t, ne.Timeout(), "the server kept the connection open")
	}
	// The server still serves others.
	c, err := Dial(ctx, addr, 1)
	require.NoError(t, err)
	defer c.Close()
	callInOrder(ctx, t, c, 1, 3)
}

// TestADuplicateAnswerIsDropped answers every frame twice: each call still gets its own
// answer, and none waits for ever.
func TestADuplicateAnswerIsDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, misbehaving(t, func(f []byte) [][]byte { return [][]byte{f, f} }), 1)
	require.NoError(t, err)
	defer c.Close()
	callInOrder(ctx, t, c, 1, 50)
}

// callInOrder calls as caller 0 with the sequence numbers from to last: each call must get its
// own answer.
func callInOrder(ctx context.Context, t *testing.T, c *Client, from, last int64) {
	t.Helper()
	for seq := from; seq <= last; seq++ {
		got, err := c.Call(ctx, 0, seq)
		require.NoError(t, err)
		require.Equal(t, seq, got)
	}
}

// TestALateAnswerIsNotTakenForTheNext lets a call's context end before its answer comes: the
// caller's next call gets its own answer, not the late one.
func TestALateAnswerIsNotTakenForTheNext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	hold := true
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // a failing test leaves no answer held
	c, err := Dial(ctx, misbehaving(t, func(f []byte) [][]byte {
		mu.Lock()
		h := hold
		hold = false
		mu.Unlock()
		if h {
			<-release // the first answer comes only after its call gave up
		}
		return [][]byte{f}
	}), 1)
	require.NoError(t, err)
	defer c.Close()
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Call(short, 0, 1)
	cancelShort()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	free()
	callInOrder(ctx, t, c, 2, 4)
}

// TestCloseEndsWaitingCalls closes a client while a call waits for an echo that never answers.
func TestCloseEndsWaitingCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, misbehaving(t, func([]byte) [][]byte { return nil }), 1)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, 0, 1)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, c.Close())
	select {
	case err := <-errc:
		require.ErrorContains(t, err, "the connection ended")
	case <-ctx.Done():
		t.Fatal("the call still waits after Close")
	}
}

// TestStopEndsOpenConnections stops a server while a client is connected: Stop returns, and
// the client's next call fails.
func TestStopEndsOpenConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := Serve(lis)
	c, err := Dial(ctx, lis.Addr().String(), 1)
	require.NoError(t, err)
	defer c.Close()
	callInOrder(ctx, t, c, 1, 2)
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("Stop waits for a connection that is open")
	}
	_, err = c.Call(ctx, 0, 3)
	require.ErrorContains(t, err, "the connection ended")
}
