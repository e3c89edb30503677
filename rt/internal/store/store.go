// Package store is the Location Store (digest glossary; DESIGN §4): the authority that nodes
// share to agree on Spot creation and on each Spot's owner and state, implemented on etcd.
//
// Every write that decides ownership is an etcd transaction fenced by a revision: creation on
// CreateRevision == 0 (B5), Ready on the reservation's revision (B7), release on the record's
// revision (D3). Records are not bound to their owner's lease, so authority survives the owner
// (B3); the owner's lease-bound node descriptor tells whether the owner is still alive, so a
// lookup answers one of Missing, Creating, Ready or Unavailable (B2).
//
// A write whose answer is lost (a timeout, a leader change, a lost connection) is never
// reported as failed on a guess: the store re-reads the record until it knows whether the
// write was applied, and answers ErrOutcomeUnknown only when it cannot tell in time. Every
// error caused by etcd being unreachable or slow wraps sdk.ErrStoreUnavailable.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// Store is the Location Store of one mesh.
type Store interface {
	ActorStore
	SpotMover
	// Register puts the node's descriptor under nodes/<rid> on a fresh owner lease and keeps
	// the lease alive until the Registration is closed.
	Register(ctx context.Context, desc *storepb.NodeDescriptor, opts LeaseOptions, channels ...ChannelMembership) (*Registration, error)
	// Reserve takes the creation authority of key for owner if no record exists (B5). The
	// winner gets a Reservation; every loser gets the current record's Resolution. A
	// reservation whose answer was lost is settled even after ctx ends, for a bounded time, so
	// that a failed Reserve leaves no record.
	Reserve(ctx context.Context, key SpotKey, kind sdk.SpotKind, owner Owner) (ReserveResult, error)
	// CommitReady turns the reservation into a Ready record (generation + 1). It fails with
	// ErrFenced when the record is no longer the reservation's or the owner lease has ended,
	// and with ErrOutcomeUnknown when the answer was lost and ctx ended before a re-read told.
	CommitReady(ctx context.Context, r Reservation) (Record, error)
	// Lookup reads key linearizably and resolves it to exactly one State (B2).
	Lookup(ctx context.Context, key SpotKey) (Resolution, error)
	// WaitChange waits until prev's record changes after prev.Revision, or its owner's lease
	// ends, then returns a fresh Lookup. Watches only wake the waiter; the answer is always a
	// linearizable read.
	WaitChange(ctx context.Context, prev Resolution) (Resolution, error)
	// BeginRelease marks the owner's record Releasing with tag (fenced on rec.Revision and the
	// owner lease): no new route is given out while the closing callback runs (D3, D4). It
	// returns the record as stored, fails with ErrFenced when the fence no longer holds, and
	// with ErrOutcomeUnknown when the answer was lost and ctx ended before a re-read told.
	BeginRelease(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag) (Record, error)
	// FinishRelease deletes the owner's record (fenced on rec.Revision and the owner lease),
	// and the Actors it holds in the same transaction (in several when they are many): the
	// authority is released and the key is Missing (B3). Its errors are BeginRelease's.
	FinishRelease(ctx context.Context, key SpotKey, rec Record) error
	// Release is BeginRelease then FinishRelease, for a release with no callback in between.
	Release(ctx context.Context, key SpotKey, rec Record, tag ReleaseTag) error
	// Reclaim releases, as the formal lifecycle operation OwnerLost, every record whose owner
	// lease has ended (B3, B8, DESIGN §4 failover policy). by, when set, is the reclaiming
	// node: it claims each dead registration on its own lease so that one node does the work.
	Reclaim(ctx context.Context, by Owner) (ReclaimStats, error)
	// Owned calls fn with the key of every record owner holds (a scan of every record).
	Owned(ctx context.Context, owner Owner, fn func(SpotKey)) error
	// Close releases the store's resources. It does not close a client it was given.
	Close() error
}

// SpotKey addresses one User or Instance Spot: its stable type name and its ID.
type SpotKey struct {
	Type string
	ID   string
}

// Validate checks both parts with the rules of sdk.ValidateID.
func (k SpotKey) Validate() error {
	if err := sdk.ValidateTypeName(k.Type); err != nil {
		return err
	}
	return sdk.ValidateSpotID(k.ID)
}

func (k SpotKey) String() string { return fmt.Sprintf("%s/%q", k.Type, k.ID) }

// Owner is one registration of a node: its ID and its owner lease.
type Owner struct {
	Node  sdk.NodeID
	Lease int64
}

// State is the resolver's closed set of answers for one key (B2).
type State uint8

const (
	// StateMissing: no authority exists. It goes to the creation coordinator.
	StateMissing State = iota + 1
	// StateCreating: a creator holds the authority. It goes to the waiter of that attempt.
	StateCreating
	// StateReady: a live owner committed the object. It goes to route admission.
	StateReady
	// StateUnavailable: the authority exists but its owner cannot be used now. It goes to the
	// terminal completion adapter; Evidence says why.
	StateUnavailable
)

var stateNames = [...]string{"", "Missing", "Creating", "Ready", "Unavailable"}

func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Evidence says why a record is Unavailable (B2, D5).
type Evidence uint8

const (
	// EvidenceNone: the state is not Unavailable.
	EvidenceNone Evidence = iota
	// EvidenceOwnerLeaseEnded: the owner's lease no longer exists. Only a formal release
	// (Reclaim) makes the key Missing again (B3, K5).
	EvidenceOwnerLeaseEnded
	// EvidenceReleasing: the live owner is releasing the authority; the key becomes Missing when
	// it finishes (D4).
	EvidenceReleasing
)

func (e Evidence) String() string {
	switch e {
	case EvidenceNone:
		return "None"
	case EvidenceOwnerLeaseEnded:
		return "OwnerLeaseEnded"
	case EvidenceReleasing:
		return "Releasing"
	}
	return fmt.Sprintf("Evidence(%d)", uint8(e))
}

// Phase is the stored phase of a record.
type Phase = storepb.Phase

// The stored phases.
const (
	PhaseCreating  = storepb.Phase_PHASE_CREATING
	PhaseReady     = storepb.Phase_PHASE_READY
	PhaseReleasing = storepb.Phase_PHASE_RELEASING
)

// ReleaseTag names the formal lifecycle operation that released a record (D5).
type ReleaseTag = storepb.ReleaseTag

// The release tags.
const (
	ReleaseNone           = storepb.ReleaseTag_RELEASE_TAG_UNSPECIFIED
	ReleaseExplicitClose  = storepb.ReleaseTag_RELEASE_TAG_EXPLICIT_CLOSE
	ReleaseIdle           = storepb.ReleaseTag_RELEASE_TAG_IDLE_RELEASE
	ReleaseOwnerLost      = storepb.ReleaseTag_RELEASE_TAG_OWNER_LOST
	ReleaseCreationFailed = storepb.ReleaseTag_RELEASE_TAG_CREATION_FAILED
	ReleaseShutdown       = storepb.ReleaseTag_RELEASE_TAG_SHUTDOWN
)

// Record is a stored Spot record with its etcd revisions.
type Record struct {
	Kind       sdk.SpotKind
	Phase      Phase
	Owner      Owner
	Attempt    uint64
	Generation uint64
	ReleaseTag ReleaseTag
	// Incarnation is the record's etcd CreateRevision: it differs for every re-creation of the
	// same key and grows with each.
	Incarnation int64
	// Revision is the record's etcd ModRevision: the fence of the next write.
	Revision int64
}

// Resolution is the answer to one lookup: exactly one State with the evidence it carries (B2).
type Resolution struct {
	Key   SpotKey
	State State
	// Revision is the store revision the answer was read at (for Missing: the lookup version).
	Revision int64
	// Record is the stored record; zero when Missing.
	Record Record
	// Evidence is set when Unavailable.
	Evidence Evidence
	// ReleasedBy is set on a Missing answer of WaitChange that observed the release which
	// removed the record: the formal lifecycle operation that did it (D5).
	ReleasedBy ReleaseTag
}

// Reservation is the creation authority held by one attempt (B5).
type Reservation struct {
	Key     SpotKey
	Kind    sdk.SpotKind
	Owner   Owner
	Attempt uint64
	// Revision is the Creating record's ModRevision: the fence of CommitReady.
	Revision    int64
	Incarnation int64
}

// ReserveResult is the outcome of Reserve: Won with a Reservation, or the current record.
type ReserveResult struct {
	Won         bool
	Reservation Reservation
	// Current is the existing record's resolution when the reservation was lost.
	Current Resolution
}

// ReclaimStats counts what one Reclaim pass did.
type ReclaimStats struct {
	// DeadIncarnations is the number of ended registrations reclaimed.
	DeadIncarnations int
	// Scanned is the number of records examined.
	Scanned int
	// Released is the number of records released with OwnerLost.
	Released int
	// ActorsScanned is the number of Actor records examined.
	ActorsScanned int
	// ActorsReleased is the number of Actor records deleted because their host was gone.
	ActorsReleased int
}

// NodeIDInUseError says that a live registration of another process holds a node's ID. It
// is ErrNodeIDInUse.
type NodeIDInUseError struct {
	Node sdk.NodeID
	// Lease is the owner lease of the registration that holds the ID.
	Lease int64
	// Endpoint is the address its peers dial, when its descriptor names one.
	Endpoint string
	// TTL is the time to live its lease was granted, when etcd told it: a registration that
	// still holds the ID after it has kept its lease alive.
	TTL time.Duration
}

func (e *NodeIDInUseError) Error() string {
	at := ""
	if e.Endpoint != "" {
		at = ", reached at " + e.Endpoint
	}
	return fmt.Sprintf("store: node ID %s is registered by another live process (owner lease %x%s)", e.Node, e.Lease, at)
}

// Unwrap makes the error ErrNodeIDInUse.
func (e *NodeIDInUseError) Unwrap() error { return ErrNodeIDInUse }

// Store errors.
var (
	// ErrFenced: the write's fence no longer holds (the record changed, or the owner lease
	// ended); nothing was written.
	ErrFenced = errors.New("store: fenced: the record or the owner lease changed")
	// ErrNodeIDInUse: another live node is registered with the same ID. It comes as a
	// *NodeIDInUseError when another process holds the ID.
	ErrNodeIDInUse = errors.New("store: node ID in use by a live node")
	// ErrCorruptRecord: a stored value could not be decoded.
	ErrCorruptRecord = errors.New("store: corrupt record")
	// ErrOutcomeUnknown: a write's answer was lost (a timeout, a leader change, a lost
	// connection) and re-reading the record could not tell in time whether it was applied: the
	// record may or may not have changed. Look the key up again later to repair. It comes
	// wrapped with sdk.ErrStoreUnavailable unless the caller cancelled.
	ErrOutcomeUnknown = errors.New("store: outcome of the write unknown")
	// ErrTooManyMemberships: the registration holds as many channel memberships as a later
	// registration's transaction writes; nothing was written. It holds them until it ends.
	ErrTooManyMemberships = errors.New("store: the registration holds the most channel memberships its transaction writes")
	// ErrMembershipsJoining: joins under way hold the slots of the membership bound that the
	// registration does not; nothing was written. A join that fails frees its slot, so a
	// later try may succeed: it wraps sdk.ErrStoreUnavailable.
	ErrMembershipsJoining = fmt.Errorf("%w: store: joins under way hold the remaining channel memberships of the registration", sdk.ErrStoreUnavailable)
)
