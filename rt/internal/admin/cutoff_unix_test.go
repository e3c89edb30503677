//go:build unix

package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
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
	s, doc := largeMesh(t, timeout)
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
	s, doc := largeMesh(t, timeout)
	conn := getWithSmallBuffer(t, s, "/mesh")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	start := time.Now()
	buf := make([]byte, 256<<10)
	var got int
	for {
		n, err := io.ReadFull(conn, buf)
		got += n
		if err != nil {
			break // the end of the answer, which closes the connection
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.Greater(t, got, len(doc), "the whole answer, with its headers")
	assert.Greater(t, time.Since(start), 2*timeout, "longer than WriteTimeout in all")
}

// largeMesh serves the mesh view of a mesh of 40,000 nodes, larger than every buffer between
// the server and a reader whose own buffer is small, and returns the view's document.
func largeMesh(t *testing.T, writeTimeout time.Duration) (*admin.Server, []byte) {
	t.Helper()
	n := newTestNode()
	for i := range 40000 {
		n.members = append(n.members, admin.Member{Node: sdk.NodeID(fmt.Sprintf("node-%05d-%s", i, strings.Repeat("x", 100))), State: sdk.RuntimeStateServing})
	}
	s := serve(t, admin.Config{WriteTimeout: writeTimeout, PeerTimeout: 100 * time.Millisecond}, n)
	doc, err := json.MarshalIndent(s.MeshView(), "", "  ")
	require.NoError(t, err)
	require.Greater(t, len(doc), 8<<20, "larger than the buffers between the two")
	return s, doc
}

// getWithSmallBuffer sends GET path to s on a connection whose receive buffer is small, which
// it returns unread; the server closes it after the answer, and the test's end in any case.
func getWithSmallBuffer(t *testing.T, s *admin.Server, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	return rawRequestWith(t, s, &d, "GET "+path, "Connection: close")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
