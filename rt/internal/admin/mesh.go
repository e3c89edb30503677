package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// MeshView is the /mesh document: every node of the mesh as its registration describes it,
// with its /status as its own admin server answered it.
type MeshView struct {
	// Node is the node that made the view.
	Node       string     `json:"node"`
	ObservedAt time.Time  `json:"observedAt"`
	Nodes      []MeshNode `json:"nodes"`
}

// MeshNode is one node of the mesh view.
type MeshNode struct {
	Node string `json:"node"`
	// RegisteredState and ApplicationVersion are what the node's registration says.
	RegisteredState    string `json:"registeredState"`
	ApplicationVersion int64  `json:"applicationVersion"`
	AdminURL           string `json:"adminUrl"`
	Self               bool   `json:"self"`
	// Status is the node's status document, or null when it could not be had; Error then
	// says why.
	Status *Status `json:"status"`
	Error  string  `json:"error,omitempty"`
}

// meshViewTTL is how long one mesh view serves every request for it.
const meshViewTTL = time.Second

// maxStatusBytes bounds a peer's /status answer.
const maxStatusBytes = 4 << 20

// meshCache holds the last mesh view; one refresh runs at a time and the requests meanwhile
// share its result.
type meshCache struct {
	mu   sync.Mutex
	view MeshView
	at   time.Time
}

// meshView serves GET /mesh. Each node's status is fetched from its own admin server at
// once, each fetch bounded by PeerTimeout: a node whose admin server does not answer in time
// is listed with the error, and the view does not wait longer for it.
func (s *Server) meshView(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.MeshView())
}

// MeshView returns the view of the mesh, at most meshViewTTL old. The fetches are the
// server's, not a request's: a caller that goes away does not fail them for the others.
func (s *Server) MeshView() MeshView {
	ctx := s.base
	s.mesh.mu.Lock()
	defer s.mesh.mu.Unlock()
	if time.Since(s.mesh.at) < meshViewTTL {
		return s.mesh.view
	}
	members := s.node.Members()
	view := MeshView{ObservedAt: time.Now().UTC(), Nodes: make([]MeshNode, len(members))}
	var wg sync.WaitGroup
	for i, m := range members {
		n := &view.Nodes[i]
		*n = MeshNode{Node: string(m.Node), RegisteredState: m.State.String(), ApplicationVersion: m.ApplicationVersion, AdminURL: m.AdminURL, Self: m.Self}
		switch {
		case m.Self:
			view.Node = n.Node
			doc := Document(s.node.Snapshot())
			n.Status = &doc
		case m.AdminURL == "":
			n.Error = "the node serves no admin page"
		default:
			wg.Go(func() {
				doc, err := s.fetchStatus(ctx, m.AdminURL)
				switch {
				case err != nil:
					n.Error = err.Error()
				case doc.Node != string(m.Node):
					// A wildcard or shared address can lead to another node's server.
					n.Error = fmt.Sprintf("%s answers for node %q, not %q", m.AdminURL, doc.Node, m.Node)
				default:
					n.Status = doc
				}
			})
		}
	}
	wg.Wait()
	s.mesh.view, s.mesh.at = view, time.Now()
	return view
}

// fetchStatus reads the /status of the admin server at base, within PeerTimeout.
func (s *Server) fetchStatus(ctx context.Context, base string) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/status", nil)
	if err != nil {
		return nil, fmt.Errorf("bad admin URL %q: %v", base, err)
	}
	resp, err := s.peers.Do(req)
	if err != nil {
		// The client's own timeouts and the context's race; either is the same answer.
		var ne net.Error
		if ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("no answer from %s within %v", base, s.cfg.PeerTimeout)
		}
		return nil, fmt.Errorf("%s does not answer: %v", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", base, resp.Status)
	}
	var doc Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusBytes)).Decode(&doc); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no complete answer from %s within %v", base, s.cfg.PeerTimeout)
		}
		return nil, fmt.Errorf("%s answered no status document: %v", base, err)
	}
	return &doc, nil
}
