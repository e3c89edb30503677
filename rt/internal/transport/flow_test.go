package transport_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
)

// tappedConn records what passes through a connection, each way.
type tappedConn struct {
	net.Conn
	mu      sync.Mutex
	written bytes.Buffer
	read    bytes.Buffer
}

func (c *tappedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.keep(&c.written, p[:n])
	return n, err
}

func (c *tappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.keep(&c.read, p[:n])
	return n, err
}

func (c *tappedConn) keep(into *bytes.Buffer, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	into.Write(p)
}

// frameCounts is what one side of a connection sent.
type frameCounts struct {
	pings        int // PING frames other than acknowledgements
	streamWindow uint32
	connUpdates  int    // WINDOW_UPDATE frames for the connection
	connRaise    uint32 // the increment of the first of them
}

// countFrames reads HTTP/2 frames from b until it ends; a frame cut off by the connection's
// close ends it too.
func countFrames(t *testing.T, b []byte) frameCounts {
	t.Helper()
	var c frameCounts
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return c
		}
		require.NoError(t, err)
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				c.pings++
			}
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				c.streamWindow = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				if c.connUpdates == 0 {
					c.connRaise = f.Increment
				}
				c.connUpdates++
			}
		}
	}
}

// Request and reply are not followed by flow-control probes: both sides announce the fixed
// window, and neither sends a PING while calls flow (keepalive pings come only after seconds
// of silence).
func TestRequestsAndRepliesSendNoFlowControlPings(t *testing.T) {
	b := start(t, "b", handler{}, nil)
	var (
		mu    sync.Mutex
		conns []*tappedConn
	)
	a := start(t, "a", handler{}, func(c *transport.Config) {
		c.Dialer = func(ctx context.Context, endpoint string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", endpoint)
			if err != nil {
				return nil, err
			}
			tc := &tappedConn{Conn: conn}
			mu.Lock()
			conns = append(conns, tc)
			mu.Unlock()
			return tc, nil
		}
	})
	a.Connect("b", b.Addr())
	waitReady(t, a, "b")
	payload := bytes.Repeat([]byte("p"), 300)
	const calls = 200
	for range calls {
		r, err := a.Call(ctx, "b", &wire.Request{Op: wire.Op_OP_CALL, Payload: payload})
		require.NoError(t, err)
		require.Equal(t, payload, r.Payload)
	}
	require.NoError(t, a.Close())

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, conns, 1)
	c := conns[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	written := c.written.Bytes()
	require.True(t, bytes.HasPrefix(written, []byte(http2.ClientPreface)), "the caller's side opens with the HTTP/2 preface")
	caller := countFrames(t, written[len(http2.ClientPreface):])
	server := countFrames(t, c.read.Bytes())
	assert.Equal(t, uint32(transport.FlowWindow), caller.streamWindow, "the caller announces the fixed stream window")
	assert.Equal(t, uint32(transport.FlowWindow), server.streamWindow, "the server announces the fixed stream window")
	assert.Zero(t, caller.pings, "the caller sent PINGs during %d calls", calls)
	assert.Zero(t, server.pings, "the server sent PINGs during %d calls", calls)
	// A connection's window starts at HTTP/2's 65,535 bytes whatever the settings say: each side
	// raises it to the fixed window at once, and the calls then fit in it.
	const initialConnWindow = 65535
	assert.Equal(t, uint32(transport.FlowWindow-initialConnWindow), caller.connRaise, "the caller raises the connection's window to the fixed window")
	assert.Equal(t, uint32(transport.FlowWindow-initialConnWindow), server.connRaise, "the server raises the connection's window to the fixed window")
	assert.Equal(t, 1, caller.connUpdates, "%d calls of %d bytes fit the caller's connection window", calls, len(payload))
	assert.Equal(t, 1, server.connUpdates, "%d calls of %d bytes fit the server's connection window", calls, len(payload))
}
