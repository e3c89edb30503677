package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// RelocateRequest is the body of POST /relocate.
type RelocateRequest struct {
	// Mode is "planned" (PlannedMaintenance) or "rolling" (RollingUpdate); the sdk's names are
	// taken too.
	Mode string `json:"mode"`
	// TargetApplicationVersion is the version a rolling update moves to; planned maintenance
	// takes none.
	TargetApplicationVersion *int64 `json:"targetApplicationVersion,omitempty"`
	// Deadline bounds the relocation, as a Go duration ("90s"); empty: the node's default.
	Deadline string `json:"deadline,omitempty"`
	// Node, when set, is the ID of the node the caller means: another node is refused (409).
	Node string `json:"node,omitempty"`
}

// ShutdownRequest is the body of POST /shutdown; an empty body is the defaults.
type ShutdownRequest struct {
	// Deadline bounds the shutdown, as a Go duration ("30s"); empty: the node's StopTimeout.
	Deadline string `json:"deadline,omitempty"`
	// Node, when set, is the ID of the node the caller means: another node is refused (409).
	Node string `json:"node,omitempty"`
}

// Progress is one line of the answer to a POST: the answer is a stream of them, one JSON
// object a line (application/x-ndjson), while the operation runs; the last has Done set and
// the operation's result.
type Progress struct {
	Node  string `json:"node"`
	State string `json:"state"`
	// Relocation is the relocation's progress (POST /relocate).
	Relocation *RelocationDoc `json:"relocation,omitempty"`
	Done       bool           `json:"done"`
	// RelocationResult and TerminationResult are the result, on the last line.
	RelocationResult  *RelocationResultDoc  `json:"relocationResult,omitempty"`
	TerminationResult *TerminationResultDoc `json:"terminationResult,omitempty"`
	// Error, on the last line, says why the operation has no result for this caller.
	Error string `json:"error,omitempty"`
}

// maxBody bounds a POST's body.
const maxBody = 4 << 10

// maxDeadline bounds the deadline a POST may ask for.
const maxDeadline = 24 * time.Hour

// progressInterval is how often a POST's answer reports progress while nothing else changes.
const progressInterval = 250 * time.Millisecond

// relocate serves POST /relocate: it starts, or joins, the node's relocation and streams its
// progress until the result. The caller going away ends only its own wait (F10).
func (s *Server) relocate(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r) {
		return
	}
	var req RelocateRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.meant(w, r, req.Node) {
		return
	}
	opts, err := req.options()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := opts.EffectiveTarget(s.node.Snapshot().ApplicationVersion); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	release, ok := s.acquireOperation(w, s.relocations, "relocation")
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	type answer struct {
		res sdk.RelocationResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.node.Relocate(ctx, opts)
		done <- answer{res, err}
	}()
	finished := false
	defer func() {
		cancel()
		if !finished {
			<-done // Relocate returns once ctx ended
		}
	}()
	out := s.progressStream(w)
	report := func(a answer) {
		finished = true
		snap := s.node.Snapshot()
		p := Progress{Node: string(snap.Node), State: snap.Runtime.State.String(), Relocation: relocationDoc(snap.Relocation), Done: true}
		if a.err != nil {
			p.Error = a.err.Error()
		} else {
			p.RelocationResult = relocationResult(&a.res)
		}
		_ = out.line(p)
	}
	// The first line waits, briefly, for the relocation to have begun: it then shows it.
	running := func() bool { r := s.node.Snapshot().Relocation; return r != nil && r.Running }
	for begun := time.Now(); time.Since(begun) < progressInterval && !running(); {
		select {
		case a := <-done:
			report(a)
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	for {
		snap := s.node.Snapshot()
		select {
		case a := <-done:
			report(a)
			return
		default:
		}
		if err := out.line(Progress{Node: string(snap.Node), State: snap.Runtime.State.String(), Relocation: relocationDoc(snap.Relocation)}); err != nil {
			return
		}
		select {
		case a := <-done:
			report(a)
			return
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// shutdown serves POST /shutdown: it starts, or joins, the node's shutdown and streams its
// state until it stopped. The caller going away does not stop the shutdown.
func (s *Server) shutdown(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r) {
		return
	}
	var req ShutdownRequest
	if err := decodeBody(w, r, &req, true); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.meant(w, r, req.Node) {
		return
	}
	deadline, err := parseDeadline(req.Deadline)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	release, ok := s.acquireOperation(w, s.shutdowns, "shutdown")
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
	s.node.BeginShutdown(deadline)
	out := s.progressStream(w)
	last, written := "", (*uint64)(nil) // the state of the last line, and its runtime status's sequence
	for {
		done := false
		select {
		case <-stopped:
			done = true
		default:
		}
		snap := s.node.Snapshot()
		// The host's Error that a newer state replaced before this stream showed it is a line too.
		statuses := runtimeSince(snap, written)
		if done {
			statuses = statuses[:len(statuses)-1] // the last line says the state the host ended in
		}
		for _, rs := range statuses {
			written = &rs.Sequence
			if st := rs.State.String(); st != last {
				last = st
				if err := out.line(Progress{Node: string(snap.Node), State: st}); err != nil {
					return
				}
			}
		}
		if done {
			_ = out.line(Progress{Node: string(snap.Node), State: snap.Runtime.State.String(), Done: true,
				TerminationResult: terminationResult(snap.Runtime.TerminationResult)})
			return
		}
		select {
		case <-stopped:
		case <-dirty:
		case <-ctx.Done():
			return
		}
	}
}

// authorize refuses a POST that may not start an operation, and says why: on a server that
// is not loopback, a caller without a client certificate that TLS verified; anywhere, a
// request that a page of another site could have made (a form or a script of another origin:
// it must say Content-Type: application/json, which a form cannot; the guard has refused a
// foreign Origin already).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	op := "POST " + r.URL.Path
	if !s.cfg.Loopback && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("%s is refused: the admin server listens on %s, which is not loopback, and the caller presented no verified client certificate", op, s.Addr()))
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("%s needs Content-Type: application/json, got %q", op, r.Header.Get("Content-Type")))
		return false
	}
	return true
}

// meant refuses an operation meant for another node (409), and says which: the address a
// caller found in a registration can lead to another node's server (a node replaced on the
// same fixed port, a wildcard address published as it is). An empty ID means any node.
func (s *Server) meant(w http.ResponseWriter, r *http.Request, id string) bool {
	if self := string(s.node.Snapshot().Node); id != "" && id != self {
		writeError(w, http.StatusConflict, fmt.Sprintf("the admin server at %s is node %s's, not node %s's", r.Host, self, id))
		return false
	}
	return true
}

func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// decodeBody reads exactly one JSON object of at most maxBody bytes into v, with no field v
// does not have; an empty body is taken when empty says so.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, empty bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(connWriter(w), r.Body, maxBody))
	// One JSON value first, then that it is an object: decoding null into v succeeds and
	// leaves it as it was, which would take null for an empty object.
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF) && empty:
			return nil
		case errors.Is(err, io.EOF):
			return errors.New("the body is empty: it must be a JSON object")
		case errors.As(err, &tooBig):
			return fmt.Errorf("the body is larger than %d bytes", maxBody)
		}
		return fmt.Errorf("the body is not the JSON object expected: %v", err)
	}
	if len(raw) == 0 || raw[0] != '{' { // Decode leaves no space around a value
		return fmt.Errorf("the body is not the JSON object expected: it is %s", firstBytes(raw))
	}
	obj := json.NewDecoder(bytes.NewReader(raw))
	obj.DisallowUnknownFields()
	if err := obj.Decode(v); err != nil {
		return fmt.Errorf("the body is not the JSON object expected: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the body holds more than one JSON object")
	}
	return nil
}

// firstBytes is the start of a JSON value, for a message.
func firstBytes(raw []byte) string {
	const most = 16
	if len(raw) > most {
		return string(raw[:most]) + "..."
	}
	return string(raw)
}

// options turns the request into relocation options, naming what is wrong with it.
func (req RelocateRequest) options() (sdk.RelocationOptions, error) {
	var opts sdk.RelocationOptions
	switch strings.ToLower(req.Mode) {
	case "planned", "plannedmaintenance":
		opts.Mode = sdk.RelocationModePlannedMaintenance
	case "rolling", "rollingupdate":
		opts.Mode = sdk.RelocationModeRollingUpdate
	case "":
		return opts, errors.New(`mode is missing: use "planned" or "rolling"`)
	default:
		return opts, fmt.Errorf(`unknown mode %q: use "planned" or "rolling"`, req.Mode)
	}
	opts.TargetApplicationVersion = req.TargetApplicationVersion
	d, err := parseDeadline(req.Deadline)
	opts.Deadline = d
	return opts, err
}

// parseDeadline reads a positive Go duration of at most maxDeadline; empty is zero, the
// node's default.
func parseDeadline(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("deadline %q is not a duration such as 30s or 2m", s)
	case d <= 0 || d > maxDeadline:
		return 0, fmt.Errorf("deadline %v is out of range: more than 0 and at most %v", d, maxDeadline)
	}
	return d, nil
}

// ndjson writes a POST's answer stream, a line at a time, each within the write deadline.
type ndjson struct{ sse *sseWriter }

func (s *Server) progressStream(w http.ResponseWriter) ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return ndjson{newSSEWriter(w, s.cfg.WriteTimeout)}
}

func (n ndjson) line(p Progress) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return n.sse.write(append(b, '\n'))
}
