//go:build unix

package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/admin"
	"github.com/zlink-go/zlink/sdk"
)

// An answer of the server's own routes that its reader stops taking is cut off WriteTimeout
// after its first write: the handler's goroutine and the connection are not held for as long
// as the reader likes, however large the answer. The mesh view of a large mesh is larger than
// every buffer between the two (the reader's is made small).
func TestAnAnswerItsReaderStopsTakingIsCutOff(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s, doc := largeMesh(t, admin.Config{WriteTimeout: timeout})
	conn := getWithSmallBuffer(t, s, "/mesh")

	// The first byte says that the answer is being written (making the view may take a while
	// on a loaded machine); then the reader takes nothing for a while.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err := io.ReadFull(conn, make([]byte, 1))
	require.NoError(t, err)
	time.Sleep(5 * timeout)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.Copy(io.Discard, conn)
	got++ // the first byte
	assert.False(t, isTimeout(err), "the server ended the answer: %v", err)
	assert.Less(t, got, int64(len(doc)), "the answer was cut off, not written whole once the reader read again")
}

// A reader that takes a large answer slowly but steadily gets all of it, though it takes far
// longer than WriteTimeout: the deadline bounds each part of it, not the whole.
func TestASlowButSteadyReaderGetsTheWholeAnswer(t *testing.T) {
	const timeout = time.Second
	s, doc := largeMesh(t, admin.Config{WriteTimeout: timeout})
	conn := getWithSmallBuffer(t, s, "/mesh")
	start := time.Now()
	got, _ := readSteadily(t, conn) // to the end of the answer, which closes the connection
	assert.Greater(t, got, len(doc), "the whole answer, with its headers")
	assert.Greater(t, time.Since(start), 2*timeout, "longer than WriteTimeout in all")
}

// A reader that takes a large answer steadily, and so is never cut off for a chunk, holds it
// for AnswerWriteTimeout of writing at most: then it is cut off, short of the whole answer.
func TestASteadyReaderIsCutOffAtTheWholeAnswersBound(t *testing.T) {
	s, doc := largeMesh(t, admin.Config{WriteTimeout: time.Second, AnswerWriteTimeout: 300 * time.Millisecond})
	conn := getWithSmallBuffer(t, s, "/mesh")
	got, err := readSteadily(t, conn)
	require.False(t, isTimeout(err), "the server cut it off: %v", err)
	assert.Less(t, got, len(doc), "cut off before the end of the answer")
}

// readSteadily reads conn, 256 KiB each 50 ms, until a read fails, and returns how much it
// read and the failure.
func readSteadily(t *testing.T, conn net.Conn) (int, error) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	buf := make([]byte, 256<<10)
	var got int
	for {
		n, err := io.ReadFull(conn, buf)
		got += n
		if err != nil {
			return got, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// largeMesh serves the mesh view of a mesh of 40,000 nodes, larger than every buffer between
// the server and a reader whose own buffer is small, and returns the view's document.
func largeMesh(t *testing.T, cfg admin.Config) (*admin.Server, []byte) {
	t.Helper()
	n := newTestNode()
	for i := range 40000 {
		n.members = append(n.members, admin.Member{Node: sdk.NodeID(fmt.Sprintf("node-%05d-%s", i, strings.Repeat("x", 100))), State: sdk.RuntimeStateServing})
	}
	cfg.PeerTimeout = 100 * time.Millisecond
	s := serve(t, cfg, n)
	doc, err := json.MarshalIndent(s.MeshView(), "", "  ")
	require.NoError(t, err)
	require.Greater(t, len(doc), 8<<20, "larger than the buffers between the two")
	return s, doc
}

// getWithSmallBuffer sends GET path to s on a connection whose receive buffer is small, which
// it returns unread; the server closes it after the answer, and the test's end in any case.
func getWithSmallBuffer(t *testing.T, s *admin.Server, path string) net.Conn {
	t.Helper()
	return rawRequestWith(t, s, smallBuffer(), "GET "+path, "Connection: close")
}

// smallBuffer dials connections whose receive buffer is small: what a reader does not take
// soon fills the buffers between it and the server.
func smallBuffer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Refusals are bounded as every answer of the server's own is: a reader that sends request
// after request on one connection, each refused, and takes none of the answers, is cut off.
// Each refusal names its long path: the answers are larger than the buffers between the two.
func TestRefusalsTheirReaderStopsTakingAreCutOff(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s := serve(t, admin.Config{WriteTimeout: timeout}, newTestNode())
	path := "/nothing-" + strings.Repeat("x", 50000)
	conn := rawRequestWith(t, s, smallBuffer(), "GET "+path)
	host := strings.TrimPrefix(s.URL(), "http://")
	const requests = 300
	go func() {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Minute))
		for range requests - 1 {
			if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
				return // the server cut the connection off
			}
		}
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err := io.ReadFull(conn, make([]byte, 1))
	require.NoError(t, err)
	time.Sleep(5 * timeout)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	body, err := io.ReadAll(conn)
	assert.False(t, isTimeout(err), "the server ended the connection: %v", err)
	assert.Less(t, strings.Count(string(body), "404 Not Found"), requests-1, "the answers were cut off")
}

// The application's handlers bound their answers as they choose: the server's write deadline
// does not cut off a large answer of theirs whose reader pauses for longer than it.
func TestApplicationAnswersAreNotBoundedByTheServer(t *testing.T) {
	const timeout = 200 * time.Millisecond
	big := strings.Repeat("x", 12<<20)
	handlers := map[string]http.Handler{"GET /big": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, big)
	})}
	s := serve(t, admin.Config{WriteTimeout: timeout, Handlers: handlers}, newTestNode())
	conn := rawRequestWith(t, s, smallBuffer(), "GET /big", "Connection: close")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err := io.ReadFull(conn, make([]byte, 1))
	require.NoError(t, err)
	time.Sleep(5 * timeout)
	got, err := io.Copy(io.Discard, conn)
	require.NoError(t, err)
	assert.Greater(t, got, int64(len(big)), "the whole answer, with its headers")
}
