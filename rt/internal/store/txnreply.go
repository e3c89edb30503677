package store

import (
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// txnReply is etcd's answer to a transaction as the codec reads it: at once, whether the
// transaction took its success branch and the store's revision after it, which is all that
// a write that succeeded needs; the results of its operations stay encoded until a reader
// asks for them. In a burst of creations, reading every result into etcd's messages was a fifth
// of a creation's allocations (11 of 58), for results that no one read.
type txnReply struct {
	Succeeded bool
	// Revision is the header's: the store revision after the transaction.
	Revision int64
	// header reports whether the answer had a header at all.
	header bool
	// body is the encoding of the TxnResponse: a slice of the bytes read, which it owns.
	body []byte
}

// readTxnReply reads a TxnResponse's header and Succeeded from b, and keeps b for its results.
// It refuses what protobuf refuses, having checked every message b holds as protobuf would read
// it (checkMessage), so that an answer that cannot be read is refused here, and its outcome
// left unknown, rather than read in part. Merged occurrences of the header, and a Succeeded
// that comes more than once, read as protobuf reads them.
func readTxnReply(b []byte, r *txnReply) error {
	*r = txnReply{}
	if err := checkMessage(b, txnResponseFields, 0); err != nil {
		return err
	}
	r.body = b
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			// The header: its revision, read from each occurrence that has one.
			r.header = true
			h, n, err := consumeBytes(v)
			if err != nil {
				return 0, err
			}
			return n, readFields(h, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
				if num == 3 && typ == protowire.VarintType {
					return readInt(v, &r.Revision)
				}
				return 0, nil
			})
		case num == 2 && typ == protowire.VarintType:
			return readBool(v, &r.Succeeded)
		}
		return 0, nil
	})
}

// txnResult is the outcome of one write: a transaction sent alone, or one of a batch's nested
// transactions.
type txnResult struct {
	Succeeded bool
	// Revision is the store revision after the transaction: the ModRevision of its writes.
	Revision int64
	// body is the encoding of the write's TxnResponse, whose results Responses reads.
	body []byte
}

// result is the outcome of a transaction sent alone.
func (r *txnReply) result() txnResult {
	return txnResult{Succeeded: r.Succeeded, Revision: r.Revision, body: r.body}
}

// Responses reads the results of the operations of the branch the transaction took. An error
// means etcd's answer was malformed within a result, which the codec reads only here.
func (r txnResult) Responses() ([]*pb.ResponseOp, error) {
	t := &pb.TxnResponse{}
	if err := readTxnResponse(r.body, t, nil, 0); err != nil {
		return nil, malformed(err)
	}
	return t.Responses, nil
}

// read is the key-values of the transaction's first result, a read: of a write whose failure
// branch reads its key.
func (r txnResult) read() ([]*mvccpb.KeyValue, error) {
	ops, err := r.Responses()
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, malformed(errors.New("it has no result"))
	}
	return ops[0].GetResponseRange().GetKvs(), nil
}

// eachNested calls f with the outcome of each nested transaction of a batch, in order. The
// reply's shape was checked against the batch (answers).
func (r *txnReply) eachNested(f func(i int, res txnResult)) error {
	i := 0
	return eachResult(r.body, func(member protowire.Number, body []byte) error {
		if member != responseTxn {
			return fmt.Errorf("result %d is not a transaction's", i)
		}
		ok, err := readSucceeded(body)
		if err != nil {
			return err
		}
		f(i, txnResult{Succeeded: ok, Revision: r.Revision, body: body})
		i++
		return nil
	})
}

// The field numbers of ResponseOp's members.
const (
	responseRange       protowire.Number = 1
	responsePut         protowire.Number = 2
	responseDeleteRange protowire.Number = 3
	responseTxn         protowire.Number = 4
)

// readSucceeded reads a TxnResponse's Succeeded: its last occurrence, as protobuf reads it.
func readSucceeded(b []byte) (bool, error) {
	var ok bool
	err := readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if num == 2 && typ == protowire.VarintType {
			return readBool(v, &ok)
		}
		return 0, nil
	})
	return ok, err
}

// eachResult calls f for each result (ResponseOp) of the TxnResponse encoded in b, in order,
// with the member the result holds (0 for none) and that member's encoding, as protobuf reads
// a oneof: a member that comes again is merged into (its encodings joined), another replaces
// it. It does not descend into the members. b comes from an answer that checkMessage read
// whole, within protobuf's nesting limit: a slice of it, or a join of occurrences of one
// member, each checked on its own (joining whole messages nests nothing deeper). Its callers
// recurse only as deep as their own request nests.
func eachResult(b []byte, f func(member protowire.Number, body []byte) error) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if num != 3 || typ != protowire.BytesType {
			return 0, nil
		}
		op, n, err := consumeBytes(v)
		if err != nil {
			return 0, err
		}
		var member protowire.Number
		var body, joined []byte
		err = readFields(op, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
			if typ != protowire.BytesType || num < responseRange || num > responseTxn {
				return 0, nil
			}
			m, n, err := consumeBytes(v)
			if err != nil {
				return 0, err
			}
			switch {
			case num != member:
				member, body, joined = num, m, nil
			case joined == nil:
				joined = append(append(make([]byte, 0, len(body)+len(m)), body...), m...)
			default:
				joined = append(joined, m...)
			}
			return n, nil
		})
		if err != nil {
			return 0, err
		}
		if joined != nil {
			body = joined
		}
		return n, f(member, body)
	})
}

// messageFields is, for one of the messages of a TxnResponse, the kind of each of its fields
// that is a message; its other fields are scalars or bytes.
type messageFields func(num protowire.Number) messageFields

// The messages of a TxnResponse, as their message fields (TestTxnCodecKnowsEveryFieldOfEtcdsMessages
// holds the readers to etcd's descriptors; checkMessage's fuzz holds this table to protobuf).
func txnResponseFields(num protowire.Number) messageFields {
	switch num {
	case 1:
		return noMessageFields // header
	case 3:
		return responseOpFields
	}
	return nil
}

func responseOpFields(num protowire.Number) messageFields {
	switch num {
	case responseRange, responsePut:
		return rangeOrPutResponseFields
	case responseDeleteRange:
		return deleteRangeResponseFields
	case responseTxn:
		return txnResponseFields
	}
	return nil
}

// A range or put response's message fields are its header and its key-values (a put's
// previous one); a delete's, its header and its previous key-values. A header and a KeyValue
// have none.
func rangeOrPutResponseFields(num protowire.Number) messageFields {
	if num == 1 || num == 2 {
		return noMessageFields
	}
	return nil
}

func deleteRangeResponseFields(num protowire.Number) messageFields {
	if num == 1 || num == 3 {
		return noMessageFields
	}
	return nil
}

func noMessageFields(protowire.Number) messageFields { return nil }

// checkMessage checks that b, a message whose message fields are fields, at nesting level
// depth, is what protobuf reads without error: every field well formed, and every occurrence
// of a message field a well-formed message of its kind, within the recursion limit. It builds
// nothing.
func checkMessage(b []byte, fields messageFields, depth int) error {
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte) (int, error) {
		if typ != protowire.BytesType {
			return 0, nil
		}
		inner := fields(num)
		if inner == nil {
			return 0, nil
		}
		m, n, err := consumeBytes(v)
		if err != nil {
			return 0, err
		}
		if depth+1 >= protowire.DefaultRecursionLimit {
			return 0, errors.New("messages nest too deep")
		}
		return n, checkMessage(m, inner, depth+1)
	})
}
