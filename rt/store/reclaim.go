package store

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// reclaimPage bounds the keys read by one range request of Reclaim.
const reclaimPage = 256

// Reclaim implements Store. It is the failover policy's formal lifecycle operation (DESIGN §4):
// for every registration whose lease has ended it releases, with tag OwnerLost, each record
// that the registration still owns. Each release is fenced on the record's revision and on the
// owner marker being gone, so several reclaimers may run at once and a record that moved to
// another owner is left alone. A Creating record of a dead creator is released the same way
// (B8).
func (s *Etcd) Reclaim(ctx context.Context) (ReclaimStats, error) {
	var stats ReclaimStats
	from := s.keys.incarnationsPrefix()
	end := clientv3.GetPrefixRangeEnd(from)
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithLimit(reclaimPage))
		if err != nil {
			return stats, fmt.Errorf("store: reclaim: list registrations: %w", err)
		}
		for _, kv := range resp.Kvs {
			rid, lease, ok := s.keys.parseIncarnation(string(kv.Key))
			if !ok {
				continue
			}
			ttl, err := s.client.TimeToLive(ctx, clientv3.LeaseID(lease))
			if err != nil {
				return stats, fmt.Errorf("store: reclaim: lease of %s: %w", rid, err)
			}
			if ttl.TTL > 0 {
				continue // alive
			}
			stats.DeadIncarnations++
			n, err := s.reclaimIncarnation(ctx, Owner{Node: rid, Lease: lease})
			stats.Released += n
			if err != nil {
				return stats, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return stats, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// reclaimIncarnation releases what one dead registration owns, then forgets the registration.
func (s *Etcd) reclaimIncarnation(ctx context.Context, dead Owner) (int, error) {
	prefix := s.keys.ownedPrefix(dead.Node, dead.Lease)
	end := clientv3.GetPrefixRangeEnd(prefix)
	released := 0
	for {
		resp, err := s.client.Get(ctx, prefix, clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithLimit(reclaimPage))
		if err != nil {
			return released, fmt.Errorf("store: reclaim %s: %w", dead.Node, err)
		}
		for _, kv := range resp.Kvs {
			key, ok := s.keys.parseOwned(prefix, string(kv.Key))
			if !ok {
				continue
			}
			done, err := s.reclaimRecord(ctx, key, dead, string(kv.Key))
			if err != nil {
				return released, err
			}
			if done {
				released++
			}
		}
		if !resp.More {
			break
		}
	}
	if _, err := s.client.Delete(ctx, s.keys.incarnation(dead.Node, dead.Lease)); err != nil {
		return released, fmt.Errorf("store: reclaim %s: forget registration: %w", dead.Node, err)
	}
	return released, nil
}

// reclaimRecord releases one record of a dead owner. It reports whether it released it.
func (s *Etcd) reclaimRecord(ctx context.Context, key SpotKey, dead Owner, ownedKey string) (bool, error) {
	for range 8 { // the record may change under us; each round re-reads it
		res, err := s.Lookup(ctx, key)
		if err != nil {
			return false, err
		}
		if res.State == StateMissing || res.Record.Owner != dead {
			// Released or moved since: only the index entry is left.
			_, err := s.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(ownedKey), ">", 0)).
				Then(clientv3.OpDelete(ownedKey)).Commit()
			return false, err
		}
		if res.Evidence != EvidenceOwnerLeaseEnded {
			return false, fmt.Errorf("store: reclaim %s: owner %s still holds it although its lease ended", key, dead.Node)
		}
		spotKey := s.keys.spot(key)
		rec := res.Record
		if rec.Phase != PhaseReleasing {
			rec, err = s.markReleasing(ctx, key, rec, ReleaseOwnerLost, s.deadOwnerFence(spotKey, rec.Revision))
		}
		if err == nil {
			err = s.deleteRecord(ctx, key, rec, s.deadOwnerFence(spotKey, rec.Revision))
		}
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrFenced) {
			return false, err
		}
	}
	return false, fmt.Errorf("store: reclaim %s: the record kept changing", key)
}

// deadOwnerFence holds while the record is still at revision and no owner marker exists.
func (s *Etcd) deadOwnerFence(spotKey string, revision int64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(spotKey), "=", revision),
		clientv3.Compare(clientv3.CreateRevision(s.keys.marker(spotKey)), "=", 0),
	}
}
