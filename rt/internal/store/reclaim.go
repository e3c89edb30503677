package store

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// reclaimPage bounds the keys read by one range request of Reclaim.
const reclaimPage = 512

// Reclaim implements Store. It is the failover policy's formal lifecycle operation (DESIGN §4).
//
// It lists the registrations whose lease has ended, claims each on by's lease (a registration
// another live node has claimed is left to it), then scans the Spot records once and releases,
// with tag OwnerLost, every record one of them still owns, Creating ones included (B8). Each
// release is fenced on the record's revision and on the dead lease no longer holding the
// owner's descriptor, so a record that changed hands meanwhile is left alone. The scan reads
// every record, which is the price of writing a single key per creation; it runs only when a
// registration has ended. A Spot record's release takes the Actors it holds with it; a scan of
// the Actor records then deletes those whose host is gone (reclaimActors).
func (s *Etcd) Reclaim(ctx context.Context, by Owner) (ReclaimStats, error) {
	var stats ReclaimStats
	dead, err := s.claimDead(ctx, by)
	if err != nil || len(dead) == 0 {
		return stats, err
	}
	from := s.keys.spotsPrefix()
	end := clientv3.GetPrefixRangeEnd(from)
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(reclaimPage))
		if err != nil {
			return stats, fmt.Errorf("store: reclaim: scan records: %w", unavailable(err))
		}
		for _, kv := range resp.Kvs {
			stats.Scanned++
			var stored storepb.SpotRecord
			if proto.Unmarshal(kv.Value, &stored) != nil {
				continue
			}
			owner := Owner{Node: sdk.NodeID(stored.Owner), Lease: stored.OwnerLease}
			if _, ok := dead[owner]; !ok {
				continue
			}
			key, ok := s.keys.parseSpot(string(kv.Key))
			if !ok {
				continue
			}
			released, err := s.reclaimRecord(ctx, key, owner, recordOf(&stored, kv))
			if err != nil {
				return stats, err
			}
			if released {
				stats.Released++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if err := s.reclaimActors(ctx, dead, &stats); err != nil {
		return stats, err
	}
	for owner := range dead {
		_, err := s.client.Txn(ctx).Then(
			clientv3.OpDelete(s.keys.incarnation(owner.Node, owner.Lease)),
			clientv3.OpDelete(s.keys.reclaim(owner.Node, owner.Lease)),
		).Commit()
		if err != nil {
			return stats, fmt.Errorf("store: reclaim %s: forget registration: %w", owner.Node, unavailable(err))
		}
		stats.DeadIncarnations++
	}
	return stats, nil
}

// claimDead lists the registrations whose lease has ended and claims them for by.
func (s *Etcd) claimDead(ctx context.Context, by Owner) (map[Owner]struct{}, error) {
	dead := make(map[Owner]struct{})
	from := s.keys.incarnationsPrefix()
	end := clientv3.GetPrefixRangeEnd(from)
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(reclaimPage))
		if err != nil {
			return nil, fmt.Errorf("store: reclaim: list registrations: %w", unavailable(err))
		}
		for _, kv := range resp.Kvs {
			rid, lease, ok := s.keys.parseIncarnation(string(kv.Key))
			if !ok {
				continue
			}
			owner := Owner{Node: rid, Lease: lease}
			alive, err := s.ownerAlive(ctx, owner)
			if err != nil {
				return nil, fmt.Errorf("store: reclaim: lease of %s: %w", rid, unavailable(err))
			}
			if alive {
				continue
			}
			if by.Lease != 0 {
				claim := s.keys.reclaim(rid, lease)
				cresp, err := s.client.Txn(ctx).
					If(clientv3.Compare(clientv3.CreateRevision(claim), "=", 0)).
					Then(clientv3.OpPut(claim, string(by.Node), clientv3.WithLease(clientv3.LeaseID(by.Lease)))).
					Else(clientv3.OpGet(claim)).
					Commit()
				if err != nil {
					return nil, fmt.Errorf("store: reclaim: claim %s: %w", rid, unavailable(err))
				}
				if !cresp.Succeeded {
					kvs := cresp.Responses[0].GetResponseRange().Kvs
					if len(kvs) == 0 || kvs[0].Lease != by.Lease {
						continue // another live node reclaims it
					}
				}
			}
			dead[owner] = struct{}{}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return dead, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// reclaimRecord releases one record of a dead owner, in two fenced steps so that waiters learn
// the tag (D5). It reports whether it released the record. A step whose answer was lost is
// settled like an owner's (markReleasing, deleteRecord).
func (s *Etcd) reclaimRecord(ctx context.Context, key SpotKey, dead Owner, rec Record) (bool, error) {
	spotKey := s.keys.spot(key)
	var err error
	if rec.Phase != PhaseReleasing {
		rec, err = s.markReleasing(ctx, key, rec, ReleaseOwnerLost, s.deadOwnerFence(spotKey, rec.Revision, dead))
	}
	if err == nil {
		err = s.deleteRecord(ctx, key, rec, s.deadOwnerFence(spotKey, rec.Revision, dead))
	}
	if errors.Is(err, ErrFenced) {
		return false, nil // changed hands or released meanwhile
	}
	return err == nil, err
}

// reclaimActors scans the Actor records once and deletes every one whose host is gone: an
// Entry host whose registration has ended, a User or Instance host whose record no longer
// exists (or is another incarnation), or whose owner is one of dead. Each delete is fenced on
// the Actor record's revision and on the evidence that its host is gone, so an Actor that
// moved, or a host that came back, is left alone.
func (s *Etcd) reclaimActors(ctx context.Context, dead map[Owner]struct{}, stats *ReclaimStats) error {
	alive := make(map[Owner]bool)
	hosts := make(map[SpotKey]*Record) // nil: no record
	from := s.keys.actorsPrefix()
	end := clientv3.GetPrefixRangeEnd(from)
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(reclaimPage))
		if err != nil {
			return fmt.Errorf("store: reclaim: scan actor records: %w", unavailable(err))
		}
		for _, kv := range resp.Kvs {
			stats.ActorsScanned++
			key, ok := parseTypeID(s.keys.actorsPrefix(), string(kv.Key))
			if !ok {
				continue
			}
			loc, err := decodeActor(key, kv)
			if err != nil {
				continue
			}
			fence, gone, err := s.hostGone(ctx, loc.Host, dead, alive, hosts)
			if err != nil {
				return fmt.Errorf("store: reclaim %s: host %s: %w", key, loc.Host, unavailable(err))
			}
			if !gone {
				continue
			}
			switch err := s.deleteGoneActor(ctx, loc, fence); {
			case errors.Is(err, ErrFenced):
				// moved or released meanwhile, or its host came back
			case err != nil:
				return fmt.Errorf("store: reclaim %s at revision %d: %w", key, loc.Revision, err)
			default:
				stats.ActorsReleased++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// deleteGoneActor deletes the record at loc, whose host is gone, fenced on fence. A record
// rewritten as it was meanwhile (FenceActor: the same host, incarnation and generation at a
// later revision) still names the gone host, and is deleted at its new revision.
func (s *Etcd) deleteGoneActor(ctx context.Context, loc ActorLocation, fence []*pb.Compare) error {
	for range 3 {
		err := s.deleteActor(ctx, loc, fence)
		if !errors.Is(err, ErrFenced) {
			return err
		}
		cur, ok, rerr := s.readActor(ctx, loc.Key)
		if rerr != nil || !ok || cur.Host != loc.Host || cur.Incarnation != loc.Incarnation || cur.Generation != loc.Generation {
			return err
		}
		loc = cur
	}
	return ErrFenced
}

// hostGone reports whether host is gone, with the fence that holds while it stays gone. alive
// and hosts cache what one pass has read.
func (s *Etcd) hostGone(ctx context.Context, host HostRef, dead map[Owner]struct{}, alive map[Owner]bool, hosts map[SpotKey]*Record) ([]*pb.Compare, bool, error) {
	if host.Kind == sdk.KindEntry {
		owner := Owner{Node: host.Node, Lease: host.Lease}
		live, ok := alive[owner]
		if !ok {
			if _, isDead := dead[owner]; !isDead {
				var err error
				if live, err = s.ownerAlive(ctx, owner); err != nil {
					return nil, false, err
				}
			}
			alive[owner] = live
		}
		return []*pb.Compare{cmpLease(s.keys.node(owner.Node), owner.Lease, false)}, !live, nil
	}
	key := SpotKey{Type: host.Type, ID: host.ID}
	spotKey := s.keys.spot(key)
	rec, ok := hosts[key]
	if !ok {
		cur, found, err := s.readRecord(ctx, spotKey)
		if err != nil {
			return nil, false, err
		}
		if found {
			rec = &cur
		}
		hosts[key] = rec
	}
	switch {
	case rec == nil || rec.Incarnation != host.Incarnation:
		return []*pb.Compare{{Key: []byte(spotKey), Target: pb.Compare_CREATE, Result: pb.Compare_NOT_EQUAL,
			TargetUnion: &pb.Compare_CreateRevision{CreateRevision: host.Incarnation}}}, true, nil
	}
	if _, isDead := dead[rec.Owner]; isDead {
		// Its record's release was fenced out in this pass; its Actors go anyway.
		return s.deadOwnerFence(spotKey, rec.Revision, rec.Owner), true, nil
	}
	return nil, false, nil
}
