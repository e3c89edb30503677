package tcpfloor

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/internal/floorclient/floortest"
)

// TestTheSharedClientOverAConnection runs the tests of the floors' shared client over a
// connection to the TCP echo.
func TestTheSharedClientOverAConnection(t *testing.T) {
	floortest.Run(t, floortest.Floor{
		Name: "tcpfloor", Noun: "connection",
		Serve:     func(lis net.Listener, answer func([]byte) [][]byte) func() { return serve(lis, answer).Stop },
		ServeEcho: func(lis net.Listener) func() { return Serve(lis).Stop },
		Dial:      Dial, Measure: Measure,
	})
}

// serveForTest serves an echo whose answers answer makes of each frame until the test ends.
func serveForTest(t *testing.T, answer func([]byte) [][]byte) (string, *Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := serve(lis, answer)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s
}

// TestAnOversizedFrameIsRefused sends the server a frame header past the limit: the server
// drops the connection rather than allocate for it, and serves others on.
func TestAnOversizedFrameIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, _ := serveForTest(t, floortest.Echo)
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
	c, err := Dial(ctx, addr, 1)
	require.NoError(t, err)
	defer c.Close()
	floortest.CallInOrder(ctx, t, c, 1, 3)
}

// TestAnOversizedAnswerEndsTheConnection has the echo answer with a frame header past the
// limit: the client's call fails, naming it.
func TestAnOversizedAnswerEndsTheConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = conn.Write(binary.BigEndian.AppendUint32(nil, maxFrame+1))
		_, _ = conn.Read(make([]byte, 1<<10)) // until the client closes
	}()
	c, err := Dial(ctx, lis.Addr().String(), 1)
	require.NoError(t, err)
	_, err = c.Call(ctx, 0, 1)
	require.ErrorContains(t, err, "tcpfloor: the connection ended: a frame of 1048577 bytes, over the limit of 1048576")
	require.NoError(t, c.Close())
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
	floortest.CallInOrder(ctx, t, c, 1, 2)
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
	require.ErrorContains(t, err, "tcpfloor: the connection ended")
}
