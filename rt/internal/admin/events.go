package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// eventSeq numbers the events of every stream of the process: an event's id only ever grows,
// across reconnections too.
var eventSeq atomic.Uint64

// events serves GET /events: a server-sent event stream of the node's status document. The
// stream is one more observer of the host's statuses (H1): a change only marks the stream
// dirty (one slot, never a queue), and the writer sends the newest snapshot, at most one per
// EventInterval and at least one per Heartbeat, so a slow browser gets fewer, newer
// snapshots and the host is never held up; only the host's Error is written even when a
// newer status replaced it, so that it is never lost (H1). A write that the browser does not take within
// WriteTimeout ends the stream; the browser's EventSource then connects again (retry) and
// gets the current snapshot at once: every event is complete, so nothing is replayed. When
// the host has stopped, the stream sends the last snapshot and ends. A stream lasts
// StreamLifetime at most, so that one whose reader stopped while the connection's buffers take
// its writes gives its place back: the browser connects again at once.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		// The headers only, at once: net/http drops a HEAD's body, so no write of a stream
		// would ever wait and the write timeout would never end it and free its place.
		w.WriteHeader(http.StatusOK)
		return
	}
	release, ok := s.acquireStream(w)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	dirty, stopped := s.watch(ctx)
	defer func() {
		cancel()
		<-stopped
	}()

	w.WriteHeader(http.StatusOK)
	sse := newSSEWriter(w, s.cfg.WriteTimeout)
	if err := sse.write(fmt.Appendf(nil, "retry: %d\n\n", reconnectDelay.Milliseconds())); err != nil {
		return
	}
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	lifetime := time.NewTimer(s.cfg.StreamLifetime)
	defer lifetime.Stop()
	var written *uint64 // the sequence of the runtime status written last
	for {
		if err := s.writeSnapshot(sse, &written); err != nil {
			if !errors.Is(err, context.Canceled) {
				s.cfg.Logger.Debug("an admin event stream ended", "remote", r.RemoteAddr, "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-stopped:
			// The host stopped: its last snapshot, then the end.
			_ = s.writeSnapshot(sse, &written)
			return
		case <-dirty:
		case <-heartbeat.C:
		case <-lifetime.C:
			sse.end()
			return
		}
		// At most one snapshot per EventInterval: changes meanwhile coalesce. The host's stop is
		// written at once, before the server's close, which may leave the stream little time.
		select {
		case <-ctx.Done():
			return
		case <-stopped:
			_ = s.writeSnapshot(sse, &written)
			return
		case <-lifetime.C:
			sse.end()
			return
		case <-time.After(s.cfg.EventInterval):
		}
	}
}

// writeSnapshot writes the node's snapshot as an event, after the host's Error when the
// snapshot replaced it before the stream showed it (runtimeSince), as the snapshot with that
// runtime status; written is the sequence of the runtime status the stream wrote last.
func (s *Server) writeSnapshot(sse *sseWriter, written **uint64) error {
	snap := s.node.Snapshot()
	for _, rs := range runtimeSince(snap, *written) {
		then := snap
		then.Runtime = rs
		if err := sse.event("status", Document(then)); err != nil {
			return err
		}
		*written = &rs.Sequence
	}
	return nil
}

// reconnectDelay is how long a browser waits before it connects again after a stream broke,
// and renewDelay after the server ended one at its lifetime: the new stream's first event is
// the current snapshot, so nothing is missed meanwhile.
const (
	reconnectDelay = time.Second
	renewDelay     = 50 * time.Millisecond
)

// newSSEWriter writes a stream to w, each write within timeout: through the connection's own
// writer, so that each write has the whole timeout (answerWithin would count a chunk's).
func newSSEWriter(w http.ResponseWriter, timeout time.Duration) *sseWriter {
	w = connWriter(w)
	return &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// sseWriter writes server-sent events, each within a write deadline.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
}

func (s *sseWriter) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf.Reset()
	s.buf.WriteString("id: ")
	s.buf.WriteString(strconv.FormatUint(eventSeq.Add(1), 10))
	s.buf.WriteString("\nevent: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	s.buf.Write(data) // compact JSON holds no newline
	s.buf.WriteString("\n\n")
	return s.write(s.buf.Bytes())
}

// end asks the browser to connect again soon, before the server ends the stream: the delay
// holds for the next stream until that stream sets its own.
func (s *sseWriter) end() {
	_ = s.write(fmt.Appendf(nil, "retry: %d\n\n", renewDelay.Milliseconds()))
}

// write writes b and flushes it, within the write deadline.
func (s *sseWriter) write(b []byte) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}
