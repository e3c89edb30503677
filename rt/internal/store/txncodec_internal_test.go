package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var deterministic = proto.MarshalOptions{Deterministic: true}

// readThroughCodec reads a TxnResponse's encoding as the store does: the codec reads the reply,
// then its results are read on demand (txnResult.Responses). It returns the whole message so
// read, after checking that what the reply read at once (its header, revision and outcome)
// agrees with it.
func readThroughCodec(b []byte) (*etcdserverpb.TxnResponse, error) {
	reply := &txnReply{}
	if err := etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, reply); err != nil {
		return nil, err
	}
	whole := &etcdserverpb.TxnResponse{}
	if err := readTxnResponse(reply.body, whole, nil, 0); err != nil {
		return nil, err
	}
	if reply.header != (whole.Header != nil) || reply.Revision != whole.GetHeader().GetRevision() || reply.Succeeded != whole.Succeeded {
		return nil, fmt.Errorf("the reply read header %v, revision %d, succeeded %v; the whole message %v",
			reply.header, reply.Revision, reply.Succeeded, whole)
	}
	results, err := reply.result().Responses()
	if err != nil {
		return nil, err
	}
	if !slices.EqualFunc(results, whole.Responses, func(a, b *etcdserverpb.ResponseOp) bool { return proto.Equal(a, b) }) {
		return nil, fmt.Errorf("the results read on demand differ from the whole message's: %v", results)
	}
	return whole, nil
}

// randomTxnRequest is a transaction with every kind of compare and op, each field set or left
// zero at random, nested up to depth more levels.
func randomTxnRequest(r *rand.Rand, depth int) *etcdserverpb.TxnRequest {
	bs := func() []byte {
		if r.IntN(3) == 0 {
			return nil
		}
		b := make([]byte, r.IntN(300))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	i64 := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int64()
		default:
			return r.Int64N(1 << uint(r.IntN(62)+1))
		}
	}
	flag := func() bool { return r.IntN(2) == 0 }
	txn := &etcdserverpb.TxnRequest{}
	for range r.IntN(4) {
		c := &etcdserverpb.Compare{Result: etcdserverpb.Compare_CompareResult(r.IntN(5) - 1),
			Target: etcdserverpb.Compare_CompareTarget(r.IntN(5)), Key: bs(), RangeEnd: bs()}
		switch r.IntN(6) {
		case 0:
			c.TargetUnion = &etcdserverpb.Compare_Version{Version: i64()}
		case 1:
			c.TargetUnion = &etcdserverpb.Compare_CreateRevision{CreateRevision: i64()}
		case 2:
			c.TargetUnion = &etcdserverpb.Compare_ModRevision{ModRevision: i64()}
		case 3:
			c.TargetUnion = &etcdserverpb.Compare_Value{Value: bs()}
		case 4:
			c.TargetUnion = &etcdserverpb.Compare_Lease{Lease: i64()}
		}
		txn.Compare = append(txn.Compare, c)
	}
	op := func() *etcdserverpb.RequestOp {
		switch r.IntN(5) {
		case 0:
			return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{
				Key: bs(), RangeEnd: bs(), Limit: i64(), Revision: i64(),
				SortOrder: etcdserverpb.RangeRequest_SortOrder(r.IntN(3)), SortTarget: etcdserverpb.RangeRequest_SortTarget(r.IntN(5)),
				Serializable: flag(), KeysOnly: flag(), CountOnly: flag(), MinModRevision: i64(), MaxModRevision: i64(),
				MinCreateRevision: i64(), MaxCreateRevision: i64()}}}
		case 1:
			return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{
				Key: bs(), Value: bs(), Lease: i64(), PrevKv: flag(), IgnoreValue: flag(), IgnoreLease: flag()}}}
		case 2:
			return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{
				Key: bs(), RangeEnd: bs(), PrevKv: flag()}}}
		case 3:
			if depth > 0 {
				return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestTxn{RequestTxn: randomTxnRequest(r, depth-1)}}
			}
		}
		return &etcdserverpb.RequestOp{}
	}
	for range r.IntN(4) {
		txn.Success = append(txn.Success, op())
	}
	for range r.IntN(3) {
		txn.Failure = append(txn.Failure, op())
	}
	return txn
}

// The transactions the store writes, built as it builds them.
func storeTxns() []*etcdserverpb.TxnRequest {
	reserve := &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{cmpCreateRevision("mesh/spots/T/a", 0), cmpLease("mesh/nodes/n1", 7587, true)},
		Success: []*etcdserverpb.RequestOp{opPutLease("mesh/spots/T/a", "record", 7587)},
		Failure: []*etcdserverpb.RequestOp{opGet("mesh/spots/T/a")},
	}
	ready := &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{cmpModRevision("mesh/spots/T/a", 42), cmpValue("mesh/spots/T/a", ""), cmpLease("k", 0, false)},
		Success: []*etcdserverpb.RequestOp{opPut("mesh/spots/T/a", "ready"), opDelete("mesh/x")},
	}
	return []*etcdserverpb.TxnRequest{
		{},
		reserve,
		ready,
		{Success: []*etcdserverpb.RequestOp{opTxn(reserve), opTxn(ready), opTxn(&etcdserverpb.TxnRequest{})}},
	}
}

// TestTxnCodecWritesWhatProtobufWrites: every transaction the codec writes is byte for byte
// protobuf's encoding of it, of the size it computed, directly and through gRPC's buffers.
func TestTxnCodecWritesWhatProtobufWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	txns := storeTxns()
	for range 3000 {
		txns = append(txns, randomTxnRequest(r, 2))
	}
	// Nil messages, elements and oneof members, which protobuf writes as empty or unset.
	txns = append(txns, nil, &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{nil, {Key: []byte("k"), TargetUnion: (*etcdserverpb.Compare_Version)(nil)},
			{TargetUnion: (*etcdserverpb.Compare_CreateRevision)(nil)}, {TargetUnion: (*etcdserverpb.Compare_ModRevision)(nil)},
			{TargetUnion: (*etcdserverpb.Compare_Value)(nil)}, {TargetUnion: (*etcdserverpb.Compare_Lease)(nil)},
			{TargetUnion: &etcdserverpb.Compare_Value{}}},
		Success: []*etcdserverpb.RequestOp{nil, {}, opTxn(nil),
			{Request: (*etcdserverpb.RequestOp_RequestRange)(nil)}, {Request: (*etcdserverpb.RequestOp_RequestPut)(nil)},
			{Request: (*etcdserverpb.RequestOp_RequestDeleteRange)(nil)}, {Request: (*etcdserverpb.RequestOp_RequestTxn)(nil)},
			{Request: &etcdserverpb.RequestOp_RequestRange{}}, {Request: &etcdserverpb.RequestOp_RequestPut{}},
			{Request: &etcdserverpb.RequestOp_RequestDeleteRange{}}},
		Failure: []*etcdserverpb.RequestOp{opTxn(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{nil}})},
	})
	big := &etcdserverpb.TxnRequest{}
	for range 2000 {
		big.Success = append(big.Success, opTxn(storeTxns()[1]))
	}
	txns = append(txns, big)
	for i, txn := range txns {
		want, err := deterministic.Marshal(txn)
		require.NoError(t, err)
		require.Equal(t, len(want), sizeTxnRequest(txn), "size of transaction %d", i)
		require.Equal(t, string(want), string(appendTxnRequest(nil, txn)), "encoding of transaction %d", i)
		data, err := etcdCodec.Marshal(txn)
		require.NoError(t, err)
		require.Equal(t, string(want), string(data.Materialize()), "gRPC encoding of transaction %d", i)
		data.Free()
	}
	assert.False(t, mem.IsBelowBufferPoolingThreshold(sizeTxnRequest(big)), "the pooled path is covered")
}

// randomTxnResponse is a response with every kind of result, nested up to depth more levels.
func randomTxnResponse(r *rand.Rand, depth int) *etcdserverpb.TxnResponse {
	bs := func() []byte {
		if r.IntN(3) == 0 {
			return nil
		}
		return []byte("key-" + string(rune('a'+r.IntN(26))))
	}
	header := func() *etcdserverpb.ResponseHeader {
		if r.IntN(3) == 0 {
			return nil
		}
		return &etcdserverpb.ResponseHeader{ClusterId: r.Uint64(), MemberId: r.Uint64(), Revision: r.Int64N(1 << 40), RaftTerm: r.Uint64N(100)}
	}
	kv := func() *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: bs(), CreateRevision: r.Int64N(1 << 30), ModRevision: r.Int64N(1 << 30),
			Version: r.Int64N(9), Value: bs(), Lease: r.Int64()}
	}
	resp := &etcdserverpb.TxnResponse{Header: header(), Succeeded: r.IntN(2) == 0}
	for range r.IntN(5) {
		op := &etcdserverpb.ResponseOp{}
		switch r.IntN(5) {
		case 0:
			rr := &etcdserverpb.RangeResponse{Header: header(), More: r.IntN(2) == 0, Count: r.Int64N(5)}
			for range r.IntN(3) {
				rr.Kvs = append(rr.Kvs, kv())
			}
			op.Response = &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: rr}
		case 1:
			pr := &etcdserverpb.PutResponse{Header: header()}
			if r.IntN(2) == 0 {
				pr.PrevKv = kv()
			}
			op.Response = &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: pr}
		case 2:
			dr := &etcdserverpb.DeleteRangeResponse{Header: header(), Deleted: r.Int64N(4)}
			for range r.IntN(3) {
				dr.PrevKvs = append(dr.PrevKvs, kv())
			}
			op.Response = &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}
		case 3:
			if depth > 0 {
				op.Response = &etcdserverpb.ResponseOp_ResponseTxn{ResponseTxn: randomTxnResponse(r, depth-1)}
			}
		}
		resp.Responses = append(resp.Responses, op)
	}
	return resp
}

// TestTxnCodecReadsWhatProtobufWrites: a response read through the codec equals the one
// protobuf wrote, and appending to a key it read leaves the value after it alone.
func TestTxnCodecReadsWhatProtobufWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		want := randomTxnResponse(r, 2)
		b, err := deterministic.Marshal(want)
		require.NoError(t, err)
		got, err := readThroughCodec(b)
		require.NoError(t, err)
		require.True(t, proto.Equal(want, got), "response %d:\nwant %v\n got %v", i, want, got)
	}

	want := &etcdserverpb.TxnResponse{Responses: []*etcdserverpb.ResponseOp{{Response: &etcdserverpb.ResponseOp_ResponseRange{
		ResponseRange: &etcdserverpb.RangeResponse{Kvs: []*mvccpb.KeyValue{{Key: []byte("key"), Value: []byte("value")}}}}}}}
	b, err := deterministic.Marshal(want)
	require.NoError(t, err)
	got, err := readThroughCodec(b)
	require.NoError(t, err)
	read := got.Responses[0].GetResponseRange().Kvs[0]
	assert.Equal(t, len(read.Key), cap(read.Key), "a key's capacity ends with it")
	assert.Equal(t, len(read.Value), cap(read.Value), "a value's capacity ends with it")
	_ = append(read.Key, "XXXXX"...) // within the seven bytes that follow the key
	assert.Equal(t, "value", string(read.Value))
}

// TestTxnCodecLeavesOtherMessagesToProtobuf: a message other than a transaction is written and
// read by gRPC's protobuf codec.
func TestTxnCodecLeavesOtherMessagesToProtobuf(t *testing.T) {
	req := &etcdserverpb.RangeRequest{Key: []byte("k"), Limit: 3}
	data, err := etcdCodec.Marshal(req)
	require.NoError(t, err)
	want, err := encoding.GetCodecV2(grpcproto.Name).Marshal(req)
	require.NoError(t, err)
	assert.Equal(t, want.Materialize(), data.Materialize())

	resp := &etcdserverpb.RangeResponse{Count: 4, Kvs: []*mvccpb.KeyValue{{Key: []byte("k")}}}
	b, err := deterministic.Marshal(resp)
	require.NoError(t, err)
	got := &etcdserverpb.RangeResponse{}
	require.NoError(t, etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got))
	assert.True(t, proto.Equal(resp, got))
	assert.Equal(t, grpcproto.Name, etcdCodec.Name())
}

// TestTxnCodecKnowsEveryFieldOfEtcdsMessages: the codec writes and reads every field of the
// messages it handles. A field etcd adds fails here, rather than being lost.
func TestTxnCodecKnowsEveryFieldOfEtcdsMessages(t *testing.T) {
	// Each field as the codec writes or reads it: number, kind, and whether it is repeated or
	// a oneof's member.
	type field struct {
		num      protoreflect.FieldNumber
		kind     protoreflect.Kind
		repeated bool
		oneof    bool
	}
	const (
		b, m, i64, u64, en, bo = protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.Int64Kind,
			protoreflect.Uint64Kind, protoreflect.EnumKind, protoreflect.BoolKind
	)
	known := map[proto.Message][]field{
		&etcdserverpb.TxnRequest{}: {{1, m, true, false}, {2, m, true, false}, {3, m, true, false}},
		&etcdserverpb.Compare{}: {{1, en, false, false}, {2, en, false, false}, {3, b, false, false}, {4, i64, false, true},
			{5, i64, false, true}, {6, i64, false, true}, {7, b, false, true}, {8, i64, false, true}, {64, b, false, false}},
		&etcdserverpb.RequestOp{}: {{1, m, false, true}, {2, m, false, true}, {3, m, false, true}, {4, m, false, true}},
		&etcdserverpb.RangeRequest{}: {{1, b, false, false}, {2, b, false, false}, {3, i64, false, false}, {4, i64, false, false},
			{5, en, false, false}, {6, en, false, false}, {7, bo, false, false}, {8, bo, false, false}, {9, bo, false, false},
			{10, i64, false, false}, {11, i64, false, false}, {12, i64, false, false}, {13, i64, false, false}},
		&etcdserverpb.PutRequest{}: {{1, b, false, false}, {2, b, false, false}, {3, i64, false, false}, {4, bo, false, false},
			{5, bo, false, false}, {6, bo, false, false}},
		&etcdserverpb.DeleteRangeRequest{}:  {{1, b, false, false}, {2, b, false, false}, {3, bo, false, false}},
		&etcdserverpb.TxnResponse{}:         {{1, m, false, false}, {2, bo, false, false}, {3, m, true, false}},
		&etcdserverpb.ResponseHeader{}:      {{1, u64, false, false}, {2, u64, false, false}, {3, i64, false, false}, {4, u64, false, false}},
		&etcdserverpb.ResponseOp{}:          {{1, m, false, true}, {2, m, false, true}, {3, m, false, true}, {4, m, false, true}},
		&etcdserverpb.RangeResponse{}:       {{1, m, false, false}, {2, m, true, false}, {3, bo, false, false}, {4, i64, false, false}},
		&etcdserverpb.PutResponse{}:         {{1, m, false, false}, {2, m, false, false}},
		&etcdserverpb.DeleteRangeResponse{}: {{1, m, false, false}, {2, i64, false, false}, {3, m, true, false}},
		&mvccpb.KeyValue{}: {{1, b, false, false}, {2, i64, false, false}, {3, i64, false, false}, {4, i64, false, false},
			{5, b, false, false}, {6, i64, false, false}},
	}
	for msg, want := range known {
		fields := msg.ProtoReflect().Descriptor().Fields()
		var got []field
		for i := range fields.Len() {
			fd := fields.Get(i)
			got = append(got, field{fd.Number(), fd.Kind(), fd.IsList(), fd.ContainingOneof() != nil})
		}
		slices.SortFunc(got, func(x, y field) int { return int(x.num) - int(y.num) })
		assert.Equal(t, want, got, "fields of %s", msg.ProtoReflect().Descriptor().FullName())
	}
}

// withoutUnknown drops the unknown fields of m and of every message in it: the codec skips
// them, as it has no use for them.
func withoutUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				withoutUnknown(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			withoutUnknown(v.Message())
		}
		return true
	})
}

// FuzzTxnCodecReadsAsProtobufReads: of any bytes, the codec refuses what protobuf refuses, and
// reads the rest as protobuf does, but for the unknown fields it skips.
func FuzzTxnCodecReadsAsProtobufReads(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		b, err := deterministic.Marshal(randomTxnResponse(r, 2))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0x1a, 0x02, 0x22, 0x00, 0x1a, 0x02, 0x0a, 0x00})                               // two ResponseOps
	f.Add([]byte{0x1a, 0x04, 0x22, 0x00, 0x0a, 0x00})                                           // a member, replaced by another
	f.Add([]byte{0x1a, 0x08, 0x0a, 0x02, 0x18, 0x01, 0x0a, 0x02, 0x20, 0x07})                   // a member twice, merged
	f.Add([]byte{0x1a, 0x0b, 0x12, 0x09, 0x12, 0x03, 0x0a, 0x01, 0x61, 0x12, 0x02, 0x30, 0x01}) // prev_kv twice, merged
	f.Add([]byte{0x1a, 0x06, 0x0a, 0x04, 0x12, 0x02, 0x08, 0x05})                               // a key as a varint: unknown
	f.Add([]byte{0x0a, 0x02, 0x18, 0x05, 0x0a, 0x02, 0x08, 0x01})                               // the header twice, merged
	f.Add([]byte{0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{0x0b, 0x0c})                                                 // an unknown group
	f.Add([]byte{0x12, 0x01, 0x00})                                           // succeeded, as bytes: unknown
	f.Add([]byte{0x10, 0x01, 0x10, 0x00})                                     // succeeded twice: the last counts
	f.Add([]byte{0x10, 0x00, 0x10, 0x01})                                     // succeeded twice: the last counts
	f.Add([]byte{0x1a, 0x06, 0x22, 0x04, 0x10, 0x01, 0x10, 0x00})             // a nested transaction's, twice
	f.Add([]byte{0x1a, 0x06, 0x22, 0x04, 0x10, 0x00, 0x10, 0x01})             // a nested transaction's, twice
	f.Add([]byte{0x1a, 0x06, 0x22, 0x01, 0x10, 0x22, 0x01, 0x01})             // a member cut in two, whole joined: refused
	f.Add([]byte{0x1a, 0x08, 0x22, 0x02, 0x10, 0x01, 0x22, 0x02, 0x10, 0x00}) // a member twice, merged
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &etcdserverpb.TxnResponse{}
		wantErr := proto.Unmarshal(b, want)
		// The codec alone decides, as it does for the store, which reads results only later.
		gotErr := etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &txnReply{})
		require.Equal(t, wantErr == nil, gotErr == nil, "protobuf: %v; codec: %v", wantErr, gotErr)
		if wantErr != nil {
			return
		}
		got, err := readThroughCodec(b)
		require.NoError(t, err, "an answer the codec took reads whole")
		withoutUnknown(want.ProtoReflect())
		require.True(t, proto.Equal(want, got), "want %v\n got %v", want, got)
		requireResultsAsProtobufReads(t, b, want)
	})
}

// requireResultsAsProtobufReads: the results of the TxnResponse encoded in b, as eachResult
// walks them without reading them (a member and its encoding, merged occurrences joined),
// are want's, read by protobuf, at every depth; and so is a nested transaction's outcome, as
// readSucceeded reads it.
func requireResultsAsProtobufReads(t *testing.T, b []byte, want *etcdserverpb.TxnResponse) {
	t.Helper()
	ok, err := readSucceeded(b)
	require.NoError(t, err)
	require.Equal(t, want.Succeeded, ok, "succeeded")
	i := 0
	require.NoError(t, eachResult(b, func(member protowire.Number, body []byte) error {
		require.Less(t, i, len(want.Responses), "a result too many")
		w := want.Responses[i]
		i++
		var got, wantMember proto.Message
		switch member {
		case 0:
			require.Nil(t, w.Response, "a result with no member")
			return nil
		case responseRange:
			got, wantMember = &etcdserverpb.RangeResponse{}, w.GetResponseRange()
		case responsePut:
			got, wantMember = &etcdserverpb.PutResponse{}, w.GetResponsePut()
		case responseDeleteRange:
			got, wantMember = &etcdserverpb.DeleteRangeResponse{}, w.GetResponseDeleteRange()
		case responseTxn:
			got, wantMember = &etcdserverpb.TxnResponse{}, w.GetResponseTxn()
		}
		require.NotNil(t, wantMember, "result %d holds member %d; protobuf read %v", i-1, member, w)
		require.NoError(t, proto.Unmarshal(body, got))
		withoutUnknown(got.ProtoReflect())
		require.True(t, proto.Equal(wantMember, got), "result %d:\nwant %v\n got %v", i-1, wantMember, got)
		if nested, ok := wantMember.(*etcdserverpb.TxnResponse); ok {
			requireResultsAsProtobufReads(t, body, nested)
		}
		return nil
	}))
	require.Equal(t, len(want.Responses), i, "results")
}

// TestTxnCodecReadsMergedMembersAsProtobufDoes: a response op's member that comes twice is
// merged, one that another member replaced starts afresh, and a header read into a member's
// own allocation is never another response's, at any depth.
func TestTxnCodecReadsMergedMembersAsProtobufDoes(t *testing.T) {
	field := func(num protowire.Number, body ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), slices.Concat(body...))
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	header := func(rev uint64) []byte { return field(1, varint(3, rev)) }
	op := func(body ...[]byte) []byte { return field(3, body...) }
	cases := map[string][]byte{
		"nested headers at every level": slices.Concat(header(1), op(field(4, header(2),
			op(field(4, header(3), op(field(1, header(4))))), op(field(2, header(6)))))),
		"a header only in a nested merged transaction": op(field(4, op(field(1))), field(4, header(7), op(field(1, header(8))))),
	}
	succeeded := func(v ...uint64) []byte {
		var b []byte
		for _, x := range v {
			b = append(b, varint(2, x)...)
		}
		return b
	}
	cases["succeeded twice, true last"] = succeeded(0, 1)
	cases["succeeded twice, false last"] = succeeded(1, 0)
	cases["a nested transaction's succeeded twice, true last"] = op(field(4, succeeded(0, 1)))
	cases["a nested transaction's succeeded twice, false last"] = op(field(4, succeeded(1, 0)))
	cases["a nested transaction's succeeded in two merged occurrences"] = op(field(4, succeeded(1)), field(4, succeeded(0)))
	for member := protowire.Number(1); member <= 4; member++ {
		other := member%4 + 1
		name := func(what string) string { return fmt.Sprintf("member %d: %s", member, what) }
		cases[name("no header")] = op(field(member))
		cases[name("a header only in its second, merged occurrence")] = op(field(member), field(member, header(5)))
		// Both headers come from the reader's fallback, not from a member's allocation.
		cases[name("a top-level header, and one only in a merged occurrence")] = slices.Concat(header(1), op(field(member), field(member, header(5))))
		cases[name("a header in both occurrences")] = op(field(member, field(1, varint(1, 9))), field(member, header(5)))
		cases[name("a header twice in one occurrence")] = op(field(member, field(1, varint(1, 9)), header(5)))
		cases[name("replaced by another member, then back")] = op(field(member, header(1)), field(other, header(2)), field(member))
		cases[name("two ops, each with a header")] = slices.Concat(op(field(member, header(1))), op(field(member, header(2))))
	}
	for name, b := range cases {
		want := &etcdserverpb.TxnResponse{}
		require.NoError(t, proto.Unmarshal(b, want), name)
		got, err := readThroughCodec(b)
		require.NoError(t, err, name)
		assert.True(t, proto.Equal(want, got), "%s:\nwant %v\n got %v", name, want, got)
		requireResultsAsProtobufReads(t, b, want)
		seen := map[*etcdserverpb.ResponseHeader]bool{}
		var walk func(*etcdserverpb.TxnResponse)
		mark := func(h *etcdserverpb.ResponseHeader) {
			if h != nil {
				assert.False(t, seen[h], "%s: two responses share a header", name)
				seen[h] = true
			}
		}
		walk = func(r *etcdserverpb.TxnResponse) {
			mark(r.Header)
			for _, op := range r.Responses {
				mark(op.GetResponseRange().GetHeader())
				mark(op.GetResponsePut().GetHeader())
				mark(op.GetResponseDeleteRange().GetHeader())
				if nested := op.GetResponseTxn(); nested != nil {
					walk(nested)
				}
			}
		}
		walk(got)
	}
}

// TestRecordWriteBuildersBuildWhatTheyName: each builder of a record write's compares and ops,
// whose messages share one allocation, builds the message it names, and a key that grows does
// not write over its value.
func TestRecordWriteBuildersBuildWhatTheyName(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want proto.Message
	}{
		{"cmpCreateRevision", cmpCreateRevision("k", 3), &etcdserverpb.Compare{Key: []byte("k"), Target: etcdserverpb.Compare_CREATE,
			TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: 3}}},
		{"cmpModRevision", cmpModRevision("k", 4), &etcdserverpb.Compare{Key: []byte("k"), Target: etcdserverpb.Compare_MOD,
			TargetUnion: &etcdserverpb.Compare_ModRevision{ModRevision: 4}}},
		{"cmpValue", cmpValue("key", "val"), &etcdserverpb.Compare{Key: []byte("key"), Target: etcdserverpb.Compare_VALUE,
			TargetUnion: &etcdserverpb.Compare_Value{Value: []byte("val")}}},
		{"cmpLease", cmpLease("k", 7, false), &etcdserverpb.Compare{Key: []byte("k"), Target: etcdserverpb.Compare_LEASE,
			Result: etcdserverpb.Compare_NOT_EQUAL, TargetUnion: &etcdserverpb.Compare_Lease{Lease: 7}}},
		{"opPutLease", opPutLease("key", "val", 9), &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{
			RequestPut: &etcdserverpb.PutRequest{Key: []byte("key"), Value: []byte("val"), Lease: 9}}}},
		{"opPut", opPut("key", "val"), &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{
			RequestPut: &etcdserverpb.PutRequest{Key: []byte("key"), Value: []byte("val")}}}},
		{"opGet", opGet("k"), &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{
			RequestRange: &etcdserverpb.RangeRequest{Key: []byte("k")}}}},
		{"opDelete", opDelete("k"), &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte("k")}}}},
		{"opTxn", opTxn(&etcdserverpb.TxnRequest{}), &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestTxn{
			RequestTxn: &etcdserverpb.TxnRequest{}}}},
	} {
		assert.True(t, proto.Equal(c.want, c.got), "%s: got %v, want %v", c.name, c.got, c.want)
	}
	put := opPut("key", "val").GetRequestPut()
	_ = append(put.Key, '!')
	assert.Equal(t, "val", string(put.Value), "the key grew into its value")
	cmp := cmpValue("key", "val")
	_ = append(cmp.Key, '!')
	assert.Equal(t, "val", string(cmp.GetValue()), "the key grew into its value")
}

// BenchmarkTxnCodec writes a group commit of 64 creations and reads its response, with the
// codec and with gRPC's protobuf codec.
func BenchmarkTxnCodec(b *testing.B) {
	batch := &etcdserverpb.TxnRequest{}
	resp := &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 1 << 20, RaftTerm: 3}, Succeeded: true}
	for range 64 {
		batch.Success = append(batch.Success, opTxn(storeTxns()[1]))
		resp.Responses = append(resp.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseTxn{
			ResponseTxn: &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: 1 << 20}, Succeeded: true,
				Responses: []*etcdserverpb.ResponseOp{{Response: &etcdserverpb.ResponseOp_ResponsePut{
					ResponsePut: &etcdserverpb.PutResponse{Header: &etcdserverpb.ResponseHeader{Revision: 1 << 20}}}}}}}})
	}
	wire, err := deterministic.Marshal(resp)
	require.NoError(b, err)
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"codec=txn", etcdCodec}, {"codec=protobuf", encoding.GetCodecV2(grpcproto.Name)}} {
		b.Run(c.name+"/write", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(batch)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
		b.Run(c.name+"/read", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.codec == etcdCodec {
					// As the group commit reads it: the reply, then each write's outcome.
					reply := &txnReply{}
					if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, reply); err != nil {
						b.Fatal(err)
					}
					if err := answers(batch, reply); err != nil {
						b.Fatal(err)
					}
					if err := reply.eachNested(func(int, txnResult) {}); err != nil {
						b.Fatal(err)
					}
					continue
				}
				if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &etcdserverpb.TxnResponse{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// answering is a connection whose every transaction gets one answer, written by protobuf and
// read by the codec, as off the wire.
type answering struct {
	grpc.ClientConnInterface
	resp *etcdserverpb.TxnResponse
}

func (a answering) Invoke(_ context.Context, _ string, _, reply any, _ ...grpc.CallOption) error {
	b, err := deterministic.Marshal(a.resp)
	if err != nil {
		return err
	}
	return unmarshalAsGRPC(b, reply)
}

// TestAMalformedAnswerToATransactionLeavesItsOutcomeUnknown: an answer that does not have the
// shape of an answer to its transaction (no header, a result missing or of the wrong kind, at
// any depth) fails the write as a lost answer does, to be settled, and never panics a reader.
func TestAMalformedAnswerToATransactionLeavesItsOutcomeUnknown(t *testing.T) {
	header := &etcdserverpb.ResponseHeader{Revision: 9}
	put := &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{}}}
	rng := &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{}}}
	sub := func(ok bool, ops ...*etcdserverpb.ResponseOp) *etcdserverpb.ResponseOp {
		return &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseTxn{ResponseTxn: &etcdserverpb.TxnResponse{Succeeded: ok, Responses: ops}}}
	}
	reserve := storeTxns()[1] // then: a put; else: a range
	batch := &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{opTxn(reserve), opTxn(reserve)}}
	for _, c := range []struct {
		name string
		req  *etcdserverpb.TxnRequest
		resp *etcdserverpb.TxnResponse
		ok   bool
	}{
		{"won", reserve, &etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{put}}, true},
		{"lost", reserve, &etcdserverpb.TxnResponse{Header: header, Responses: []*etcdserverpb.ResponseOp{rng}}, true},
		{"a batch", batch, &etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{sub(true, put), sub(false, rng)}}, true},
		{"no header", reserve, &etcdserverpb.TxnResponse{Succeeded: true, Responses: []*etcdserverpb.ResponseOp{put}}, false},
		{"no result", reserve, &etcdserverpb.TxnResponse{Header: header, Responses: nil}, false},
		{"a result too many", reserve, &etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{put, put}}, false},
		{"a result of another kind", reserve, &etcdserverpb.TxnResponse{Header: header, Responses: []*etcdserverpb.ResponseOp{put}}, false},
		{"an empty result", reserve, &etcdserverpb.TxnResponse{Header: header, Responses: []*etcdserverpb.ResponseOp{{}}}, false},
		{"a batch short of a result", batch, &etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{sub(true, put)}}, false},
		{"a nested result missing", batch, &etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{sub(true, put), sub(false)}}, false},
		{"a batch not taken", batch, &etcdserverpb.TxnResponse{Header: header, Succeeded: false}, false},
		{"a nested batch not taken", &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{opTxn(batch)}},
			&etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{sub(false)}}, false},
		{"a nested result of another kind", batch, &etcdserverpb.TxnResponse{Header: header, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{sub(true, put), sub(true, rng)}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			reply, err := (&kvClient{conn: answering{resp: c.resp}}).txn(context.Background(), c.req)
			if c.ok {
				require.NoError(t, err)
				assert.Equal(t, c.resp.Succeeded, reply.Succeeded)
				assert.Equal(t, c.resp.Header.Revision, reply.Revision)
				results, err := reply.result().Responses()
				require.NoError(t, err)
				assert.True(t, slices.EqualFunc(c.resp.Responses, results, func(a, b *etcdserverpb.ResponseOp) bool { return proto.Equal(a, b) }))
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "malformed")
			assert.True(t, ambiguous(err), "a malformed answer leaves the outcome unknown: %v", err)
		})
	}
}

// TestABatchsAnswerGivesEachWriteItsOwnOutcome: each nested transaction of a group commit's
// answer is read out as its write's outcome, with the batch's revision, and its results read on
// demand are the ones etcd wrote.
func TestABatchsAnswerGivesEachWriteItsOwnOutcome(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		want := &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: r.Int64N(1 << 40)}, Succeeded: true}
		for range 1 + r.IntN(40) {
			want.Responses = append(want.Responses, &etcdserverpb.ResponseOp{
				Response: &etcdserverpb.ResponseOp_ResponseTxn{ResponseTxn: randomTxnResponse(r, 1)}})
		}
		b, err := deterministic.Marshal(want)
		require.NoError(t, err)
		reply := &txnReply{}
		require.NoError(t, etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, reply))
		n := 0
		require.NoError(t, reply.eachNested(func(j int, res txnResult) {
			require.Equal(t, n, j)
			n++
			nested := want.Responses[j].GetResponseTxn()
			assert.Equal(t, nested.Succeeded, res.Succeeded, "answer %d, write %d", i, j)
			assert.Equal(t, want.Header.Revision, res.Revision, "answer %d, write %d", i, j)
			results, err := res.Responses()
			require.NoError(t, err)
			assert.True(t, slices.EqualFunc(nested.Responses, results, func(a, b *etcdserverpb.ResponseOp) bool { return proto.Equal(a, b) }),
				"answer %d, write %d:\nwant %v\n got %v", i, j, nested.Responses, results)
		}))
		assert.Equal(t, len(want.Responses), n)
	}

	notATxn := &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{}, Succeeded: true, Responses: []*etcdserverpb.ResponseOp{
		{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{}}}}}
	b, err := deterministic.Marshal(notATxn)
	require.NoError(t, err)
	reply := &txnReply{}
	require.NoError(t, etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, reply))
	require.Error(t, reply.eachNested(func(int, txnResult) { t.Fatal("a write's outcome from a result that is not a transaction's") }))
}

// TestAnAnswerMalformedWithinLeavesItsOutcomeUnknown: an answer that protobuf cannot read
// anywhere within, in a result no reader would ask for included, is refused as it is read, and
// the write's outcome is unknown (to be settled), never read in part as an outcome. Two
// occurrences of a member that are each cut off, yet whose bytes joined would read, are refused
// as protobuf refuses them.
func TestAnAnswerMalformedWithinLeavesItsOutcomeUnknown(t *testing.T) {
	field := func(num protowire.Number, body ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), slices.Concat(body...))
	}
	header := field(1, []byte{0x18, 77})
	reserve := storeTxns()[1] // then: a put; else: a range
	batch := &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{opTxn(reserve)}}
	for _, c := range []struct {
		name   string
		req    *etcdserverpb.TxnRequest
		answer []byte
	}{
		{"a range result's key-value cut off", reserve, slices.Concat(header, field(3, field(responseRange, []byte{0x12, 0x05, 0x0a, 0x01})))},
		{"a put result's header cut off", reserve, slices.Concat(header, []byte{0x10, 0x01}, field(3, field(responsePut, []byte{0x0a, 0x05})))},
		{"a nested transaction's result cut off", batch, slices.Concat(header, []byte{0x10, 0x01},
			field(3, field(responseTxn, []byte{0x10, 0x01}, field(3, field(responsePut, []byte{0x0a, 0x05})))))},
		{"a nested transaction in two occurrences, each cut off", batch, slices.Concat(header, []byte{0x10, 0x01},
			field(3, field(responseTxn, []byte{0x10}), field(responseTxn, []byte{0x01}, field(3, field(responsePut)))))},
		{"a result in two occurrences of a member, each cut off", reserve, slices.Concat(header, []byte{0x10, 0x01},
			field(3, field(responsePut, []byte{0x0a}), field(responsePut, []byte{0x00})))},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Error(t, proto.Unmarshal(c.answer, &etcdserverpb.TxnResponse{}), "protobuf refuses it")
			_, err := (&kvClient{conn: rawAnswer(c.answer)}).txn(context.Background(), c.req)
			require.Error(t, err)
			assert.True(t, ambiguous(err), "an answer that cannot be read leaves the outcome unknown: %v", err)
		})
	}
}

// rawAnswer is a connection whose every transaction gets the answer encoded in it.
type rawAnswer []byte

func (a rawAnswer) Invoke(_ context.Context, _ string, _, reply any, _ ...grpc.CallOption) error {
	return unmarshalAsGRPC(a, reply)
}

// unmarshalAsGRPC reads b into reply through the codec, and fails as gRPC fails a call whose
// answer its codec cannot read.
func unmarshalAsGRPC(b []byte, reply any) error {
	if err := etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, reply); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

func (rawAnswer) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, fmt.Errorf("rawAnswer only answers transactions")
}

// TestTxnCodecRefusesAnswersNestedAsDeepAsProtobufDoes: an answer of transactions nested
// around protobuf's recursion limit is refused exactly where protobuf refuses it.
func TestTxnCodecRefusesAnswersNestedAsDeepAsProtobufDoes(t *testing.T) {
	field := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	for _, pairs := range []int{4997, 4998, 4999, 5000, 5001} {
		// Each pair is a ResponseOp holding a nested TxnResponse: two levels.
		b := []byte{0x10, 0x01}
		for range pairs {
			b = field(3, field(responseTxn, b))
		}
		wantErr := proto.Unmarshal(b, &etcdserverpb.TxnResponse{})
		gotErr := etcdCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &txnReply{})
		assert.Equal(t, wantErr == nil, gotErr == nil, "%d levels: protobuf %v; codec %v", 2*pairs, wantErr, gotErr)
	}
}
