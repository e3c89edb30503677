package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
)

// Owned calls fn with the key of every record that owner holds, a page at a time, in key
// order. It reads every record of the mesh, like Reclaim: it is for the owner's reconcile when
// its list of keys to check overflowed, not for a hot path. fn runs between the pages' reads.
func (s *Etcd) Owned(ctx context.Context, owner Owner, fn func(SpotKey)) error {
	from := s.keys.spotsPrefix()
	end := clientv3.GetPrefixRangeEnd(from)
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(reclaimPage))
		if err != nil {
			return fmt.Errorf("store: list the records of %s: %w", owner.Node, unavailable(err))
		}
		for _, kv := range resp.Kvs {
			var stored storepb.SpotRecord
			if proto.Unmarshal(kv.Value, &stored) != nil {
				continue
			}
			if stored.Owner != string(owner.Node) || stored.OwnerLease != owner.Lease {
				continue
			}
			if key, ok := s.keys.parseSpot(string(kv.Key)); ok {
				fn(key)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
