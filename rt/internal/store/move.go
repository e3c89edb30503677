package store

import (
	"context"
	"fmt"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
)

// Relocation of a Spot (F2–F7, DESIGN §6): its record changes owner in one transaction. The
// record keeps its key and CreateRevision, so the Actors it holds, whose records name it by
// that incarnation, move with it without a write of their own.
//
// The target consents first: it writes arrivals/<type>/<id> with the unit's token on its own
// lease, and the commit requires that key and deletes it. A target that gives up on an arrival
// deletes the key, after which no late commit can give it the Spot: two writes per unit.

// SpotMover is the part of the Location Store that relocates Spots.
type SpotMover interface {
	// ConsentArrival records that the registration to receives key for the unit attempt.
	ConsentArrival(ctx context.Context, key SpotKey, to Owner, attempt uint64) error
	// WithdrawArrival deletes to's consent to the unit attempt of key, if it is still there,
	// and reports whether it was: false says a commit took it, or it never was.
	WithdrawArrival(ctx context.Context, key SpotKey, attempt uint64) (bool, error)
	// MoveSpot gives the Ready record rec of key to the registration to, generation + 1, as
	// attempt (the relocation unit's token), in one transaction fenced on rec's revision, on
	// rec's owner lease still holding its node descriptor, on to's lease holding to's and on
	// to's consent to attempt, which it deletes. It fails with ErrFenced when any of them
	// changed, and with ErrOutcomeUnknown when its answer was lost and a re-read could not
	// tell in time. After a lost answer, ErrFenced says the record moved on, which it may
	// have done after this very commit: only a commit that failed its fence at rec's
	// revision certainly never took.
	MoveSpot(ctx context.Context, key SpotKey, rec Record, to Owner, attempt uint64) (Record, error)
}

func consentValue(attempt uint64) string { return strconv.FormatUint(attempt, 16) }

// ConsentArrival implements SpotMover.
func (s *Etcd) ConsentArrival(ctx context.Context, key SpotKey, to Owner, attempt uint64) error {
	if err := key.Validate(); err != nil {
		return err
	}
	k, v := s.keys.arrival(key), consentValue(attempt)
	// A put of the same value is idempotent: a lost answer is settled by writing again.
	_, err := fencedWrite(ctx, s,
		func(ctx context.Context) (struct{}, bool, error) {
			resp, err := s.write(ctx, k, []*pb.Compare{cmpLease(s.keys.node(to.Node), to.Lease, true)}, []*pb.RequestOp{opPutLease(k, v, to.Lease)}, nil)
			return struct{}{}, err == nil && resp.Succeeded, err
		},
		func(ctx context.Context) (struct{}, verdict, error) {
			resp, err := s.client.Get(ctx, k)
			switch {
			case err != nil:
				return struct{}{}, 0, err
			case len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == v:
				return struct{}{}, verdictKnown, nil
			}
			return struct{}{}, verdictAgain, nil
		})
	if err != nil {
		return fmt.Errorf("store: consent to receive %s: %w", key, err)
	}
	return nil
}

// WithdrawArrival implements SpotMover.
func (s *Etcd) WithdrawArrival(ctx context.Context, key SpotKey, attempt uint64) (bool, error) {
	if err := key.Validate(); err != nil {
		return false, err
	}
	k, v := s.keys.arrival(key), consentValue(attempt)
	resp, err := s.write(ctx, k, []*pb.Compare{cmpValue(k, v)}, []*pb.RequestOp{opDelete(k)}, nil)
	if err == nil {
		return resp.Succeeded, nil
	}
	if !ambiguous(err) {
		return false, unavailable(err)
	}
	// Lost answer: the key is gone either way, by this delete or by a commit; only the record
	// tells which, and the caller reads it next.
	get, gerr := s.client.Get(ctx, k)
	if gerr != nil {
		return false, unavailable(gerr)
	}
	if len(get.Kvs) == 1 && string(get.Kvs[0].Value) == v {
		return s.WithdrawArrival(ctx, key, attempt)
	}
	return false, nil
}

var _ SpotMover = (*Etcd)(nil)

// MoveSpot implements SpotMover.
func (s *Etcd) MoveSpot(ctx context.Context, key SpotKey, rec Record, to Owner, attempt uint64) (Record, error) {
	if err := key.Validate(); err != nil {
		return Record{}, err
	}
	if rec.Phase != PhaseReady {
		return Record{}, fmt.Errorf("store: move %s: the record is %v, only a Ready one moves: %w", key, rec.Phase, ErrFenced)
	}
	if err := to.Node.Validate(); err != nil {
		return Record{}, err
	}
	if to.Lease == 0 || to == rec.Owner {
		return Record{}, fmt.Errorf("store: move %s: no other registration to move to (%s, lease %x)", key, to.Node, to.Lease)
	}
	spotKey := s.keys.spot(key)
	moved := &storepb.SpotRecord{
		Phase:      storepb.Phase_PHASE_READY,
		Owner:      string(to.Node),
		OwnerLease: to.Lease,
		Attempt:    attempt,
		Generation: rec.Generation + 1,
		Kind:       uint32(rec.Kind),
	}
	val, err := encodeRecord(moved)
	if err != nil {
		return Record{}, err
	}
	consent := s.keys.arrival(key)
	fence := append(s.ownerFence(spotKey, rec.Revision, rec.Owner), cmpLease(s.keys.node(to.Node), to.Lease, true),
		cmpValue(consent, consentValue(attempt)))
	out, err := fencedWrite(ctx, s,
		func(ctx context.Context) (Record, bool, error) {
			// The consent is checked and deleted here, and by WithdrawArrival: in one
			// transaction, both would pass their checks.
			resp, err := s.writeTxnAlso(ctx, spotKey, consent,
				&pb.TxnRequest{Compare: fence, Success: []*pb.RequestOp{opPut(spotKey, val), opDelete(consent)}})
			if err != nil || !resp.Succeeded {
				return Record{}, false, err
			}
			return recordAt(moved, rec.Incarnation, resp.Revision), true, nil
		},
		func(ctx context.Context) (Record, verdict, error) {
			cur, ok, err := s.readRecord(ctx, spotKey)
			switch {
			case err != nil:
				return Record{}, 0, err
			case ok && cur.Incarnation == rec.Incarnation && cur.Owner == to && cur.Attempt == attempt && cur.Generation == moved.Generation:
				return cur, verdictKnown, nil
			case ok && cur.Revision == rec.Revision:
				return Record{}, verdictAgain, nil
			}
			return Record{}, verdictFenced, nil
		})
	if err != nil {
		return Record{}, fmt.Errorf("store: move %s to %s: %w", key, to.Node, err)
	}
	return out, nil
}

// Answers reports whether etcd answers a linearizable read of the mesh's keys now, within
// ctx.
func (s *Etcd) Answers(ctx context.Context) bool {
	_, err := s.client.Get(ctx, s.keys.nodesPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	return err == nil
}
