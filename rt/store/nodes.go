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
}

// NodeEvent is one change of the membership: a node registered or updated its descriptor
// (Node set), or its lease ended (Gone).
type NodeEvent struct {
	Node Node
	Gone bool
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
		nodes = append(nodes, Node{ID: id, Desc: d, Lease: kv.Lease})
	}
	return nodes, resp.Header.Revision, nil
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
					fn(NodeEvent{Node: Node{ID: id}, Gone: true})
					continue
				}
				d, err := decodeNode(ev.Kv.Value)
				if err != nil {
					continue
				}
				fn(NodeEvent{Node: Node{ID: id, Desc: d, Lease: ev.Kv.Lease}})
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
				fn(NodeEvent{Node: n, Resync: i == 0})
			}
			if len(nodes) == 0 {
				fn(NodeEvent{Resync: true})
			}
			revision = rev
		}
	}
	return ctx.Err()
}
