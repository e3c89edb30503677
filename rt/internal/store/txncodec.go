package store

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// txnCodec writes etcd's TxnRequest and reads its TxnResponse (as a txnReply) by hand, and
// leaves every other message to gRPC's protobuf codec. etcd's messages have no generated methods of their own, so
// protobuf's generic, table-driven code walks their nested transactions and oneofs; in a burst
// of creations that was a tenth of a node's CPU. The bytes are protobuf's (TestTxnCodecWritesWhatProtobufWrites),
// and it reads what protobuf reads (FuzzTxnCodecReadsAsProtobufReads). The fields it knows are
// checked against etcd's descriptors (TestTxnCodecKnowsEveryFieldOfEtcdsMessages), so an etcd
// upgrade that adds one fails a test rather than losing the field.
type txnCodec struct{ fallback encoding.CodecV2 }

var etcdCodec = txnCodec{fallback: encoding.GetCodecV2(proto.Name)}

// Name is protobuf's: the server reads these messages as the protobuf they are. (A forced
// codec names itself in the content type, application/grpc+proto, which etcd accepts as it
// accepts application/grpc.)
func (txnCodec) Name() string { return proto.Name }

func (c txnCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*etcdserverpb.TxnRequest)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := sizeTxnRequest(req)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(appendTxnRequest(make([]byte, 0, size), req))}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendTxnRequest((*buf)[:0], req)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c txnCodec) Unmarshal(data mem.BufferSlice, v any) error {
	reply, ok := v.(*txnReply)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	// One copy the reply owns: its results, and their keys and values, are slices of it.
	if err := readTxnReply(data.Materialize(), reply); err != nil {
		return fmt.Errorf("reading etcd's transaction response: %w", err)
	}
	return nil
}

// Writing. Each size function is the encoded size of its message, each append function
// appends its encoding, in protobuf's order: fields by number, a oneof's last. A nil message,
// or a nil element of a repeated field, is written as an empty message, and a oneof member that
// is a nil pointer as unset, as protobuf writes them.

func sizeTxnRequest(t *etcdserverpb.TxnRequest) int {
	if t == nil {
		return 0
	}
	n := 0
	for _, c := range t.Compare {
		n += sizeField(1, sizeCompare(c))
	}
	for _, op := range t.Success {
		n += sizeField(2, sizeRequestOp(op))
	}
	for _, op := range t.Failure {
		n += sizeField(3, sizeRequestOp(op))
	}
	return n
}

func appendTxnRequest(b []byte, t *etcdserverpb.TxnRequest) []byte {
	if t == nil {
		return b
	}
	for _, c := range t.Compare {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = appendCompare(protowire.AppendVarint(b, uint64(sizeCompare(c))), c)
	}
	for _, op := range t.Success {
		b = appendRequestOp(protowire.AppendTag(b, 2, protowire.BytesType), op)
	}
	for _, op := range t.Failure {
		b = appendRequestOp(protowire.AppendTag(b, 3, protowire.BytesType), op)
	}
	return b
}

func sizeCompare(c *etcdserverpb.Compare) int {
	if c == nil {
		return 0
	}
	n := sizeVarint(1, uint64(c.Result)) + sizeVarint(2, uint64(c.Target)) + sizeBytes(3, c.Key)
	switch u := c.TargetUnion.(type) {
	case *etcdserverpb.Compare_Version:
		if u != nil {
			n += 1 + protowire.SizeVarint(uint64(u.Version))
		}
	case *etcdserverpb.Compare_CreateRevision:
		if u != nil {
			n += 1 + protowire.SizeVarint(uint64(u.CreateRevision))
		}
	case *etcdserverpb.Compare_ModRevision:
		if u != nil {
			n += 1 + protowire.SizeVarint(uint64(u.ModRevision))
		}
	case *etcdserverpb.Compare_Value:
		if u != nil {
			n += 1 + protowire.SizeBytes(len(u.Value))
		}
	case *etcdserverpb.Compare_Lease:
		if u != nil {
			n += 1 + protowire.SizeVarint(uint64(u.Lease))
		}
	}
	return n + sizeBytes(64, c.RangeEnd)
}

func appendCompare(b []byte, c *etcdserverpb.Compare) []byte {
	if c == nil {
		return b
	}
	b = appendVarint(b, 1, uint64(c.Result))
	b = appendVarint(b, 2, uint64(c.Target))
	b = appendBytes(b, 3, c.Key)
	b = appendBytes(b, 64, c.RangeEnd)
	// A oneof's member is written even when it is zero, since it says which member is set,
	// and after the other fields, where protobuf writes it.
	switch u := c.TargetUnion.(type) {
	case *etcdserverpb.Compare_Version:
		if u != nil {
			b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), uint64(u.Version))
		}
	case *etcdserverpb.Compare_CreateRevision:
		if u != nil {
			b = protowire.AppendVarint(protowire.AppendTag(b, 5, protowire.VarintType), uint64(u.CreateRevision))
		}
	case *etcdserverpb.Compare_ModRevision:
		if u != nil {
			b = protowire.AppendVarint(protowire.AppendTag(b, 6, protowire.VarintType), uint64(u.ModRevision))
		}
	case *etcdserverpb.Compare_Value:
		if u != nil {
			b = protowire.AppendBytes(protowire.AppendTag(b, 7, protowire.BytesType), u.Value)
		}
	case *etcdserverpb.Compare_Lease:
		if u != nil {
			b = protowire.AppendVarint(protowire.AppendTag(b, 8, protowire.VarintType), uint64(u.Lease))
		}
	}
	return b
}

// requestOf is the member of op that is set, as its field number and the size of its message;
// num is 0 when none is.
func requestOf(op *etcdserverpb.RequestOp) (num protowire.Number, size int) {
	if op == nil {
		return 0, 0
	}
	switch r := op.Request.(type) {
	case *etcdserverpb.RequestOp_RequestRange:
		if r != nil {
			return 1, sizeRangeRequest(r.RequestRange)
		}
	case *etcdserverpb.RequestOp_RequestPut:
		if r != nil {
			return 2, sizePutRequest(r.RequestPut)
		}
	case *etcdserverpb.RequestOp_RequestDeleteRange:
		if r != nil {
			return 3, sizeDeleteRangeRequest(r.RequestDeleteRange)
		}
	case *etcdserverpb.RequestOp_RequestTxn:
		if r != nil {
			return 4, sizeTxnRequest(r.RequestTxn)
		}
	}
	return 0, 0
}

func sizeRequestOp(op *etcdserverpb.RequestOp) int {
	num, size := requestOf(op)
	if num == 0 {
		return 0
	}
	return sizeField(num, size)
}

// appendRequestOp appends op as a field: its length, then its message. The size of the member
// set is computed once for both lengths.
func appendRequestOp(b []byte, op *etcdserverpb.RequestOp) []byte {
	num, size := requestOf(op)
	if num == 0 {
		return protowire.AppendVarint(b, 0)
	}
	b = protowire.AppendVarint(b, uint64(sizeField(num, size)))
	b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(size))
	switch r := op.Request.(type) {
	case *etcdserverpb.RequestOp_RequestRange:
		return appendRangeRequest(b, r.RequestRange)
	case *etcdserverpb.RequestOp_RequestPut:
		return appendPutRequest(b, r.RequestPut)
	case *etcdserverpb.RequestOp_RequestDeleteRange:
		return appendDeleteRangeRequest(b, r.RequestDeleteRange)
	case *etcdserverpb.RequestOp_RequestTxn:
		return appendTxnRequest(b, r.RequestTxn)
	}
	return b
}

func sizeRangeRequest(r *etcdserverpb.RangeRequest) int {
	if r == nil {
		return 0
	}
	return sizeBytes(1, r.Key) + sizeBytes(2, r.RangeEnd) + sizeVarint(3, uint64(r.Limit)) +
		sizeVarint(4, uint64(r.Revision)) + sizeVarint(5, uint64(r.SortOrder)) + sizeVarint(6, uint64(r.SortTarget)) +
		sizeBool(7, r.Serializable) + sizeBool(8, r.KeysOnly) + sizeBool(9, r.CountOnly) +
		sizeVarint(10, uint64(r.MinModRevision)) + sizeVarint(11, uint64(r.MaxModRevision)) +
		sizeVarint(12, uint64(r.MinCreateRevision)) + sizeVarint(13, uint64(r.MaxCreateRevision))
}

func appendRangeRequest(b []byte, r *etcdserverpb.RangeRequest) []byte {
	if r == nil {
		return b
	}
	b = appendBytes(b, 1, r.Key)
	b = appendBytes(b, 2, r.RangeEnd)
	b = appendVarint(b, 3, uint64(r.Limit))
	b = appendVarint(b, 4, uint64(r.Revision))
	b = appendVarint(b, 5, uint64(r.SortOrder))
	b = appendVarint(b, 6, uint64(r.SortTarget))
	b = appendBool(b, 7, r.Serializable)
	b = appendBool(b, 8, r.KeysOnly)
	b = appendBool(b, 9, r.CountOnly)
	b = appendVarint(b, 10, uint64(r.MinModRevision))
	b = appendVarint(b, 11, uint64(r.MaxModRevision))
	b = appendVarint(b, 12, uint64(r.MinCreateRevision))
	return appendVarint(b, 13, uint64(r.MaxCreateRevision))
}

func sizePutRequest(p *etcdserverpb.PutRequest) int {
	if p == nil {
		return 0
	}
	return sizeBytes(1, p.Key) + sizeBytes(2, p.Value) + sizeVarint(3, uint64(p.Lease)) +
		sizeBool(4, p.PrevKv) + sizeBool(5, p.IgnoreValue) + sizeBool(6, p.IgnoreLease)
}

func appendPutRequest(b []byte, p *etcdserverpb.PutRequest) []byte {
	if p == nil {
		return b
	}
	b = appendBytes(b, 1, p.Key)
	b = appendBytes(b, 2, p.Value)
	b = appendVarint(b, 3, uint64(p.Lease))
	b = appendBool(b, 4, p.PrevKv)
	b = appendBool(b, 5, p.IgnoreValue)
	return appendBool(b, 6, p.IgnoreLease)
}

func sizeDeleteRangeRequest(d *etcdserverpb.DeleteRangeRequest) int {
	if d == nil {
		return 0
	}
	return sizeBytes(1, d.Key) + sizeBytes(2, d.RangeEnd) + sizeBool(3, d.PrevKv)
}

func appendDeleteRangeRequest(b []byte, d *etcdserverpb.DeleteRangeRequest) []byte {
	if d == nil {
		return b
	}
	b = appendBytes(b, 1, d.Key)
	b = appendBytes(b, 2, d.RangeEnd)
	return appendBool(b, 3, d.PrevKv)
}

// A scalar field of proto3 is written only when it is not zero.

func sizeField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func sizeBool(num protowire.Number, v bool) int {
	if !v {
		return 0
	}
	return protowire.SizeTag(num) + 1
}

func sizeBytes(num protowire.Number, v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return sizeField(num, len(v))
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), 1)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// Reading. Each read function reads one message into m, which holds what earlier occurrences
// of the same field wrote: a message field that comes twice is merged, as protobuf merges it.
// Fields it does not know, or of a wire type their number does not have, are skipped, as
// protobuf skips them. Keys and values are slices of the bytes read.

// readFields calls field for each field of b. field reads the value v of a field it knows and
// returns its length, or returns 0 to have the value skipped.
func readFields(b []byte, field func(num protowire.Number, typ protowire.Type, v []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("field number %d is over protobuf's limit", num)
		}
		b = b[n:]
		n, err := field(num, typ, b)
		if err != nil {
			return err
		}
		if n == 0 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
		}
		b = b[n:]
	}
	return nil
}

func consumeVarint(b []byte) (uint64, int, error) {
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

func consumeBytes(b []byte) ([]byte, int, error) {
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

// readMessage reads a message field's value from b into m with read; depth is the nesting
// level of that message, the top-level response's being 0.
func readMessage[M any](b []byte, m *M, depth int, read func([]byte, *M) error) (int, error) {
	v, n, err := consumeBytes(b)
	if err != nil {
		return 0, err
	}
	if depth >= protowire.DefaultRecursionLimit {
		return 0, errors.New("messages nest too deep")
	}
	return n, read(v, m)
}

// readHeader reads a response header field into *h, made if it is nil.
func readHeader(v []byte, h **etcdserverpb.ResponseHeader, spare *etcdserverpb.ResponseHeader, depth int) (int, error) {
	if *h == nil {
		if spare == nil {
			spare = &etcdserverpb.ResponseHeader{}
		}
		*h = spare
	}
	return readMessage(v, *h, depth, readResponseHeader)
}

// readKeyValues reads an element of a repeated key-value field and appends it to *kvs.
func readKeyValues(v []byte, kvs *[]*mvccpb.KeyValue, depth int) (int, error) {
	kv := &mvccpb.KeyValue{}
	*kvs = append(*kvs, kv)
	return readMessage(v, kv, depth, readKeyValue)
}

// readInt reads a varint field's value into *x.
func readInt[I ~int64 | ~uint64](v []byte, x *I) (int, error) {
	u, n, err := consumeVarint(v)
	*x = I(u)
	return n, err
}

// readBytes reads a bytes field's value into *x: a slice of the bytes read, nil when empty.
// Its capacity ends with it, so that appending to a key or value copies it rather than
// writing over the bytes after it.
func readBytes(v []byte, x *[]byte) (int, error) {
	b, n, err := consumeBytes(v)
	if len(b) == 0 {
		b = nil
	}
	*x = b[:len(b):len(b)]
	return n, err
}

// readBool reads a bool field's value into *x.
func readBool(v []byte, x *bool) (int, error) {
	u, n, err := consumeVarint(v)
	*x = u != 0
	return n, err
}

func readTxnResponse(b []byte, m *etcdserverpb.TxnResponse, spare *etcdserverpb.ResponseHeader, depth int) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return readHeader(v, &m.Header, spare, depth+1)
		case num == 2 && typ == protowire.VarintType:
			return readBool(v, &m.Succeeded)
		case num == 3 && typ == protowire.BytesType:
			op := &etcdserverpb.ResponseOp{}
			m.Responses = append(m.Responses, op)
			return readMessage(v, op, depth+1, func(b []byte, op *etcdserverpb.ResponseOp) error { return readResponseOp(b, op, depth+1) })
		}
		return 0, nil
	})
}

func readResponseHeader(b []byte, m *etcdserverpb.ResponseHeader) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if typ != protowire.VarintType {
			return 0, nil
		}
		switch num {
		case 1:
			return readInt(v, &m.ClusterId)
		case 2:
			return readInt(v, &m.MemberId)
		case 3:
			return readInt(v, &m.Revision)
		case 4:
			return readInt(v, &m.RaftTerm)
		}
		return 0, nil
	})
}

// responseOf is a response's oneof member W, the response R it holds and that response's
// header, if it has one, allocated as one.
type responseOf[W, R any] struct {
	w W
	r R
	h etcdserverpb.ResponseHeader
}

func readResponseOp(b []byte, m *etcdserverpb.ResponseOp, depth int) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if typ != protowire.BytesType {
			return 0, nil
		}
		// A member that comes again is merged into; another member replaces it. A new
		// member's response gets its header from the member's allocation.
		var spare *etcdserverpb.ResponseHeader
		switch num {
		case 1:
			r, ok := m.Response.(*etcdserverpb.ResponseOp_ResponseRange)
			if !ok || r.ResponseRange == nil {
				x := new(responseOf[etcdserverpb.ResponseOp_ResponseRange, etcdserverpb.RangeResponse])
				spare = &x.h
				x.w.ResponseRange = &x.r
				r = &x.w
				m.Response = r
			}
			return readMessage(v, r.ResponseRange, depth+1, func(b []byte, m *etcdserverpb.RangeResponse) error { return readRangeResponse(b, m, spare, depth+1) })
		case 2:
			r, ok := m.Response.(*etcdserverpb.ResponseOp_ResponsePut)
			if !ok || r.ResponsePut == nil {
				x := new(responseOf[etcdserverpb.ResponseOp_ResponsePut, etcdserverpb.PutResponse])
				spare = &x.h
				x.w.ResponsePut = &x.r
				r = &x.w
				m.Response = r
			}
			return readMessage(v, r.ResponsePut, depth+1, func(b []byte, m *etcdserverpb.PutResponse) error { return readPutResponse(b, m, spare, depth+1) })
		case 3:
			r, ok := m.Response.(*etcdserverpb.ResponseOp_ResponseDeleteRange)
			if !ok || r.ResponseDeleteRange == nil {
				x := new(responseOf[etcdserverpb.ResponseOp_ResponseDeleteRange, etcdserverpb.DeleteRangeResponse])
				spare = &x.h
				x.w.ResponseDeleteRange = &x.r
				r = &x.w
				m.Response = r
			}
			return readMessage(v, r.ResponseDeleteRange, depth+1, func(b []byte, m *etcdserverpb.DeleteRangeResponse) error {
				return readDeleteRangeResponse(b, m, spare, depth+1)
			})
		case 4:
			r, ok := m.Response.(*etcdserverpb.ResponseOp_ResponseTxn)
			if !ok || r.ResponseTxn == nil {
				x := new(responseOf[etcdserverpb.ResponseOp_ResponseTxn, etcdserverpb.TxnResponse])
				spare = &x.h
				x.w.ResponseTxn = &x.r
				r = &x.w
				m.Response = r
			}
			return readMessage(v, r.ResponseTxn, depth+1, func(b []byte, t *etcdserverpb.TxnResponse) error {
				return readTxnResponse(b, t, spare, depth+1)
			})
		}
		return 0, nil
	})
}

func readRangeResponse(b []byte, m *etcdserverpb.RangeResponse, spare *etcdserverpb.ResponseHeader, depth int) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return readHeader(v, &m.Header, spare, depth+1)
		case num == 2 && typ == protowire.BytesType:
			return readKeyValues(v, &m.Kvs, depth+1)
		case num == 3 && typ == protowire.VarintType:
			return readBool(v, &m.More)
		case num == 4 && typ == protowire.VarintType:
			return readInt(v, &m.Count)
		}
		return 0, nil
	})
}

func readPutResponse(b []byte, m *etcdserverpb.PutResponse, spare *etcdserverpb.ResponseHeader, depth int) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if typ != protowire.BytesType {
			return 0, nil
		}
		switch num {
		case 1:
			return readHeader(v, &m.Header, spare, depth+1)
		case 2:
			if m.PrevKv == nil {
				m.PrevKv = &mvccpb.KeyValue{}
			}
			return readMessage(v, m.PrevKv, depth+1, readKeyValue)
		}
		return 0, nil
	})
}

func readDeleteRangeResponse(b []byte, m *etcdserverpb.DeleteRangeResponse, spare *etcdserverpb.ResponseHeader, depth int) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return readHeader(v, &m.Header, spare, depth+1)
		case num == 2 && typ == protowire.VarintType:
			return readInt(v, &m.Deleted)
		case num == 3 && typ == protowire.BytesType:
			return readKeyValues(v, &m.PrevKvs, depth+1)
		}
		return 0, nil
	})
}

func readKeyValue(b []byte, m *mvccpb.KeyValue) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch typ {
		case protowire.BytesType:
			switch num {
			case 1:
				return readBytes(v, &m.Key)
			case 5:
				return readBytes(v, &m.Value)
			}
		case protowire.VarintType:
			switch num {
			case 2:
				return readInt(v, &m.CreateRevision)
			case 3:
				return readInt(v, &m.ModRevision)
			case 4:
				return readInt(v, &m.Version)
			case 6:
				return readInt(v, &m.Lease)
			}
		}
		return 0, nil
	})
}
