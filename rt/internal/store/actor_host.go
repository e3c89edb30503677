package store

import (
	"context"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A host's Actors leave with it. FinishRelease (and the reclaimer's release) deletes a User or
// Instance Spot's record in the same transaction as its Actor records and their index keys,
// so a released Spot leaves no Actor behind. A host with no Actors costs nothing more: its
// delete is the one transaction it always was, with a compare that the host's index is
// empty. A host with Actors is deleted apart from the group commit, by transactions of at most
// memberChunk Actors each: all but the last delete Actors only, under the release's fence; the
// last deletes the rest together with the record. No Actor can join a host whose record is
// Releasing (a spawn or a move into it needs it Ready at the revision the writer read), so
// the host's index only shrinks while this runs.

// memberChunk is the most Actors one transaction deletes: each costs a compare and two
// deletes, below etcd's default --max-txn-ops of 128.
const memberChunk = 60

// noneIn holds while no key exists in [prefix, end of prefix).
func noneIn(prefix string) *pb.Compare {
	return &pb.Compare{Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)),
		Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_CreateRevision{}}
}

// noneCreatedAfter holds while no key in [prefix, end of prefix) was created after rev.
func noneCreatedAfter(prefix string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)),
		Target: pb.Compare_CREATE, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev + 1}}
}

// fenceReads reads the key of every compare of fence: the failure branch of a write whose
// caller must tell a failed fence from its write's other compares (fenceHolds).
func fenceReads(fence []*pb.Compare) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, len(fence))
	for i, c := range fence {
		ops[i] = opGet(string(c.Key))
	}
	return ops
}

// fenceHolds evaluates fence, a list of single-key compares, on the reads of fenceReads: the
// results of res, a write that failed.
func fenceHolds(fence []*pb.Compare, res txnResult) (bool, error) {
	reads, err := res.Responses()
	if err != nil {
		return false, err
	}
	if len(reads) < len(fence) {
		return false, malformed(fmt.Errorf("it has %d reads for %d compares", len(reads), len(fence)))
	}
	for i, c := range fence {
		kv := &mvccpb.KeyValue{} // a missing key compares as zero
		if kvs := reads[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			kv = kvs[0]
		}
		var have, want int64
		switch c.Target {
		case pb.Compare_MOD:
			have, want = kv.ModRevision, c.GetModRevision()
		case pb.Compare_CREATE:
			have, want = kv.CreateRevision, c.GetCreateRevision()
		case pb.Compare_LEASE:
			have, want = kv.Lease, c.GetLease()
		case pb.Compare_VERSION:
			have, want = kv.Version, c.GetVersion()
		default:
			return false, nil
		}
		var ok bool
		switch c.Result {
		case pb.Compare_EQUAL:
			ok = have == want
		case pb.Compare_NOT_EQUAL:
			ok = have != want
		case pb.Compare_GREATER:
			ok = have > want
		case pb.Compare_LESS:
			ok = have < want
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// writeAlone sends one transaction apart from the group commit: one too wide to nest in a
// batch, or one that deletes a range of keys that a batched write might put.
func (s *Etcd) writeAlone(ctx context.Context, txn *pb.TxnRequest) (txnResult, error) {
	if err := ctx.Err(); err != nil {
		return txnResult{}, notSent{err}
	}
	reply, err := s.kv.txn(ctx, txn)
	if err != nil {
		return txnResult{}, err
	}
	return reply.result(), nil
}

// deleteHostRecord deletes the Spot record at key, rec, fenced by fence, with every Actor of
// the host it is. It reports false when fence failed.
func (s *Etcd) deleteHostRecord(ctx context.Context, key SpotKey, rec Record, fence []*pb.Compare) (bool, error) {
	spotKey := s.keys.spot(key)
	host := HostRef{Kind: rec.Kind, Type: key.Type, ID: key.ID, Incarnation: rec.Incarnation}
	cmps := append(slices.Clip(fence), noneIn(s.keys.hostActorsPrefix(host)))
	resp, err := s.write(ctx, spotKey, cmps, []*pb.RequestOp{opDelete(spotKey)}, fenceReads(fence))
	switch {
	case err != nil:
		return false, err
	case resp.Succeeded:
		return true, nil
	}
	if holds, err := fenceHolds(fence, resp); err != nil || !holds {
		return false, err
	}
	// The fence holds, so the host has Actors.
	return s.removeMembers(ctx, host, fence, opDelete(spotKey))
}

// removeMembers deletes host's Actors, at most memberChunk per transaction, each transaction
// fenced by fence and by every index key it deletes being the one it read. With last set (the
// delete of the host's record) the final transaction also runs last, fenced on no index key
// having been created since its read, so that the record and the Actors go together. It
// reports false when fence failed; a write whose answer was lost is its error, and the caller
// settles it by re-reading (each transaction only deletes, so sending one again is harmless).
func (s *Etcd) removeMembers(ctx context.Context, host HostRef, fence []*pb.Compare, last *pb.RequestOp) (bool, error) {
	prefix := s.keys.hostActorsPrefix(host)
	end := clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := s.client.Get(ctx, prefix, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(memberChunk+1))
		if err != nil {
			return false, fmt.Errorf("list the Actors of %s: %w", host, unavailable(err))
		}
		members, final := resp.Kvs, len(resp.Kvs) <= memberChunk
		if !final {
			members = members[:memberChunk]
		}
		if len(members) == 0 && last == nil {
			return true, nil
		}
		cmps := slices.Clone(fence)
		var ops []*pb.RequestOp
		for _, kv := range members {
			cmps = append(cmps, cmpCreateRevision(string(kv.Key), kv.CreateRevision))
			ops = append(ops, opDelete(string(kv.Key)))
			if actor, ok := parseHostActor(prefix, string(kv.Key)); ok {
				ops = append(ops, opDelete(s.keys.actor(actor)))
			}
		}
		if final && last != nil {
			cmps = append(cmps, noneCreatedAfter(prefix, resp.Header.Revision))
			ops = append(ops, last)
		}
		tresp, err := s.writeAlone(ctx, &pb.TxnRequest{Compare: cmps, Success: ops, Failure: fenceReads(fence)})
		switch {
		case err != nil:
			return false, err
		case tresp.Succeeded && final:
			return true, nil
		case !tresp.Succeeded:
			if holds, err := fenceHolds(fence, tresp); err != nil || !holds {
				return false, err
			}
		}
		// A chunk is done, or an Actor left meanwhile: read the index again.
	}
}

// ReleaseHostActors implements ActorStore.
//
// Fence: host's owner fence, and each Actor's index key being the one read. The Actors go in
// transactions of at most memberChunk each; one whose answer was lost is settled by reading
// the index again. It is how an Entry host, which has no record, lets its Actors go; a User
// or Instance host's FinishRelease does it in the record's own transaction.
func (s *Etcd) ReleaseHostActors(ctx context.Context, host Host) error {
	if err := host.validate(); err != nil {
		return err
	}
	fence := s.hostFence(host)
	prefix := s.keys.hostActorsPrefix(host.HostRef)
	_, err := fencedWrite(ctx, s,
		func(ctx context.Context) (struct{}, bool, error) {
			ok, err := s.removeMembers(ctx, host.HostRef, fence, nil)
			return struct{}{}, ok, err
		},
		func(ctx context.Context) (struct{}, verdict, error) {
			resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			switch {
			case err != nil:
				return struct{}{}, 0, err
			case resp.Count == 0:
				return struct{}{}, verdictKnown, nil
			}
			return struct{}{}, verdictAgain, nil
		})
	if err != nil {
		return fmt.Errorf("store: release the Actors of %s: %w", host.HostRef, err)
	}
	return nil
}
