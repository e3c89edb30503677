package grpcfloor

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestEveryCallerGetsItsOwnAnswer calls from many callers at once: each gets back the
// sequence number it sent, however the requests were batched.
func TestEveryCallerGetsItsOwnAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const callers, calls = 16, 500
	c, err := Dial(ctx, serve(t), callers)
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
	require.ErrorContains(t, err, "the stream ended")
}

// TestMeasureReportsTheWindow measures a short run: it counts calls and their latency.
func TestMeasureReportsTheWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Measure(ctx, serve(t), 4, 20*time.Millisecond, 100*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, res.Ops)
	require.InDelta(t, 0.1, res.Seconds, 0.09)
	require.NotNil(t, res.Latency)
	require.Positive(t, res.Latency.P50)
}
