package store

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// Actor records (DESIGN §6). An Actor is a member of exactly one Spot at a time; its record,
// actors/<type>/<id>, names that host Spot and a generation. Like a Spot record it is not bound
// to a lease: every write of it is a transaction fenced by revisions and by the host owner's
// lease, and the index spot-actors/<host>/<type>/<id> is written in the same transaction, so
// a host's Actors are listed without reading every Actor record.
//
// The fence of a host, "the host owner's fence" below, is what every write its owner makes
// carries (DESIGN §4): for a User or Instance Spot, its record's ModRevision as the writer read
// it and the owner's lease still holding the owner's node descriptor; for an Entry Spot, which
// has no record, the lease of the node's registration still holding its descriptor.

// ActorStore is the part of the Location Store that locates Actors.
type ActorStore interface {
	// Spawn creates key's record in host, generation 1, if no record of key exists and host's
	// owner fence holds (for a User or Instance host: its record is Ready). An existing record
	// fails it with an error wrapping sdk.ErrAlreadyExists.
	Spawn(ctx context.Context, key ActorKey, host Host) (ActorLocation, error)
	// LookupActor reads key's record linearizably; a missing one fails with an error wrapping
	// sdk.ErrNotFound.
	LookupActor(ctx context.Context, key ActorKey) (ActorLocation, error)
	// MoveActor moves the Actor at loc from its host from to the Ready host to, generation + 1,
	// in one transaction fenced on loc's revision, from's owner fence and to's.
	MoveActor(ctx context.Context, loc ActorLocation, from, to Host) (ActorLocation, error)
	// ReleaseActor deletes the Actor at loc, fenced on loc's revision and host's owner fence.
	ReleaseActor(ctx context.Context, loc ActorLocation, host Host) error
	// ReleaseHostActors deletes every Actor of host under its owner fence, in transactions of
	// a bounded size. (A User or Instance Spot's FinishRelease deletes its Actors itself.)
	ReleaseHostActors(ctx context.Context, host Host) error
	// HostActors lists host's Actors from the index, in key order.
	HostActors(ctx context.Context, host HostRef) ([]ActorKey, error)
	// FenceActor rewrites the record at loc as it is, so that its revision moves past
	// loc.Revision: a write fenced on loc.Revision that has not landed yet (a move's commit
	// whose answer was lost) never will. It fails with ErrFenced when the record is no longer
	// at loc.Revision.
	FenceActor(ctx context.Context, loc ActorLocation) (ActorLocation, error)
}

var _ ActorStore = (*Etcd)(nil)

// Actor errors.
var (
	// ErrHostNotReady: an Actor can be spawned or moved only into a Ready host, and the
	// record the caller read is not Ready.
	ErrHostNotReady = errors.New("store: the host Spot is not Ready")
	// ErrNotMember: the Actor's record names another host than the one given.
	ErrNotMember = errors.New("store: the Actor is not a member of that host Spot")
)

// ActorKey addresses one Actor: its stable type name and its ID.
type ActorKey struct {
	Type string
	ID   string
}

// Validate checks both parts with the rules of sdk.ValidateID.
func (k ActorKey) Validate() error {
	if err := sdk.ValidateID("actor type name", k.Type); err != nil {
		return err
	}
	return sdk.ValidateID("actor ID", k.ID)
}

func (k ActorKey) String() string { return fmt.Sprintf("actor %s/%q", k.Type, k.ID) }

// HostRef names the Spot that holds an Actor, as an Actor record stores it.
type HostRef struct {
	// Kind is Entry, User or Instance.
	Kind sdk.SpotKind
	// Type is the host Spot's stable type name.
	Type string
	// ID is a User or Instance host's ID; empty for an Entry host.
	ID string
	// Node is an Entry host's node; empty otherwise.
	Node sdk.NodeID
	// Lease is an Entry host's registration lease; 0 otherwise.
	Lease int64
	// Incarnation is a User or Instance host record's CreateRevision; 0 for an Entry host.
	Incarnation int64
}

func (h HostRef) String() string {
	if h.Kind == sdk.KindEntry {
		return fmt.Sprintf("Entry %s on %s (lease %x)", h.Type, h.Node, h.Lease)
	}
	return fmt.Sprintf("%s %s/%q (incarnation %d)", h.Kind, h.Type, h.ID, h.Incarnation)
}

// Host is a Spot that holds Actors with its owner's fence, as the writer read it.
type Host struct {
	HostRef
	// Owner is the host's owner: the record's owner, or the Entry host's registration.
	Owner Owner
	// Phase is a User or Instance host record's phase as read.
	Phase Phase
	// Revision is a User or Instance host record's ModRevision as read: the fence.
	Revision int64
}

// SpotHost is the User or Instance Spot key as its record rec was read.
func SpotHost(key SpotKey, rec Record) Host {
	return Host{
		HostRef: HostRef{Kind: rec.Kind, Type: key.Type, ID: key.ID, Incarnation: rec.Incarnation},
		Owner:   rec.Owner, Phase: rec.Phase, Revision: rec.Revision,
	}
}

// EntryHost is the Entry Spot of type typ of the registration owner.
func EntryHost(typ string, owner Owner) Host {
	return Host{
		HostRef: HostRef{Kind: sdk.KindEntry, Type: typ, Node: owner.Node, Lease: owner.Lease},
		Owner:   owner,
	}
}

// validate checks that h names a host and carries a fence.
func (h Host) validate() error {
	if err := sdk.ValidateTypeName(h.Type); err != nil {
		return err
	}
	switch h.Kind {
	case sdk.KindEntry:
		if h.Node == "" || h.Owner.Node != h.Node || h.Owner.Lease == 0 || h.Lease != h.Owner.Lease {
			return fmt.Errorf("%w: Entry host %s: its node's registration is its fence", sdk.ErrInvalidArgument, h.HostRef)
		}
		return h.Node.Validate()
	case sdk.KindUser, sdk.KindInstance:
		if h.Revision == 0 || h.Incarnation == 0 || h.Owner.Node == "" {
			return fmt.Errorf("%w: host %s: no record revision or owner to fence on", sdk.ErrInvalidArgument, h.HostRef)
		}
		return sdk.ValidateSpotID(h.ID)
	}
	return fmt.Errorf("%w: an Actor's host is an Entry, User or Instance Spot, not %s", sdk.ErrInvalidArgument, h.Kind)
}

// ready checks that h may take Actors: a User or Instance host's record was read Ready.
func (h Host) ready() error {
	if h.Kind != sdk.KindEntry && h.Phase != PhaseReady {
		return fmt.Errorf("%w: %s is %v", ErrHostNotReady, h.HostRef, h.Phase)
	}
	return nil
}

// ActorLocation is a stored Actor record with its etcd revisions.
type ActorLocation struct {
	Key  ActorKey
	Host HostRef
	// Generation is 1 at the spawn and grows by one at every move.
	Generation uint64
	// Attempt is the spawn attempt that created the record.
	Attempt uint64
	// Incarnation is the record's CreateRevision: it differs for every spawn of the key.
	Incarnation int64
	// Revision is the record's ModRevision: the fence of the next move or release.
	Revision int64
}

// hostFence holds while h's owner fence holds (see the top of this file).
func (s *Etcd) hostFence(h Host) []*pb.Compare {
	if h.Kind == sdk.KindEntry {
		return []*pb.Compare{cmpLease(s.keys.node(h.Node), h.Owner.Lease, true)}
	}
	return s.ownerFence(s.keys.spot(SpotKey{Type: h.Type, ID: h.ID}), h.Revision, h.Owner)
}

func encodeActor(r *storepb.ActorRecord) (string, error) {
	b, err := marshal.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("store: encode actor record: %w", err)
	}
	return string(b), nil
}

func (h HostRef) proto() *storepb.ActorHost {
	return &storepb.ActorHost{Kind: uint32(h.Kind), Type: h.Type, Id: h.ID, Node: string(h.Node),
		Lease: h.Lease, Incarnation: h.Incarnation}
}

func hostRefOf(h *storepb.ActorHost) HostRef {
	return HostRef{Kind: sdk.SpotKind(h.GetKind()), Type: h.GetType(), ID: h.GetId(), Node: sdk.NodeID(h.GetNode()),
		Lease: h.GetLease(), Incarnation: h.GetIncarnation()}
}

func locationAt(key ActorKey, stored *storepb.ActorRecord, incarnation, revision int64) ActorLocation {
	return ActorLocation{Key: key, Host: hostRefOf(stored.GetHost()), Generation: stored.GetGeneration(),
		Attempt: stored.GetAttempt(), Incarnation: incarnation, Revision: revision}
}

func decodeActor(key ActorKey, kv *mvccpb.KeyValue) (ActorLocation, error) {
	var stored storepb.ActorRecord
	if err := proto.Unmarshal(kv.Value, &stored); err != nil {
		return ActorLocation{}, fmt.Errorf("%w: %s: %v", ErrCorruptRecord, key, err)
	}
	return locationAt(key, &stored, kv.CreateRevision, kv.ModRevision), nil
}

// readActor reads key's record linearizably; ok is false when there is none.
func (s *Etcd) readActor(ctx context.Context, key ActorKey) (loc ActorLocation, ok bool, err error) {
	resp, err := s.client.Get(ctx, s.keys.actor(key))
	if err != nil {
		return ActorLocation{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return ActorLocation{}, false, nil
	}
	loc, err = decodeActor(key, resp.Kvs[0])
	return loc, err == nil, err
}

// spawned is the outcome of one spawn transaction: the record made, or the existing one.
type spawned struct {
	loc    ActorLocation
	exists bool // another spawn's record exists
}

// Spawn implements ActorStore.
//
// Fence: no record of key exists (CreateRevision 0) and host's owner fence holds; for a User
// or Instance host, the record as read must be Ready. One transaction writes the record and
// the index key. A spawn whose answer was lost is settled by its attempt, like Reserve's,
// even after ctx ends, for a bounded time, so that a failed Spawn leaves no record.
func (s *Etcd) Spawn(ctx context.Context, key ActorKey, host Host) (ActorLocation, error) {
	if err := key.Validate(); err != nil {
		return ActorLocation{}, err
	}
	if err := host.validate(); err != nil {
		return ActorLocation{}, err
	}
	if err := host.ready(); err != nil {
		return ActorLocation{}, fmt.Errorf("store: spawn %s: %w", key, err)
	}
	attempt := newAttempt()
	out, err := s.spawnOnce(ctx, key, host, attempt)
	if err != nil && ambiguous(err) {
		out, err = s.settleSpawn(ctx, key, host, attempt, err)
	} else if err != nil {
		err = unavailable(err)
	}
	if err != nil {
		return ActorLocation{}, fmt.Errorf("store: spawn %s in %s: %w", key, host.HostRef, err)
	}
	if out.exists {
		return ActorLocation{}, fmt.Errorf("store: spawn %s: %w (in %s, generation %d)", key, sdk.ErrAlreadyExists, out.loc.Host, out.loc.Generation)
	}
	return out.loc, nil
}

// spawnOnce runs the spawn transaction once. It fails with ErrFenced when the host's fence
// failed and no record exists.
func (s *Etcd) spawnOnce(ctx context.Context, key ActorKey, host Host, attempt uint64) (spawned, error) {
	actorKey := s.keys.actor(key)
	stored := &storepb.ActorRecord{Host: host.proto(), Generation: 1, Attempt: attempt}
	val, err := encodeActor(stored)
	if err != nil {
		return spawned{}, err
	}
	cmps := append([]*pb.Compare{cmpCreateRevision(actorKey, 0)}, s.hostFence(host)...)
	resp, err := s.write(ctx, actorKey, cmps,
		[]*pb.RequestOp{opPut(actorKey, val), opPut(s.keys.hostActor(host.HostRef, key), "")},
		[]*pb.RequestOp{opGet(actorKey)})
	if err != nil {
		return spawned{}, err
	}
	if resp.Succeeded {
		return spawned{loc: locationAt(key, stored, resp.Revision, resp.Revision)}, nil
	}
	kvs, err := resp.read()
	if err != nil {
		return spawned{}, err
	}
	if len(kvs) == 0 {
		return spawned{}, fmt.Errorf("the owner fence of %s failed: %w", host.HostRef, ErrFenced)
	}
	cur, err := decodeActor(key, kvs[0])
	if err != nil {
		return spawned{}, err
	}
	// Only a settling retry meets its own attempt: the first txn landed after all.
	return spawned{loc: cur, exists: cur.Attempt != attempt}, nil
}

// settleSpawn resolves a spawn whose answer was lost: the attempt tells whether it was
// applied, and while no record exists it is sent again, which is idempotent. Like
// settleReserve it outlives a caller that has gone, and releases what it won for it.
func (s *Etcd) settleSpawn(ctx context.Context, key ActorKey, host Host, attempt uint64, cause error) (spawned, error) {
	bound := context.WithoutCancel(ctx)
	out, err := settle(bound, s, cause,
		func(ctx context.Context) (spawned, verdict, error) {
			cur, ok, err := s.readActor(ctx, key)
			switch {
			case err != nil:
				return spawned{}, 0, err
			case !ok:
				return spawned{}, verdictAgain, nil
			}
			return spawned{loc: cur, exists: cur.Attempt != attempt}, verdictKnown, nil
		},
		func(ctx context.Context) (spawned, bool, error) {
			out, err := s.spawnOnce(ctx, key, host, attempt)
			if errors.Is(err, ErrFenced) {
				return spawned{}, false, nil
			}
			return out, err == nil, err
		})
	if err != nil || out.exists || ctx.Err() == nil {
		return out, err
	}
	rctx, cancel := context.WithTimeout(bound, s.settle)
	defer cancel()
	if err := s.ReleaseActor(rctx, out.loc, host); err != nil {
		return spawned{}, fmt.Errorf("%w; releasing the record of the caller that had gone failed: %w", ctx.Err(), err)
	}
	return spawned{}, ctx.Err()
}

// LookupActor implements ActorStore.
func (s *Etcd) LookupActor(ctx context.Context, key ActorKey) (ActorLocation, error) {
	if err := key.Validate(); err != nil {
		return ActorLocation{}, err
	}
	loc, ok, err := s.readActor(ctx, key)
	switch {
	case err != nil:
		return ActorLocation{}, fmt.Errorf("store: lookup %s: %w", key, unavailable(err))
	case !ok:
		return ActorLocation{}, fmt.Errorf("store: lookup %s: %w", key, sdk.ErrNotFound)
	}
	return loc, nil
}

// MoveActor implements ActorStore.
//
// Fence: the Actor record is still at loc.Revision, from's owner fence holds (the mover is
// the source host's owner) and to's holds with to Ready as read (for a User or Instance
// target: its record's ModRevision and its owner's lease). One transaction, one etcd write,
// rewrites the record (host to, generation + 1) and moves the index key. Of two concurrent
// moves of one Actor the second fails with ErrFenced. A move whose answer was lost is settled
// by re-reading the record.
func (s *Etcd) MoveActor(ctx context.Context, loc ActorLocation, from, to Host) (ActorLocation, error) {
	if err := s.checkMember(loc, from); err != nil {
		return ActorLocation{}, fmt.Errorf("store: move %s: %w", loc.Key, err)
	}
	if err := to.validate(); err != nil {
		return ActorLocation{}, err
	}
	if err := to.ready(); err != nil {
		return ActorLocation{}, fmt.Errorf("store: move %s: %w", loc.Key, err)
	}
	if to.HostRef == from.HostRef {
		return ActorLocation{}, fmt.Errorf("store: move %s: %w: it is already a member of %s", loc.Key, sdk.ErrInvalidArgument, to.HostRef)
	}
	actorKey := s.keys.actor(loc.Key)
	next := &storepb.ActorRecord{Host: to.proto(), Generation: loc.Generation + 1, Attempt: loc.Attempt}
	val, err := encodeActor(next)
	if err != nil {
		return ActorLocation{}, err
	}
	cmps := append(append([]*pb.Compare{cmpModRevision(actorKey, loc.Revision)}, s.hostFence(from)...), s.hostFence(to)...)
	ops := []*pb.RequestOp{
		opPut(actorKey, val),
		opDelete(s.keys.hostActor(from.HostRef, loc.Key)),
		opPut(s.keys.hostActor(to.HostRef, loc.Key), ""),
	}
	moved, err := fencedWrite(ctx, s,
		func(ctx context.Context) (ActorLocation, bool, error) {
			resp, err := s.write(ctx, actorKey, cmps, ops, nil)
			if err != nil || !resp.Succeeded {
				return ActorLocation{}, false, err
			}
			return locationAt(loc.Key, next, loc.Incarnation, resp.Revision), true, nil
		},
		func(ctx context.Context) (ActorLocation, verdict, error) {
			cur, ok, err := s.readActor(ctx, loc.Key)
			switch {
			case err != nil:
				return ActorLocation{}, 0, err
			case ok && cur.Incarnation == loc.Incarnation && cur.Host == to.HostRef && cur.Generation == loc.Generation+1:
				return cur, verdictKnown, nil
			case ok && cur.Revision == loc.Revision:
				return ActorLocation{}, verdictAgain, nil
			}
			return ActorLocation{}, verdictFenced, nil
		})
	if err != nil {
		return ActorLocation{}, fmt.Errorf("store: move %s from %s to %s at revision %d: %w", loc.Key, from.HostRef, to.HostRef, loc.Revision, err)
	}
	return moved, nil
}

// checkMember checks that loc is a record of host and that host carries a fence.
func (s *Etcd) checkMember(loc ActorLocation, host Host) error {
	if err := loc.Key.Validate(); err != nil {
		return err
	}
	if err := host.validate(); err != nil {
		return err
	}
	if loc.Host != host.HostRef {
		return fmt.Errorf("%w: it is in %s, not %s", ErrNotMember, loc.Host, host.HostRef)
	}
	return nil
}

// ReleaseActor implements ActorStore.
//
// Fence: the record is still at loc.Revision and host's owner fence holds. One transaction
// deletes the record and its index key; one whose answer was lost is settled by re-reading.
func (s *Etcd) ReleaseActor(ctx context.Context, loc ActorLocation, host Host) error {
	if err := s.checkMember(loc, host); err != nil {
		return fmt.Errorf("store: release %s: %w", loc.Key, err)
	}
	if err := s.deleteActor(ctx, loc, s.hostFence(host)); err != nil {
		return fmt.Errorf("store: release %s from %s at revision %d: %w", loc.Key, host.HostRef, loc.Revision, err)
	}
	return nil
}

// deleteActor deletes the record at loc and its index key, fenced on loc.Revision and fence.
// A delete whose answer was lost is done when the key holds no record or another spawn's.
func (s *Etcd) deleteActor(ctx context.Context, loc ActorLocation, fence []*pb.Compare) error {
	actorKey := s.keys.actor(loc.Key)
	cmps := append([]*pb.Compare{cmpModRevision(actorKey, loc.Revision)}, fence...)
	ops := []*pb.RequestOp{opDelete(actorKey), opDelete(s.keys.hostActor(loc.Host, loc.Key))}
	_, err := fencedWrite(ctx, s,
		func(ctx context.Context) (struct{}, bool, error) {
			resp, err := s.write(ctx, actorKey, cmps, ops, nil)
			return struct{}{}, err == nil && resp.Succeeded, err
		},
		func(ctx context.Context) (struct{}, verdict, error) {
			cur, ok, err := s.readActor(ctx, loc.Key)
			if err != nil {
				return struct{}{}, 0, err
			}
			return struct{}{}, deletedVerdict(ok, cur.Incarnation, cur.Revision, loc.Incarnation, loc.Revision), nil
		})
	return err
}

// FenceActor implements ActorStore. A rewrite whose answer was lost is done when the record
// is as it was, at a later revision: a move, the only other rewrite, changes its host and
// generation.
func (s *Etcd) FenceActor(ctx context.Context, loc ActorLocation) (ActorLocation, error) {
	if err := loc.Key.Validate(); err != nil {
		return ActorLocation{}, err
	}
	actorKey := s.keys.actor(loc.Key)
	same := &storepb.ActorRecord{Host: loc.Host.proto(), Generation: loc.Generation, Attempt: loc.Attempt}
	val, err := encodeActor(same)
	if err != nil {
		return ActorLocation{}, err
	}
	cmps := []*pb.Compare{cmpModRevision(actorKey, loc.Revision)}
	ops := []*pb.RequestOp{opPut(actorKey, val)}
	fenced, err := fencedWrite(ctx, s,
		func(ctx context.Context) (ActorLocation, bool, error) {
			resp, err := s.write(ctx, actorKey, cmps, ops, nil)
			if err != nil || !resp.Succeeded {
				return ActorLocation{}, false, err
			}
			return locationAt(loc.Key, same, loc.Incarnation, resp.Revision), true, nil
		},
		func(ctx context.Context) (ActorLocation, verdict, error) {
			cur, ok, err := s.readActor(ctx, loc.Key)
			switch {
			case err != nil:
				return ActorLocation{}, 0, err
			case ok && cur.Revision == loc.Revision:
				return ActorLocation{}, verdictAgain, nil
			case ok && cur.Incarnation == loc.Incarnation && cur.Host == loc.Host && cur.Generation == loc.Generation && cur.Attempt == loc.Attempt:
				return cur, verdictKnown, nil
			}
			return ActorLocation{}, verdictFenced, nil
		})
	if err != nil {
		return ActorLocation{}, fmt.Errorf("store: fence %s at revision %d: %w", loc.Key, loc.Revision, err)
	}
	return fenced, nil
}

// HostActors implements ActorStore.
func (s *Etcd) HostActors(ctx context.Context, host HostRef) ([]ActorKey, error) {
	var out []ActorKey
	prefix := s.keys.hostActorsPrefix(host)
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(reclaimPage))
		if err != nil {
			return nil, fmt.Errorf("store: list the Actors of %s: %w", host, unavailable(err))
		}
		for _, kv := range resp.Kvs {
			if key, ok := parseHostActor(prefix, string(kv.Key)); ok {
				out = append(out, key)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
