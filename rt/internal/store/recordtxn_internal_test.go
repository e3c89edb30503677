package store

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// TestB5_RecordTxnsAreTheFencedWritesTheyName: the reservation and the Ready commit, built as
// one allocation, are the transactions the separate builders make of the same fence: no record
// (create revision 0) or the reservation's revision, and the owner's node key on the owner's
// lease; then the record, else (reserving) a read of it. Meshes and node IDs that need
// escaping, and records longer than the room set aside for them, included.
func TestB5_RecordTxnsAreTheFencedWritesTheyName(t *testing.T) {
	for _, c := range []struct {
		mesh string
		node sdk.NodeID
	}{
		{"mesh", "node-1"},
		{"m/x%y", "a/b%c"},
		{"mesh", sdk.NodeID(strings.Repeat("/", 1024))},
		{"mesh", sdk.NodeID(strings.Repeat("n", 1024))},
	} {
		s := &Etcd{keys: newKeys(c.mesh)}
		owner := Owner{Node: c.node, Lease: 0x694d8a1f3c2b1a05}
		spotKey := s.keys.spot(SpotKey{Type: "Room", ID: "r/1"})
		creating := &storepb.SpotRecord{Phase: storepb.Phase_PHASE_CREATING, Owner: string(c.node), OwnerLease: owner.Lease,
			Attempt: math.MaxUint64, Kind: uint32(sdk.KindInstance)}
		ready := &storepb.SpotRecord{Phase: storepb.Phase_PHASE_READY, Owner: string(c.node), OwnerLease: owner.Lease,
			Attempt: math.MaxUint64, Generation: 1, Kind: uint32(sdk.KindInstance)}
		creatingValue, err := encodeRecord(creating)
		require.NoError(t, err)
		readyValue, err := encodeRecord(ready)
		require.NoError(t, err)

		reserve, err := s.reservationTxn(spotKey, owner, creating)
		require.NoError(t, err)
		want := &pb.TxnRequest{
			Compare: []*pb.Compare{cmpCreateRevision(spotKey, 0), cmpLease(s.keys.node(c.node), owner.Lease, true)},
			Success: []*pb.RequestOp{opPut(spotKey, creatingValue)},
			Failure: []*pb.RequestOp{opGet(spotKey)},
		}
		assert.True(t, proto.Equal(want, reserve), "reservation on %q of %.20q: got %v, want %v", c.mesh, c.node, reserve, want)
		assert.Equal(t, appendTxnRequest(nil, want), appendTxnRequest(nil, reserve), "reservation on %q of %.20q: its encoding", c.mesh, c.node)

		commit, err := s.readyTxn(spotKey, math.MaxInt64, owner, ready)
		require.NoError(t, err)
		want = &pb.TxnRequest{Compare: s.ownerFence(spotKey, math.MaxInt64, owner), Success: []*pb.RequestOp{opPut(spotKey, readyValue)}}
		assert.True(t, proto.Equal(want, commit), "Ready commit on %q of %.20q: got %v, want %v", c.mesh, c.node, commit, want)
		assert.Equal(t, appendTxnRequest(nil, want), appendTxnRequest(nil, commit), "Ready commit on %q of %.20q: its encoding", c.mesh, c.node)

		// The keys and the value share a buffer, and their slices are full: an append to one
		// copies rather than writes over the next. So are the lists of compares and ops.
		for _, txn := range []*pb.TxnRequest{reserve, commit} {
			full := map[string][]byte{"key": txn.Compare[0].Key, "node key": txn.Compare[1].Key,
				"put key": txn.Success[0].GetRequestPut().Key, "value": txn.Success[0].GetRequestPut().Value}
			if len(txn.Failure) > 0 {
				full["read key"] = txn.Failure[0].GetRequestRange().Key
			}
			for name, b := range full {
				assert.Equal(t, len(b), cap(b), "%s of %v", name, txn)
			}
			assert.Equal(t, len(txn.Compare), cap(txn.Compare))
			assert.Equal(t, len(txn.Success), cap(txn.Success))
			assert.Equal(t, len(txn.Failure), cap(txn.Failure))
		}
	}
}

// TestRecordTxnsAllocateTwice: a reservation or a Ready commit of an owner whose node ID needs
// no escaping is two allocations, its messages and its bytes.
func TestRecordTxnsAllocateTwice(t *testing.T) {
	s := &Etcd{keys: newKeys("mesh")}
	owner := Owner{Node: "node-1", Lease: 0x694d8a1f3c2b1a05}
	spotKey := s.keys.spot(SpotKey{Type: "Room", ID: "r-1"})
	rec := &storepb.SpotRecord{Phase: storepb.Phase_PHASE_READY, Owner: "node-1", OwnerLease: owner.Lease, Attempt: math.MaxUint64, Generation: 1}
	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() { _, _ = s.reservationTxn(spotKey, owner, rec) }))
	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() { _, _ = s.readyTxn(spotKey, 7, owner, rec) }))
}
