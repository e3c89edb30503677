package grpcfloor

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/internal/floorclient/floortest"
)

// TestTheSharedClientOverAStream runs the tests of the floors' shared client over a stream to
// the gRPC echo.
func TestTheSharedClientOverAStream(t *testing.T) {
	floortest.Run(t, floortest.Floor{
		Name: "grpcfloor", Noun: "stream",
		Serve:     func(lis net.Listener, answer func([]byte) [][]byte) func() { return serve(lis, answer).Stop },
		ServeEcho: func(lis net.Listener) func() { return Serve(lis).Stop },
		Dial:      Dial, Measure: Measure,
	})
}

// TestDialEndsWithItsContext dials a listener that accepts and never speaks gRPC: Dial returns
// when its context ends.
func TestDialEndsWithItsContext(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	defer conns.Wait()
	defer lis.Close() // first: it ends the accepting goroutine
	conns.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, lis.Addr().String(), 1)
		dialed <- err
	}()
	select {
	case err := <-dialed:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Dial outlived its context")
	}
}
