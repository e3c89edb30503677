package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// Node is a live node: its descriptor and the owner lease that holds it.
type Node struct {
	ID    sdk.NodeID
	Desc  *storepb.NodeDescriptor
	Lease int64
	// Revision is the store revision the descriptor was last written at.
	Revision int64
}

// NodeEvent is one report of a membership watch: exactly one of
//   - a change: a node registered or updated its descriptor (Node set), or its lease ended
//     (Node.ID set, Gone);
//   - a resync (Resync): the watch lost its history, and Snapshot is the whole membership;
//   - a progress notification (Progress): nothing changed up to Revision.
type NodeEvent struct {
	Node Node
	Gone bool
	// Revision is the store revision of the report: a watcher that applied it has seen the
	// membership as of that revision.
	Revision int64
	// Resync marks a full listing after the watch lost its history (the revisions it needed
	// were compacted): Snapshot holds every live node as of Revision, and any node it does not
	// hold is gone. A node listed with the lease the watcher knew did not change.
	Resync   bool
	Snapshot []Node
	// Progress marks a progress notification: the membership did not change up to Revision.
	Progress bool
}

// Nodes lists the live nodes of the mesh and the revision the list was read at.
func (s *Etcd) Nodes(ctx context.Context) ([]Node, int64, error) {
	resp, err := s.client.Get(ctx, s.keys.nodesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("store: list nodes: %w", unavailable(err))
	}
	nodes := make([]Node, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		id, ok := s.keys.parseNode(string(kv.Key))
		if !ok {
			continue
		}
		d, err := decodeNode(kv.Value)
		if err != nil {
			continue
		}
		nodes = append(nodes, Node{ID: id, Desc: d, Lease: kv.Lease, Revision: kv.ModRevision})
	}
	return nodes, resp.Header.Revision, nil
}

// Node reads one node's registration; ok is false when the node is not registered (it never
// was, or its lease ended).
func (s *Etcd) Node(ctx context.Context, id sdk.NodeID) (n Node, ok bool, err error) {
	resp, err := s.client.Get(ctx, s.keys.node(id))
	if err != nil {
		return Node{}, false, fmt.Errorf("store: read node %s: %w", id, unavailable(err))
	}
	if len(resp.Kvs) == 0 {
		return Node{}, false, nil
	}
	kv := resp.Kvs[0]
	d, err := decodeNode(kv.Value)
	if err != nil {
		return Node{}, false, fmt.Errorf("store: node %s: %w", id, err)
	}
	return Node{ID: id, Desc: d, Lease: kv.Lease, Revision: kv.ModRevision}, true, nil
}

// WatchNodes calls fn for every membership change after revision, in order, until ctx ends.
// When the history it needs was compacted it lists the nodes again and reports them in one
// resync event. It asks for progress notifications and reports them, so that the revision it
// resumes from after a broken watch advances on a quiet mesh too. fn runs on the watching
// goroutine.
func (s *Etcd) WatchNodes(ctx context.Context, revision int64, fn func(NodeEvent)) error {
	return s.watchPrefix(ctx, s.keys.nodesPrefix(), revision, s.nodeHandlers(fn))
}

// nodeHandlers reports a watch of the nodes to fn as NodeEvents.
func (s *Etcd) nodeHandlers(fn func(NodeEvent)) watchHandlers {
	return watchHandlers{
		event: func(ev *clientv3.Event) {
			id, ok := s.keys.parseNode(string(ev.Kv.Key))
			if !ok {
				return
			}
			if ev.Type == clientv3.EventTypeDelete {
				fn(NodeEvent{Node: Node{ID: id}, Gone: true, Revision: ev.Kv.ModRevision})
				return
			}
			d, err := decodeNode(ev.Kv.Value)
			if err != nil {
				return
			}
			fn(NodeEvent{Node: Node{ID: id, Desc: d, Lease: ev.Kv.Lease, Revision: ev.Kv.ModRevision}, Revision: ev.Kv.ModRevision})
		},
		progress: func(rev int64) { fn(NodeEvent{Progress: true, Revision: rev}) },
		resync: func(ctx context.Context) (int64, error) {
			nodes, rev, err := s.Nodes(ctx)
			if err == nil {
				fn(NodeEvent{Resync: true, Snapshot: nodes, Revision: rev})
			}
			return rev, err
		},
	}
}

// watchHandlers are what a prefix watch reports: each change, each progress notification, and
// the full listing it makes (and reports) after the history it needed was compacted.
type watchHandlers struct {
	event    func(*clientv3.Event)
	progress func(revision int64)
	resync   func(context.Context) (revision int64, err error)
}

// watchPrefix reports every change under prefix after revision, in order, until ctx ends,
// resuming a broken watch from the last revision it reported and listing anew when that
// revision was compacted. The handlers run on the watching goroutine.
func (s *Etcd) watchPrefix(ctx context.Context, prefix string, revision int64, h watchHandlers) error {
	for ctx.Err() == nil {
		compacted := s.watchOnce(ctx, prefix, &revision, h)
		if ctx.Err() != nil {
			break
		}
		if compacted {
			if rev, err := h.resync(ctx); err == nil {
				revision = rev
				continue
			}
		}
		// The store is unreachable: pause, then resume.
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return ctx.Err()
}

// watchOnce runs one watch of prefix after *revision, reporting to h and advancing
// *revision, until the watch ends. It reports whether it ended because the history it needed
// was compacted.
func (s *Etcd) watchOnce(ctx context.Context, prefix string, revision *int64, h watchHandlers) (compacted bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(*revision+1),
		clientv3.WithProgressNotify())
	// The server's own progress interval is long (10 min by default); ask more often, so that
	// a watch that breaks resumes from a revision that is not yet compacted.
	progress := time.NewTicker(s.progressEvery)
	defer progress.Stop()
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-progress.C:
			// wctx carries the watch's metadata, so this asks the watch's own stream.
			_ = s.client.RequestProgress(wctx)
			continue
		case wr, ok = <-wch:
		}
		switch {
		case !ok:
			return false
		case wr.CompactRevision != 0:
			return true
		case wr.Err() != nil:
			return false
		case wr.IsProgressNotify():
			*revision = wr.Header.Revision
			h.progress(wr.Header.Revision)
			continue
		}
		for _, ev := range wr.Events {
			h.event(ev)
		}
		*revision = wr.Header.Revision
	}
}
