package store

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// fencedPut is the transaction of one of the two writes every activation makes, the
// reservation and the Ready commit: put a Spot record while the record is at a revision
// (compared as U) and the owner's node key is on the owner's lease. Its compares, ops and
// their oneof members are allocated as one, and its keys and value as one more, which the
// compares and ops share: built from the separate builders, the two writes were a quarter of
// an activation's allocations.
type fencedPut[U any] struct {
	txn      pb.TxnRequest
	cmps     [2]*pb.Compare
	then     [1]*pb.RequestOp
	revision compareOf[U]
	lease    compareOf[pb.Compare_Lease]
	put      opOf[pb.RequestOp_RequestPut, pb.PutRequest]
}

// reservationWrite is a fencedPut on no record (create revision 0) that reads the record when
// its fence fails.
type reservationWrite struct {
	fencedPut[pb.Compare_CreateRevision]
	els [1]*pb.RequestOp
	get opOf[pb.RequestOp_RequestRange, pb.RangeRequest]
}

// reservationTxn puts rec at spotKey if there is no record there and the owner's node key is
// on its lease, and reads the record otherwise: what Reserve writes.
func (s *Etcd) reservationTxn(spotKey string, owner Owner, rec *storepb.SpotRecord) (*pb.TxnRequest, error) {
	key, nodeKey, value, err := s.recordBytes(spotKey, owner.Node, rec)
	if err != nil {
		return nil, err
	}
	x := new(reservationWrite)
	x.revision.c = pb.Compare{Key: key, Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &x.revision.u}
	x.build(key, nodeKey, owner.Lease, value)
	x.get.req.Key = key
	x.get.w.RequestRange = &x.get.req
	x.get.op.Request = &x.get.w
	x.els[0] = &x.get.op
	x.txn.Failure = x.els[:]
	return &x.txn, nil
}

// readyTxn puts rec at spotKey if the record is still at revision and the owner's node key is
// on its lease: what CommitReady writes, fenced as every owner's write is (ownerFence).
func (s *Etcd) readyTxn(spotKey string, revision int64, owner Owner, rec *storepb.SpotRecord) (*pb.TxnRequest, error) {
	key, nodeKey, value, err := s.recordBytes(spotKey, owner.Node, rec)
	if err != nil {
		return nil, err
	}
	x := new(fencedPut[pb.Compare_ModRevision])
	x.revision.u.ModRevision = revision
	x.revision.c = pb.Compare{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &x.revision.u}
	x.build(key, nodeKey, owner.Lease, value)
	return &x.txn, nil
}

// build completes x once its revision compare on key is set: the lease compare on nodeKey, and
// the put of value at key.
func (x *fencedPut[U]) build(key, nodeKey []byte, lease int64, value []byte) {
	x.lease.u.Lease = lease
	x.lease.c = pb.Compare{Key: nodeKey, Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &x.lease.u}
	x.cmps = [2]*pb.Compare{&x.revision.c, &x.lease.c}
	x.put.req.Key, x.put.req.Value = key, value
	x.put.w.RequestPut = &x.put.req
	x.put.op.Request = &x.put.w
	x.then[0] = &x.put.op
	x.txn = pb.TxnRequest{Compare: x.cmps[:], Success: x.then[:]}
}

// recordBytes is spotKey, the node key of node and rec's encoding, in one allocation.
func (s *Etcd) recordBytes(spotKey string, node sdk.NodeID, rec *storepb.SpotRecord) (key, nodeKey, value []byte, err error) {
	// A record's fields other than its owner take at most this many bytes encoded: seven tags,
	// four varints of up to ten bytes, two enums and a kind, and the owner's length.
	const recordRoom = 72
	escaped := escape(string(node))
	buf := make([]byte, 0, len(spotKey)+len(s.keys.root)+len(nodesDir)+len(escaped)+len(rec.Owner)+recordRoom)
	buf = append(buf, spotKey...)
	buf = append(append(append(buf, s.keys.root...), nodesDir...), escaped...) // keys.node(node)
	keysEnd := len(buf)
	if buf, err = appendRecord(buf, rec); err != nil {
		return nil, nil, nil, err
	}
	// Sliced after the last append, which would have moved a buffer too small; full slices, so
	// that nothing appended to one reaches the next.
	return buf[:len(spotKey):len(spotKey)], buf[len(spotKey):keysEnd:keysEnd], buf[keysEnd:len(buf):len(buf)], nil
}
