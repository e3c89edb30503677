package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/rt/store/storepb"
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

// NodeEvent is one change of the membership: a node registered or updated its descriptor
// (Node set), or its lease ended (Gone).
type NodeEvent struct {
	Node Node
	Gone bool
	// Revision is the store revision of the change; a watcher that applied it has seen the
	// membership as of that revision. Zero on the events of a resync listing but its last.
	Revision int64
	// Resync marks the first event of a full re-listing after the watch lost its history:
	// every node not listed after it is gone.
	Resync bool
}

// Nodes lists the live nodes of the mesh and the revision the list was read at.
func (s *Etcd) Nodes(ctx context.Context) ([]Node, int64, error) {
	resp, err := s.client.Get(ctx, s.keys.nodesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("store: list nodes: %w", err)
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
		return Node{}, false, fmt.Errorf("store: read node %s: %w", id, err)
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
// When the history it needs was compacted it lists the nodes again and reports them as a
// resync. fn runs on the watching goroutine.
func (s *Etcd) WatchNodes(ctx context.Context, revision int64, fn func(NodeEvent)) error {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.client.Watch(wctx, s.keys.nodesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(revision+1))
		resync := false
		for wr := range wch {
			if wr.CompactRevision != 0 {
				resync = true
				break
			}
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				id, ok := s.keys.parseNode(string(ev.Kv.Key))
				if !ok {
					continue
				}
				if ev.Type == clientv3.EventTypeDelete {
					fn(NodeEvent{Node: Node{ID: id}, Gone: true, Revision: ev.Kv.ModRevision})
					continue
				}
				d, err := decodeNode(ev.Kv.Value)
				if err != nil {
					continue
				}
				fn(NodeEvent{Node: Node{ID: id, Desc: d, Lease: ev.Kv.Lease, Revision: ev.Kv.ModRevision}, Revision: ev.Kv.ModRevision})
			}
			revision = wr.Header.Revision
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
		if !resync {
			// The watch ended with an error (the store is unreachable): pause, then resume.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		{
			nodes, rev, err := s.Nodes(ctx)
			if err != nil {
				continue
			}
			for i, n := range nodes {
				// Only the last event of the listing completes it: a watcher that reports the
				// revision it has applied must not report rev before every node is applied.
				ev := NodeEvent{Node: n, Resync: i == 0}
				if i == len(nodes)-1 {
					ev.Revision = rev
				}
				fn(ev)
			}
			if len(nodes) == 0 {
				fn(NodeEvent{Resync: true, Revision: rev})
			}
			revision = rev
		}
	}
	return ctx.Err()
}
