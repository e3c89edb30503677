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
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// Etcd is the Location Store on an etcd cluster.
type Etcd struct {
	client *clientv3.Client
	keys   keys
	mesh   string
	// settle bounds the linearizable re-reads that resolve a write whose answer was lost.
	settle time.Duration
	// progressEvery is how often a node watch asks for a progress notification.
	progressEvery time.Duration
	// local holds this process's registrations (Owner -> *Registration): while a lease guard
	// holds, its owner is known alive without a read.
	local sync.Map
	// granted holds the owner leases this store granted for registrations and has not seen
	// revoked (ownLeases): a node ID that one of them holds, and no live registration, is this
	// process's own, left by a registration whose answer was lost, and not another process's.
	granted ownLeases
	// batch is the group commit of record writes; nil when disabled.
	batch *batcher
	// kv sends the record writes; internal tests replace it to lose answers.
	kv txnSender
	// maxMemberships bounds the channel memberships of a registration: its transaction writes
	// them with the node's two keys, within the server's --max-txn-ops.
	maxMemberships int
}

// Option configures New.
type Option func(*options)

type options struct {
	groupCommit      int
	groupCommitBytes int
}

// WithGroupCommit turns the group commit on for a server whose --max-txn-ops is maxTxnOps
// (etcd's default, 128, is the default here). Concurrent record writes then share round trips
// instead of paying one raft round each.
func WithGroupCommit(maxTxnOps int) Option { return func(o *options) { o.groupCommit = maxTxnOps } }

// WithGroupCommitBytes bounds the encoded size of the writes that the group commit sends as
// one transaction (default 1 MiB, below etcd's default --max-request-bytes of 1.5 MiB); a
// single larger write is sent alone. Lower it for a server with a smaller limit.
func WithGroupCommitBytes(maxBytes int) Option {
	return func(o *options) { o.groupCommitBytes = maxBytes }
}

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
	o := options{groupCommit: 128, groupCommitBytes: defaultBatchBytes}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Etcd{client: client, keys: newKeys(mesh), mesh: mesh, kv: newKVClient(client),
		settle: 5 * time.Second, progressEvery: 30 * time.Second, maxMemberships: MaxChannelMemberships}
	if o.groupCommit > 0 {
		s.maxMemberships = min(MaxChannelMemberships, max(o.groupCommit-2, 0))
	}
	// etcd counts a nested transaction's widest part against what its parent leaves of
	// --max-txn-ops; a record write has at most maxWriteWidth compares or ops.
	if batch := o.groupCommit - maxWriteWidth; batch > 1 {
		s.batch = newBatcher(s.kv, batch, max(o.groupCommitBytes, 1))
	}
	return s, nil
}

// write runs one record write, through the group commit when it is on, for at most ctx. A
// write whose ctx has already ended is not sent.
func (s *Etcd) write(ctx context.Context, key string, cmps []*pb.Compare, then, els []*pb.RequestOp) (txnResult, error) {
	return s.writeTxn(ctx, key, &pb.TxnRequest{Compare: cmps, Success: then, Failure: els})
}

// writeTxn is write of a transaction built whole.
func (s *Etcd) writeTxn(ctx context.Context, key string, txn *pb.TxnRequest) (txnResult, error) {
	return s.writeTxnAlso(ctx, key, "", txn)
}

// writeTxnAlso is writeTxn of a transaction that also compares and changes the key also (when
// set): the group commit never sends it in one transaction with another write of key or of
// also, since etcd would check both writes' compares before either changed the key they share.
func (s *Etcd) writeTxnAlso(ctx context.Context, key, also string, txn *pb.TxnRequest) (txnResult, error) {
	if err := ctx.Err(); err != nil {
		return txnResult{}, notSent{err}
	}
	if s.batch != nil {
		return s.batch.do(ctx, key, also, txn)
	}
	reply, err := s.kv.txn(ctx, txn)
	if err != nil {
		return txnResult{}, err
	}
	return reply.result(), nil
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

// maxWriteWidth is the most compares or ops of any branch of a write sent through the group
// commit: an Actor's move (its revision and two hosts' fences).
const maxWriteWidth = 5

func encodeRecord(r *storepb.SpotRecord) (string, error) {
	b, err := appendRecord(nil, r)
	return string(b), err
}

// appendRecord appends r's encoding to b.
func appendRecord(b []byte, r *storepb.SpotRecord) ([]byte, error) {
	b, err := marshal.MarshalAppend(b, r)
	if err != nil {
		return nil, fmt.Errorf("store: encode spot record: %w", err)
	}
	return b, nil
}

// ownerFence holds while the record is still at revision and owner's lease still holds the
// owner's node descriptor: every write an owner makes carries it (DESIGN §4). readyTxn builds
// the same fence into the Ready commit's transaction (TestB5_RecordTxnsAreTheFencedWritesTheyName).
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
	if err != nil {
		return ReserveResult{}, fmt.Errorf("store: reserve %s: %w", key, unavailable(err))
	}
	return out, nil
}

// reserveOnce runs the reservation txn: create the record if no record exists and the owner's
// lease is alive. A lost reservation answers the current record's resolution; a reservation
// fenced out by the owner's end fails with ErrFenced.
func (s *Etcd) reserveOnce(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64) (ReserveResult, error) {
	spotKey := s.keys.spot(key)
	txn, err := s.reservationTxn(spotKey, owner, &storepb.SpotRecord{
		Phase:      storepb.Phase_PHASE_CREATING,
		Owner:      string(owner.Node),
		OwnerLease: owner.Lease,
		Attempt:    attempt,
		Kind:       uint32(kind),
	})
	if err != nil {
		return ReserveResult{}, err
	}
	resp, err := s.writeTxn(ctx, spotKey, txn)
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
	kvs, err := resp.read()
	if err != nil {
		return ReserveResult{}, err
	}
	if len(kvs) == 0 {
		return ReserveResult{}, fmt.Errorf("owner lease of %s has ended: %w", owner.Node, ErrFenced)
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

// settleReserve resolves a reserve txn whose answer was lost (timeout, lost connection) before
// anything is reported: the attempt fence tells whether it was applied, and while the key is
// Missing the reservation is sent again with the same attempt, which is idempotent. It keeps
// going after the caller has gone, for at most s.settle, so that a failed Reserve leaves no
// record behind: what the attempt won for a caller that has gone is released again.
func (s *Etcd) settleReserve(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner, attempt uint64, cause error) (ReserveResult, error) {
	bound := context.WithoutCancel(ctx)
	out, err := settle(bound, s, cause,
		func(ctx context.Context) (ReserveResult, verdict, error) {
			res, err := s.Lookup(ctx, key)
			switch {
			case err != nil:
				return ReserveResult{}, 0, err
			case res.State == StateMissing:
				return ReserveResult{}, verdictAgain, nil
			case res.Record.Attempt == attempt && res.Record.Owner == owner:
				return wonFrom(key, res.Record), verdictKnown, nil
			}
			return ReserveResult{Current: res}, verdictKnown, nil // lost to another creator
		},
		func(ctx context.Context) (ReserveResult, bool, error) {
			out, err := s.reserveOnce(ctx, key, kind, owner, attempt)
			if errors.Is(err, ErrFenced) {
				return ReserveResult{}, false, nil
			}
			return out, err == nil, err
		})
	if err != nil {
		return ReserveResult{}, fmt.Errorf("store: reserve %s: %w", key, err)
	}
	if out.Won && ctx.Err() != nil {
		rec := Record{Kind: kind, Phase: PhaseCreating, Owner: owner, Attempt: attempt,
			Incarnation: out.Reservation.Incarnation, Revision: out.Reservation.Revision}
		rctx, cancel := context.WithTimeout(bound, s.settle)
		defer cancel()
		if err := s.Release(rctx, key, rec, ReleaseCreationFailed); err != nil {
			return ReserveResult{}, fmt.Errorf("store: reserve %s: %w; releasing the reservation of the caller that had gone failed: %w", key, ctx.Err(), err)
		}
		return ReserveResult{}, fmt.Errorf("store: reserve %s: %w", key, ctx.Err())
	}
	return out, nil
}

// wonFrom is the reservation that rec, a record of the caller's own attempt, stands for.
func wonFrom(key SpotKey, rec Record) ReserveResult {
	return ReserveResult{Won: true, Reservation: Reservation{
		Key: key, Kind: rec.Kind, Owner: rec.Owner, Attempt: rec.Attempt,
		Revision: rec.Revision, Incarnation: rec.Incarnation,
	}}
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
	txn, err := s.readyTxn(spotKey, r.Revision, r.Owner, rec)
	if err != nil {
		return Record{}, err
	}
	ready, err := fencedWrite(ctx, s,
		func(ctx context.Context) (Record, bool, error) {
			resp, err := s.writeTxn(ctx, spotKey, txn)
			if err != nil || !resp.Succeeded {
				return Record{}, false, err
			}
			return recordAt(rec, r.Incarnation, resp.Revision), true, nil
		},
		func(ctx context.Context) (Record, verdict, error) {
			cur, ok, err := s.readRecord(ctx, spotKey)
			switch {
			case err != nil:
				return Record{}, 0, err
			case ok && cur.Incarnation == r.Incarnation && cur.Owner == r.Owner && cur.Attempt == r.Attempt && cur.Phase == PhaseReady:
				return cur, verdictKnown, nil
			case ok && cur.Revision == r.Revision:
				return Record{}, verdictAgain, nil
			}
			return Record{}, verdictFenced, nil
		})
	if err != nil {
		return Record{}, fmt.Errorf("store: commit ready %s (attempt %x): %w", r.Key, r.Attempt, err)
	}
	return ready, nil
}

// readRecord reads the record at spotKey linearizably; ok is false when there is none.
func (s *Etcd) readRecord(ctx context.Context, spotKey string) (rec Record, ok bool, err error) {
	resp, err := s.client.Get(ctx, spotKey)
	if err != nil {
		return Record{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return Record{}, false, nil
	}
	var stored storepb.SpotRecord
	if err := proto.Unmarshal(resp.Kvs[0].Value, &stored); err != nil {
		return Record{}, false, fmt.Errorf("%w: %s: %v", ErrCorruptRecord, spotKey, err)
	}
	return recordOf(&stored, resp.Kvs[0]), true, nil
}

// Lookup implements Store.
func (s *Etcd) Lookup(ctx context.Context, key SpotKey) (Resolution, error) {
	if err := key.Validate(); err != nil {
		return Resolution{}, err
	}
	resp, err := s.client.Get(ctx, s.keys.spot(key))
	if err != nil {
		return Resolution{}, fmt.Errorf("store: lookup %s: %w", key, unavailable(err))
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
		return Resolution{}, fmt.Errorf("store: lookup %s: owner %s: %w", key, res.Record.Owner.Node, unavailable(err))
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
	// The created notification tells a wait that ends with nothing changed from one that
	// ends because the store never answered.
	recordCh := s.client.Watch(wctx, spotKey, clientv3.WithRev(prev.Revision+1), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	watching := false
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
			return Resolution{}, waitEnded(key, ctx.Err(), watching)
		case wr, ok = <-recordCh:
		case wr, ok = <-ownerCh:
		}
		if !ok {
			if ctx.Err() != nil {
				return Resolution{}, waitEnded(key, ctx.Err(), watching)
			}
			return Resolution{}, fmt.Errorf("store: wait for %s: watch closed", key)
		}
		if wr.CompactRevision != 0 {
			// The revision was compacted away: the history is gone, re-read.
			return s.Lookup(ctx, key)
		}
		if err := wr.Err(); err != nil {
			return Resolution{}, fmt.Errorf("store: wait for %s: %w", key, unavailable(err))
		}
		if wr.Created {
			watching = true
		}
		if len(wr.Events) == 0 {
			continue // created or progress notification
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

// waitEnded is the error of a wait whose ctx ended with err: store unavailability when the
// store never confirmed the watch, a plain end of the wait otherwise.
func waitEnded(key SpotKey, err error, watching bool) error {
	if !watching {
		return fmt.Errorf("store: wait for %s: the store did not answer: %w", key, unavailable(err))
	}
	return fmt.Errorf("store: wait for %s: %w", key, err)
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

// markReleasing writes rec as Releasing with tag, fenced by fence. A write whose answer was
// lost is applied when the record is the same incarnation of the same attempt, Releasing with
// tag; the record is then returned as stored.
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
	releasing, err := fencedWrite(ctx, s,
		func(ctx context.Context) (Record, bool, error) {
			resp, err := s.write(ctx, spotKey, fence, []*pb.RequestOp{opPut(spotKey, val)}, nil)
			if err != nil || !resp.Succeeded {
				return Record{}, false, err
			}
			return recordAt(next, rec.Incarnation, resp.Revision), true, nil
		},
		func(ctx context.Context) (Record, verdict, error) {
			cur, ok, err := s.readRecord(ctx, spotKey)
			switch {
			case err != nil:
				return Record{}, 0, err
			case ok && cur.Incarnation == rec.Incarnation && cur.Owner == rec.Owner && cur.Attempt == rec.Attempt &&
				cur.Phase == PhaseReleasing && cur.ReleaseTag == tag:
				return cur, verdictKnown, nil
			case ok && cur.Revision == rec.Revision:
				return Record{}, verdictAgain, nil
			}
			return Record{}, verdictFenced, nil
		})
	if err != nil {
		return Record{}, fmt.Errorf("store: begin release %s at revision %d: %w", key, rec.Revision, err)
	}
	return releasing, nil
}

// FinishRelease implements Store.
func (s *Etcd) FinishRelease(ctx context.Context, key SpotKey, rec Record) error {
	return s.deleteRecord(ctx, key, rec, s.ownerFence(s.keys.spot(key), rec.Revision, rec.Owner))
}

// deleteRecord deletes rec, Releasing, fenced by fence, with the Actors the Spot holds
// (deleteHostRecord). A delete whose answer was lost is done when the key holds no record or
// another incarnation.
func (s *Etcd) deleteRecord(ctx context.Context, key SpotKey, rec Record, fence []*pb.Compare) error {
	if rec.Phase != storepb.Phase_PHASE_RELEASING {
		return fmt.Errorf("store: finish release %s: record is %v, not Releasing", key, rec.Phase)
	}
	spotKey := s.keys.spot(key)
	_, err := fencedWrite(ctx, s,
		func(ctx context.Context) (struct{}, bool, error) {
			ok, err := s.deleteHostRecord(ctx, key, rec, fence)
			return struct{}{}, ok, err
		},
		func(ctx context.Context) (struct{}, verdict, error) {
			cur, ok, err := s.readRecord(ctx, spotKey)
			if err != nil {
				return struct{}{}, 0, err
			}
			return struct{}{}, deletedVerdict(ok, cur.Incarnation, cur.Revision, rec.Incarnation, rec.Revision), nil
		})
	if err != nil {
		return fmt.Errorf("store: finish release %s at revision %d: %w", key, rec.Revision, err)
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
