package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// Etcd is the Location Store on an etcd cluster.
type Etcd struct {
	client *clientv3.Client
	keys   keys
	mesh   string
	// settle bounds the linearizable re-reads that resolve an ambiguous create.
	settle time.Duration
}

var _ Store = (*Etcd)(nil)

// New returns the Location Store of mesh on client. The client stays the caller's: Close does
// not close it.
func New(client *clientv3.Client, mesh string) (*Etcd, error) {
	if client == nil {
		return nil, errors.New("store: nil etcd client")
	}
	if err := sdk.ValidateID("mesh name", mesh); err != nil {
		return nil, err
	}
	return &Etcd{client: client, keys: newKeys(mesh), mesh: mesh, settle: 5 * time.Second}, nil
}

// Mesh returns the mesh name whose keys the store reads and writes.
func (s *Etcd) Mesh() string { return s.mesh }

// Client returns the etcd client the store runs on.
func (s *Etcd) Client() *clientv3.Client { return s.client }

// Close releases nothing: the store holds no resources beyond the caller's client.
func (s *Etcd) Close() error { return nil }

// newAttempt returns a random non-zero attempt fence.
func newAttempt() uint64 {
	for {
		if a := rand.Uint64(); a != 0 {
			return a
		}
	}
}

var marshal = proto.MarshalOptions{Deterministic: true}

func encodeRecord(r *storepb.SpotRecord) (string, error) {
	b, err := marshal.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("store: encode spot record: %w", err)
	}
	return string(b), nil
}

// Reserve implements Store.
func (s *Etcd) Reserve(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner) (ReserveResult, error) {
	if err := key.Validate(); err != nil {
		return ReserveResult{}, err
	}
	if kind != sdk.KindUser && kind != sdk.KindInstance {
		return ReserveResult{}, fmt.Errorf("store: reserve %s: kind %s has no record (only User and Instance Spots do)", key, kind)
	}
	attempt := newAttempt()
	spotKey := s.keys.spot(key)
	txn, err := s.reserveTxn(spotKey, key, kind, owner, attempt)
	if err != nil {
		return ReserveResult{}, err
	}
	resp, err := s.client.Txn(ctx).If(txn.cmps...).Then(txn.then...).Else(txn.els...).Commit()
	if err != nil {
		if !ambiguous(err) {
			return ReserveResult{}, fmt.Errorf("store: reserve %s: %w", key, err)
		}
		return s.settleReserve(ctx, key, kind, owner, attempt, err)
	}
	return s.reserveOutcome(key, kind, owner, attempt, resp)
}

type txnOps struct {
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

func (s *Etcd) reserveTxn(spotKey string, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64) (txnOps, error) {
	rec, err := encodeRecord(&storepb.SpotRecord{
		Phase:      storepb.Phase_PHASE_CREATING,
		Owner:      string(owner.Node),
		OwnerLease: owner.Lease,
		Attempt:    attempt,
		Kind:       uint32(kind),
	})
	if err != nil {
		return txnOps{}, err
	}
	return txnOps{
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(spotKey), "=", 0)},
		then: []clientv3.Op{
			clientv3.OpPut(spotKey, rec),
			clientv3.OpPut(s.keys.marker(spotKey), string(owner.Node), clientv3.WithLease(clientv3.LeaseID(owner.Lease))),
			clientv3.OpPut(s.keys.owned(owner.Node, owner.Lease, key), ""),
			clientv3.OpGet(spotKey),
		},
		els: []clientv3.Op{clientv3.OpGet(spotKey, clientv3.WithRange(s.keys.spotRangeEnd(spotKey)))},
	}, nil
}

func (s *Etcd) reserveOutcome(key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64, resp *clientv3.TxnResponse) (ReserveResult, error) {
	if !resp.Succeeded {
		cur, err := s.resolve(key, resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs)
		if err != nil {
			return ReserveResult{}, err
		}
		return ReserveResult{Current: cur}, nil
	}
	kv := resp.Responses[3].GetResponseRange().Kvs[0]
	return ReserveResult{Won: true, Reservation: Reservation{
		Key: key, Kind: kind, Owner: owner, Attempt: attempt,
		Revision: kv.ModRevision, Incarnation: kv.CreateRevision,
	}}, nil
}

// settleReserve resolves a reserve txn whose outcome is unknown (timeout, lost connection) by
// linearizable re-reads before anything is reported: the attempt fence tells whether the txn
// was applied. If the caller has gone meanwhile, an applied reservation is released again, and
// an unapplied one is fenced out by reserving and releasing the key with the same attempt, so a
// failed Reserve never leaves a record behind.
func (s *Etcd) settleReserve(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64, cause error) (ReserveResult, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settle)
	defer cancel()
	spotKey := s.keys.spot(key)
	backoff := 10 * time.Millisecond
	for {
		out, err := s.settleOnce(sctx, spotKey, key, kind, owner, attempt)
		if err == nil && out.Won && ctx.Err() != nil {
			rec := Record{Kind: kind, Phase: PhaseCreating, Owner: owner, Attempt: attempt,
				Incarnation: out.Reservation.Incarnation, Revision: out.Reservation.Revision}
			if err = s.Release(sctx, key, rec, ReleaseCreationFailed); err == nil {
				return ReserveResult{}, fmt.Errorf("store: reserve %s: %w", key, ctx.Err())
			}
		}
		if err == nil {
			return out, nil
		}
		if !ambiguous(err) && !errors.Is(err, ErrFenced) {
			return ReserveResult{}, fmt.Errorf("store: reserve %s: %w", key, err)
		}
		select {
		case <-sctx.Done():
			return ReserveResult{}, fmt.Errorf("store: reserve %s: outcome unknown after %v (first error: %v): %w", key, s.settle, cause, sctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// settleOnce re-reads key and, when it is Missing, repeats the reservation with the same
// attempt, which is idempotent.
func (s *Etcd) settleOnce(ctx context.Context, spotKey string, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64) (ReserveResult, error) {
	res, err := s.Lookup(ctx, key)
	if err != nil {
		return ReserveResult{}, err
	}
	switch {
	case res.State != StateMissing && res.Record.Attempt == attempt && res.Record.Owner == owner:
		return wonFrom(key, res.Record), nil
	case res.State != StateMissing:
		return ReserveResult{Current: res}, nil
	}
	txn, err := s.reserveTxn(spotKey, key, kind, owner, attempt)
	if err != nil {
		return ReserveResult{}, err
	}
	resp, err := s.client.Txn(ctx).If(txn.cmps...).Then(txn.then...).Else(txn.els...).Commit()
	if err != nil {
		return ReserveResult{}, err
	}
	out, err := s.reserveOutcome(key, kind, owner, attempt, resp)
	if err == nil && !out.Won && out.Current.Record.Attempt == attempt && out.Current.Record.Owner == owner {
		// The first txn landed between the re-read and this one.
		return wonFrom(key, out.Current.Record), nil
	}
	return out, err
}

// wonFrom is the reservation that rec, a record of the caller's own attempt, stands for.
func wonFrom(key SpotKey, rec Record) ReserveResult {
	return ReserveResult{Won: true, Reservation: Reservation{
		Key: key, Kind: rec.Kind, Owner: rec.Owner, Attempt: rec.Attempt,
		Revision: rec.Revision, Incarnation: rec.Incarnation,
	}}
}

// ambiguous reports whether a failed request may still have been applied.
func ambiguous(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// CommitReady implements Store.
func (s *Etcd) CommitReady(ctx context.Context, r Reservation) (Record, error) {
	spotKey := s.keys.spot(r.Key)
	rec := &storepb.SpotRecord{
		Phase:      storepb.Phase_PHASE_READY,
		Owner:      string(r.Owner.Node),
		OwnerLease: r.Owner.Lease,
		Attempt:    r.Attempt,
		Generation: 1,
		Kind:       uint32(r.Kind),
	}
	val, err := encodeRecord(rec)
	if err != nil {
		return Record{}, err
	}
	resp, err := s.client.Txn(ctx).
		If(s.ownerFence(spotKey, r.Revision, r.Owner)...).
		Then(clientv3.OpPut(spotKey, val), clientv3.OpGet(spotKey)).
		Commit()
	if err != nil {
		return Record{}, fmt.Errorf("store: commit ready %s: %w", r.Key, err)
	}
	if !resp.Succeeded {
		return Record{}, fmt.Errorf("store: commit ready %s (attempt %x): %w", r.Key, r.Attempt, ErrFenced)
	}
	return recordOf(rec, resp.Responses[1].GetResponseRange().Kvs[0]), nil
}

// ownerFence holds while the record is still at revision and the owner's lease still holds
// the owner marker.
func (s *Etcd) ownerFence(spotKey string, revision int64, owner Owner) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(spotKey), "=", revision),
		clientv3.Compare(clientv3.LeaseValue(s.keys.marker(spotKey)), "=", owner.Lease),
	}
}

// Lookup implements Store.
func (s *Etcd) Lookup(ctx context.Context, key SpotKey) (Resolution, error) {
	if err := key.Validate(); err != nil {
		return Resolution{}, err
	}
	spotKey := s.keys.spot(key)
	resp, err := s.client.Get(ctx, spotKey, clientv3.WithRange(s.keys.spotRangeEnd(spotKey)))
	if err != nil {
		return Resolution{}, fmt.Errorf("store: lookup %s: %w", key, err)
	}
	return s.resolve(key, resp.Header.Revision, resp.Kvs)
}

// resolve maps the record and owner marker of one key to exactly one State (B2).
func (s *Etcd) resolve(key SpotKey, revision int64, kvs []*mvccpb.KeyValue) (Resolution, error) {
	res := Resolution{Key: key, Revision: revision}
	var recKV, markerKV *mvccpb.KeyValue
	for _, kv := range kvs {
		if len(kv.Key) > len(markerSuffix) && string(kv.Key[len(kv.Key)-len(markerSuffix):]) == markerSuffix {
			markerKV = kv
		} else {
			recKV = kv
		}
	}
	if recKV == nil {
		res.State = StateMissing
		return res, nil
	}
	var pb storepb.SpotRecord
	if err := proto.Unmarshal(recKV.Value, &pb); err != nil {
		return Resolution{}, fmt.Errorf("%w: %s: %v", ErrCorruptRecord, key, err)
	}
	res.Record = recordOf(&pb, recKV)
	switch {
	case markerKV == nil || markerKV.Lease != pb.OwnerLease:
		// The owner's lease is gone: authority remains, the owner is unusable (B3).
		res.State, res.Evidence = StateUnavailable, EvidenceOwnerLeaseEnded
	case pb.Phase == storepb.Phase_PHASE_CREATING:
		res.State = StateCreating
	case pb.Phase == storepb.Phase_PHASE_READY:
		res.State = StateReady
	case pb.Phase == storepb.Phase_PHASE_RELEASING:
		res.State, res.Evidence = StateUnavailable, EvidenceReleasing
	default:
		return Resolution{}, fmt.Errorf("%w: %s: unknown phase %v", ErrCorruptRecord, key, pb.Phase)
	}
	return res, nil
}

func recordOf(pb *storepb.SpotRecord, kv *mvccpb.KeyValue) Record {
	return Record{
		Kind:        sdk.SpotKind(pb.Kind),
		Phase:       pb.Phase,
		Owner:       Owner{Node: sdk.NodeID(pb.Owner), Lease: pb.OwnerLease},
		Attempt:     pb.Attempt,
		Generation:  pb.Generation,
		ReleaseTag:  pb.ReleaseTag,
		Incarnation: kv.CreateRevision,
		Revision:    kv.ModRevision,
	}
}

func (r Record) proto() *storepb.SpotRecord {
	return &storepb.SpotRecord{
		Phase:      r.Phase,
		Owner:      string(r.Owner.Node),
		OwnerLease: r.Owner.Lease,
		Attempt:    r.Attempt,
		Generation: r.Generation,
		Kind:       uint32(r.Kind),
		ReleaseTag: r.ReleaseTag,
	}
}

// WaitChange implements Store.
func (s *Etcd) WaitChange(ctx context.Context, key SpotKey, revision int64) (Resolution, error) {
	if err := key.Validate(); err != nil {
		return Resolution{}, err
	}
	spotKey := s.keys.spot(key)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.client.Watch(wctx, spotKey,
		clientv3.WithRange(s.keys.spotRangeEnd(spotKey)),
		clientv3.WithRev(revision+1),
		clientv3.WithPrevKV())
	for {
		select {
		case <-ctx.Done():
			return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, ctx.Err())
		case wr, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, ctx.Err())
				}
				return Resolution{}, fmt.Errorf("store: wait for %s: watch closed", key)
			}
			if err := wr.Err(); err != nil && wr.CompactRevision == 0 {
				return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, err)
			}
			if wr.CompactRevision == 0 && len(wr.Events) == 0 {
				continue // progress notification
			}
			// Changed, or the revision was compacted away: either way re-read.
			res, err := s.Lookup(ctx, key)
			if err != nil {
				return Resolution{}, err
			}
			if res.State == StateMissing {
				res.ReleasedBy = releasedBy(spotKey, wr.Events)
			}
			return res, nil
		}
	}
}

// releasedBy finds the tag of the release that deleted the record, from the deleted value.
func releasedBy(spotKey string, events []*clientv3.Event) ReleaseTag {
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Type != clientv3.EventTypeDelete || string(ev.Kv.Key) != spotKey || ev.PrevKv == nil {
			continue
		}
		var pb storepb.SpotRecord
		if proto.Unmarshal(ev.PrevKv.Value, &pb) == nil {
			return pb.ReleaseTag
		}
	}
	return ReleaseNone
}

// BeginRelease implements Store.
func (s *Etcd) BeginRelease(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag) (Record, error) {
	spotKey := s.keys.spot(key)
	return s.markReleasing(ctx, key, rec, tag, s.ownerFence(spotKey, rec.Revision, rec.Owner))
}

func (s *Etcd) markReleasing(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag, fence []clientv3.Cmp) (Record, error) {
	if tag == ReleaseNone {
		return Record{}, fmt.Errorf("store: release %s: a release needs a tag", key)
	}
	spotKey := s.keys.spot(key)
	pb := rec.proto()
	pb.Phase, pb.ReleaseTag = storepb.Phase_PHASE_RELEASING, tag
	val, err := encodeRecord(pb)
	if err != nil {
		return Record{}, err
	}
	resp, err := s.client.Txn(ctx).If(fence...).
		Then(clientv3.OpPut(spotKey, val), clientv3.OpGet(spotKey)).
		Commit()
	if err != nil {
		return Record{}, fmt.Errorf("store: begin release %s: %w", key, err)
	}
	if !resp.Succeeded {
		return Record{}, fmt.Errorf("store: begin release %s at revision %d: %w", key, rec.Revision, ErrFenced)
	}
	return recordOf(pb, resp.Responses[1].GetResponseRange().Kvs[0]), nil
}

// FinishRelease implements Store.
func (s *Etcd) FinishRelease(ctx context.Context, key SpotKey, rec Record) error {
	spotKey := s.keys.spot(key)
	return s.deleteRecord(ctx, key, rec, s.ownerFence(spotKey, rec.Revision, rec.Owner))
}

func (s *Etcd) deleteRecord(ctx context.Context, key SpotKey, rec Record, fence []clientv3.Cmp) error {
	if rec.Phase != storepb.Phase_PHASE_RELEASING {
		return fmt.Errorf("store: finish release %s: record is %v, not Releasing", key, rec.Phase)
	}
	spotKey := s.keys.spot(key)
	resp, err := s.client.Txn(ctx).If(fence...).
		Then(
			clientv3.OpDelete(spotKey),
			clientv3.OpDelete(s.keys.marker(spotKey)),
			clientv3.OpDelete(s.keys.owned(rec.Owner.Node, rec.Owner.Lease, key)),
		).Commit()
	if err != nil {
		return fmt.Errorf("store: finish release %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("store: finish release %s at revision %d: %w", key, rec.Revision, ErrFenced)
	}
	return nil
}

// Release implements Store.
func (s *Etcd) Release(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag) error {
	rel, err := s.BeginRelease(ctx, key, rec, tag)
	if err != nil {
		return err
	}
	return s.FinishRelease(ctx, key, rel)
}
