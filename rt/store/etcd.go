package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	// local holds this process's registrations (Owner -> *Registration): while a lease guard
	// holds, its owner is known alive without a read.
	local sync.Map
	// batch is the group commit of record writes; nil when disabled.
	batch *batcher
	kv    kvClient
}

// Option configures New.
type Option func(*options)

type options struct {
	groupCommit int
}

// WithGroupCommit turns the group commit on for a server whose --max-txn-ops is maxTxnOps
// (etcd's default, 128, is the default here). Concurrent record writes then share round trips
// instead of paying one raft round each.
func WithGroupCommit(maxTxnOps int) Option { return func(o *options) { o.groupCommit = maxTxnOps } }

// WithoutGroupCommit sends every record write as a transaction of its own.
func WithoutGroupCommit() Option { return func(o *options) { o.groupCommit = 0 } }

var _ Store = (*Etcd)(nil)

// New returns the Location Store of mesh on client. The client stays the caller's: Close does
// not close it, but must be called to stop the group commit. Record writes go straight to the
// client's connection with clientv3's default call options, so a KV wrapper set on client
// (namespace, ordering) and its message size options are not applied to them.
func New(client *clientv3.Client, mesh string, opts ...Option) (*Etcd, error) {
	if client == nil {
		return nil, errors.New("store: nil etcd client")
	}
	if err := sdk.ValidateID("mesh name", mesh); err != nil {
		return nil, err
	}
	o := options{groupCommit: 128}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Etcd{client: client, keys: newKeys(mesh), mesh: mesh, settle: 5 * time.Second, kv: newKVClient(client)}
	// etcd counts a nested transaction's widest part against what its parent leaves of
	// --max-txn-ops; a record write has at most two compares.
	if batch := o.groupCommit - maxWriteWidth; batch > 1 {
		s.batch = newBatcher(s.kv, batch)
	}
	return s, nil
}

// write runs one record write, through the group commit when it is on.
func (s *Etcd) write(ctx context.Context, key string, cmps []*pb.Compare, then, els []*pb.RequestOp) (txnResult, error) {
	txn := &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}
	if s.batch != nil {
		return s.batch.do(ctx, key, txn)
	}
	resp, err := s.kv.txn(ctx, txn)
	if err != nil {
		return txnResult{}, err
	}
	return txnResult{Succeeded: resp.Succeeded, Responses: resp.Responses, Revision: resp.Header.Revision}, nil
}

// Mesh returns the mesh name whose keys the store reads and writes.
func (s *Etcd) Mesh() string { return s.mesh }

// Client returns the etcd client the store runs on.
func (s *Etcd) Client() *clientv3.Client { return s.client }

// Close stops the group commit; writes still queued fail with ErrStoreClosed. Safe to call more
// than once.
func (s *Etcd) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	return nil
}

// newAttempt returns a random non-zero attempt fence.
func newAttempt() uint64 {
	for {
		if a := rand.Uint64(); a != 0 {
			return a
		}
	}
}

var marshal = proto.MarshalOptions{Deterministic: true}

// maxWriteWidth is the most compares or ops of any record write's branches.
const maxWriteWidth = 2

func encodeRecord(r *storepb.SpotRecord) (string, error) {
	b, err := marshal.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("store: encode spot record: %w", err)
	}
	return string(b), nil
}

// ownerFence holds while the record is still at revision and owner's lease still holds the
// owner's node descriptor: every write an owner makes carries it (DESIGN §4).
func (s *Etcd) ownerFence(spotKey string, revision int64, owner Owner) []*pb.Compare {
	return []*pb.Compare{cmpModRevision(spotKey, revision), cmpLease(s.keys.node(owner.Node), owner.Lease, true)}
}

// deadOwnerFence holds while the record is still at revision and the dead owner's lease no
// longer holds its node descriptor: the fence of a reclaimer's writes.
func (s *Etcd) deadOwnerFence(spotKey string, revision int64, dead Owner) []*pb.Compare {
	return []*pb.Compare{cmpModRevision(spotKey, revision), cmpLease(s.keys.node(dead.Node), dead.Lease, false)}
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
	out, err := s.reserveOnce(ctx, key, kind, owner, attempt)
	if err != nil && ambiguous(err) {
		return s.settleReserve(ctx, key, kind, owner, attempt, err)
	}
	return out, err
}

// reserveOnce runs the reservation txn: create the record if no record exists and the owner's
// lease is alive. A lost reservation answers the current record's resolution.
func (s *Etcd) reserveOnce(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64) (ReserveResult, error) {
	spotKey := s.keys.spot(key)
	rec, err := encodeRecord(&storepb.SpotRecord{
		Phase:      storepb.Phase_PHASE_CREATING,
		Owner:      string(owner.Node),
		OwnerLease: owner.Lease,
		Attempt:    attempt,
		Kind:       uint32(kind),
	})
	if err != nil {
		return ReserveResult{}, err
	}
	resp, err := s.write(ctx, spotKey,
		[]*pb.Compare{cmpCreateRevision(spotKey, 0), cmpLease(s.keys.node(owner.Node), owner.Lease, true)},
		[]*pb.RequestOp{opPut(spotKey, rec)},
		[]*pb.RequestOp{opGet(spotKey)})
	if err != nil {
		return ReserveResult{}, err
	}
	if resp.Succeeded {
		// A txn's writes carry the txn's revision: the record's create and mod revision.
		rev := resp.Revision
		return ReserveResult{Won: true, Reservation: Reservation{
			Key: key, Kind: kind, Owner: owner, Attempt: attempt, Revision: rev, Incarnation: rev,
		}}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return ReserveResult{}, fmt.Errorf("store: reserve %s: owner lease of %s has ended: %w", key, owner.Node, ErrFenced)
	}
	cur, err := s.resolve(ctx, key, resp.Revision, kvs[0])
	if err != nil {
		return ReserveResult{}, err
	}
	if cur.State != StateMissing && cur.Record.Attempt == attempt && cur.Record.Owner == owner {
		// Only a settling retry meets its own attempt: the first txn landed after all.
		return wonFrom(key, cur.Record), nil
	}
	return ReserveResult{Current: cur}, nil
}

// settleReserve resolves a reserve txn whose outcome is unknown (timeout, lost connection) by
// linearizable re-reads before anything is reported: the attempt fence tells whether the txn
// was applied. If the caller has gone meanwhile, an applied reservation is released again, and
// an unapplied one is fenced out by reserving and releasing the key with the same attempt, so a
// failed Reserve leaves no record behind.
func (s *Etcd) settleReserve(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64, cause error) (ReserveResult, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settle)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		out, err := s.settleOnce(sctx, key, kind, owner, attempt)
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
		if !ambiguous(err) {
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
func (s *Etcd) settleOnce(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64) (ReserveResult, error) {
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
	return s.reserveOnce(ctx, key, kind, owner, attempt)
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
	if errors.As(err, new(notSent)) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var code codes.Code
	var serverErr rpctypes.EtcdError
	if errors.As(err, &serverErr) {
		// An etcd server error such as "request timed out" carries its code itself.
		code = serverErr.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else {
		return false
	}
	switch code {
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
	for range 3 {
		resp, err := s.write(ctx, spotKey, s.ownerFence(spotKey, r.Revision, r.Owner), []*pb.RequestOp{opPut(spotKey, val)}, nil)
		if err == nil && !resp.Succeeded {
			return Record{}, fmt.Errorf("store: commit ready %s (attempt %x): %w", r.Key, r.Attempt, ErrFenced)
		}
		if err == nil {
			return recordAt(rec, r.Incarnation, resp.Revision), nil
		}
		if !ambiguous(err) {
			return Record{}, fmt.Errorf("store: commit ready %s: %w", r.Key, err)
		}
		// Unknown outcome: a linearizable re-read tells whether it was applied.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settle)
		res, lerr := s.Lookup(sctx, r.Key)
		cancel()
		switch {
		case lerr != nil:
			return Record{}, fmt.Errorf("store: commit ready %s: outcome unknown (%v, re-read: %v)", r.Key, err, lerr)
		case res.State == StateReady && res.Record.Attempt == r.Attempt && res.Record.Owner == r.Owner:
			return res.Record, nil
		case res.State != StateCreating || res.Record.Revision != r.Revision:
			return Record{}, fmt.Errorf("store: commit ready %s (attempt %x): %w", r.Key, r.Attempt, ErrFenced)
		}
		// Not applied and still ours to commit: try again.
	}
	return Record{}, fmt.Errorf("store: commit ready %s: no answer from the store", r.Key)
}

// Lookup implements Store.
func (s *Etcd) Lookup(ctx context.Context, key SpotKey) (Resolution, error) {
	if err := key.Validate(); err != nil {
		return Resolution{}, err
	}
	resp, err := s.client.Get(ctx, s.keys.spot(key))
	if err != nil {
		return Resolution{}, fmt.Errorf("store: lookup %s: %w", key, err)
	}
	var kv *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		kv = resp.Kvs[0]
	}
	return s.resolve(ctx, key, resp.Header.Revision, kv)
}

// resolve maps one record, and the liveness of its owner, to exactly one State (B2).
func (s *Etcd) resolve(ctx context.Context, key SpotKey, revision int64, kv *mvccpb.KeyValue) (Resolution, error) {
	res := Resolution{Key: key, Revision: revision}
	if kv == nil {
		res.State = StateMissing
		return res, nil
	}
	var stored storepb.SpotRecord
	if err := proto.Unmarshal(kv.Value, &stored); err != nil {
		return Resolution{}, fmt.Errorf("%w: %s: %v", ErrCorruptRecord, key, err)
	}
	res.Record = recordOf(&stored, kv)
	alive, err := s.ownerAlive(ctx, res.Record.Owner)
	if err != nil {
		return Resolution{}, fmt.Errorf("store: lookup %s: owner %s: %w", key, res.Record.Owner.Node, err)
	}
	switch {
	case !alive:
		// The owner's lease is gone: authority remains, the owner is unusable (B3).
		res.State, res.Evidence = StateUnavailable, EvidenceOwnerLeaseEnded
	case stored.Phase == storepb.Phase_PHASE_CREATING:
		res.State = StateCreating
	case stored.Phase == storepb.Phase_PHASE_READY:
		res.State = StateReady
	case stored.Phase == storepb.Phase_PHASE_RELEASING:
		res.State, res.Evidence = StateUnavailable, EvidenceReleasing
	default:
		return Resolution{}, fmt.Errorf("%w: %s: unknown phase %v", ErrCorruptRecord, key, stored.Phase)
	}
	return res, nil
}

// ownerAlive reports whether owner's lease still holds its node descriptor. A registration of
// this process whose lease guard holds is alive without a read.
func (s *Etcd) ownerAlive(ctx context.Context, owner Owner) (bool, error) {
	if r, ok := s.local.Load(owner); ok && r.(*Registration).guard.Valid() {
		return true, nil
	}
	resp, err := s.client.Get(ctx, s.keys.node(owner.Node))
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].Lease == owner.Lease, nil
}

func recordOf(stored *storepb.SpotRecord, kv *mvccpb.KeyValue) Record {
	return recordAt(stored, kv.CreateRevision, kv.ModRevision)
}

func recordAt(stored *storepb.SpotRecord, incarnation, revision int64) Record {
	return Record{
		Kind:        sdk.SpotKind(stored.Kind),
		Phase:       stored.Phase,
		Owner:       Owner{Node: sdk.NodeID(stored.Owner), Lease: stored.OwnerLease},
		Attempt:     stored.Attempt,
		Generation:  stored.Generation,
		ReleaseTag:  stored.ReleaseTag,
		Incarnation: incarnation,
		Revision:    revision,
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
func (s *Etcd) WaitChange(ctx context.Context, prev Resolution) (Resolution, error) {
	key := prev.Key
	if err := key.Validate(); err != nil {
		return Resolution{}, err
	}
	spotKey := s.keys.spot(key)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	recordCh := s.client.Watch(wctx, spotKey, clientv3.WithRev(prev.Revision+1), clientv3.WithPrevKV())
	var ownerCh clientv3.WatchChan // nil (never ready) when there is no owner to watch
	if owner := prev.Record.Owner; owner.Node != "" && prev.Evidence != EvidenceOwnerLeaseEnded {
		// The owner's end changes the answer too (Creating or Ready -> Unavailable).
		ownerCh = s.client.Watch(wctx, s.keys.node(owner.Node), clientv3.WithRev(prev.Revision+1), clientv3.WithFilterPut())
	}
	// missing holds a Missing answer read before the watch delivered the delete that caused
	// it; the delete's old value names the release (D5).
	var missing *Resolution
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, ctx.Err())
		case wr, ok = <-recordCh:
		case wr, ok = <-ownerCh:
		}
		if !ok {
			if ctx.Err() != nil {
				return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, ctx.Err())
			}
			return Resolution{}, fmt.Errorf("store: wait for %s: watch closed", key)
		}
		if wr.CompactRevision != 0 {
			// The revision was compacted away: the history is gone, re-read.
			return s.Lookup(ctx, key)
		}
		if err := wr.Err(); err != nil {
			return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, err)
		}
		if len(wr.Events) == 0 {
			continue // progress notification
		}
		tag, deleted := releasedBy(spotKey, wr.Events)
		if missing != nil {
			if deleted {
				missing.ReleasedBy = tag
				return *missing, nil
			}
			continue
		}
		res, err := s.Lookup(ctx, key)
		if err != nil {
			return Resolution{}, err
		}
		if res.State != StateMissing {
			return res, nil
		}
		if deleted {
			res.ReleasedBy = tag
			return res, nil
		}
		missing = &res
	}
}

// releasedBy reports whether events delete the record, and the release tag of the deleted value.
func releasedBy(spotKey string, events []*clientv3.Event) (ReleaseTag, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Type != clientv3.EventTypeDelete || string(ev.Kv.Key) != spotKey {
			continue
		}
		var stored storepb.SpotRecord
		if ev.PrevKv != nil && proto.Unmarshal(ev.PrevKv.Value, &stored) == nil {
			return stored.ReleaseTag, true
		}
		return ReleaseNone, true
	}
	return ReleaseNone, false
}

// BeginRelease implements Store.
func (s *Etcd) BeginRelease(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag) (Record, error) {
	return s.markReleasing(ctx, key, rec, tag, s.ownerFence(s.keys.spot(key), rec.Revision, rec.Owner))
}

func (s *Etcd) markReleasing(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag, fence []*pb.Compare) (Record, error) {
	if tag == ReleaseNone {
		return Record{}, fmt.Errorf("store: release %s: a release needs a tag", key)
	}
	spotKey := s.keys.spot(key)
	next := rec.proto()
	next.Phase, next.ReleaseTag = storepb.Phase_PHASE_RELEASING, tag
	val, err := encodeRecord(next)
	if err != nil {
		return Record{}, err
	}
	resp, err := s.write(ctx, spotKey, fence, []*pb.RequestOp{opPut(spotKey, val)}, nil)
	if err != nil {
		return Record{}, fmt.Errorf("store: begin release %s: %w", key, err)
	}
	if !resp.Succeeded {
		return Record{}, fmt.Errorf("store: begin release %s at revision %d: %w", key, rec.Revision, ErrFenced)
	}
	return recordAt(next, rec.Incarnation, resp.Revision), nil
}

// FinishRelease implements Store.
func (s *Etcd) FinishRelease(ctx context.Context, key SpotKey, rec Record) error {
	return s.deleteRecord(ctx, key, rec, s.ownerFence(s.keys.spot(key), rec.Revision, rec.Owner))
}

func (s *Etcd) deleteRecord(ctx context.Context, key SpotKey, rec Record, fence []*pb.Compare) error {
	if rec.Phase != storepb.Phase_PHASE_RELEASING {
		return fmt.Errorf("store: finish release %s: record is %v, not Releasing", key, rec.Phase)
	}
	spotKey := s.keys.spot(key)
	resp, err := s.write(ctx, spotKey, fence, []*pb.RequestOp{opDelete(spotKey)}, nil)
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
