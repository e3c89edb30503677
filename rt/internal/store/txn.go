package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Record writes are built as etcd's wire messages directly. clientv3's Compare clones every
// compare through protobuf reflection and its Txn converts every op again; in a burst of
// creations that was a fifth of a node's CPU.
//
// An op is three messages that point at each other (the op, its oneof member and the request),
// and a compare two: each builder allocates them as one, and the key and value as one.

// compareOf is a compare with its target's oneof member U, allocated as one.
type compareOf[U any] struct {
	c pb.Compare
	u U
}

func cmpCreateRevision(key string, rev int64) *pb.Compare {
	x := &compareOf[pb.Compare_CreateRevision]{u: pb.Compare_CreateRevision{CreateRevision: rev}}
	x.c = pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, TargetUnion: &x.u}
	return &x.c
}

func cmpModRevision(key string, rev int64) *pb.Compare {
	x := &compareOf[pb.Compare_ModRevision]{u: pb.Compare_ModRevision{ModRevision: rev}}
	x.c = pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &x.u}
	return &x.c
}

func cmpValue(key, value string) *pb.Compare {
	k, v := keyValueBytes(key, value)
	x := &compareOf[pb.Compare_Value]{u: pb.Compare_Value{Value: v}}
	x.c = pb.Compare{Key: k, Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &x.u}
	return &x.c
}

// cmpLease holds when key's lease is lease (equal) or is not (!equal).
func cmpLease(key string, lease int64, equal bool) *pb.Compare {
	result := pb.Compare_EQUAL
	if !equal {
		result = pb.Compare_NOT_EQUAL
	}
	x := &compareOf[pb.Compare_Lease]{u: pb.Compare_Lease{Lease: lease}}
	x.c = pb.Compare{Key: []byte(key), Target: pb.Compare_LEASE, Result: result, TargetUnion: &x.u}
	return &x.c
}

// opOf is an op with its oneof member W and the request R that the member holds, allocated as
// one.
type opOf[W, R any] struct {
	op  pb.RequestOp
	w   W
	req R
}

func opPutLease(key, value string, lease int64) *pb.RequestOp {
	x := new(opOf[pb.RequestOp_RequestPut, pb.PutRequest])
	x.req.Key, x.req.Value = keyValueBytes(key, value)
	x.req.Lease = lease
	x.w.RequestPut = &x.req
	x.op.Request = &x.w
	return &x.op
}

func opPut(key, value string) *pb.RequestOp { return opPutLease(key, value, 0) }

func opGet(key string) *pb.RequestOp {
	x := new(opOf[pb.RequestOp_RequestRange, pb.RangeRequest])
	x.req.Key = []byte(key)
	x.w.RequestRange = &x.req
	x.op.Request = &x.w
	return &x.op
}

func opDelete(key string) *pb.RequestOp {
	x := new(opOf[pb.RequestOp_RequestDeleteRange, pb.DeleteRangeRequest])
	x.req.Key = []byte(key)
	x.w.RequestDeleteRange = &x.req
	x.op.Request = &x.w
	return &x.op
}

// txnOp is an op with its oneof member, allocated as one; the nested transaction is its
// caller's.
type txnOp struct {
	op pb.RequestOp
	w  pb.RequestOp_RequestTxn
}

func opTxn(t *pb.TxnRequest) *pb.RequestOp {
	x := &txnOp{w: pb.RequestOp_RequestTxn{RequestTxn: t}}
	x.op.Request = &x.w
	return &x.op
}

// keyValueBytes copies key and value into one allocation; neither can grow into the other.
func keyValueBytes(key, value string) (k, v []byte) {
	b := make([]byte, len(key)+len(value))
	copy(b, key)
	copy(b[len(key):], value)
	return b[:len(key):len(key)], b[len(key):]
}

// txnCallOptions are clientv3's defaults for its own calls (wait for a connection, and its
// message size limits), and the codec that writes and reads transactions without reflection.
var txnCallOptions = []grpc.CallOption{
	grpc.StaticMethod(), // as etcd's generated client says: the method's name is a constant
	grpc.WaitForReady(true),
	grpc.MaxCallSendMsgSize(2 << 20),
	grpc.MaxCallRecvMsgSize(math.MaxInt32),
	grpc.ForceCodecV2(etcdCodec),
}

// txnSender sends one etcd transaction. The store sends every record write through one, so
// that internal tests can lose a transaction's answer, or fail it without sending it, and prove
// that the store settles what it cannot know.
type txnSender interface {
	txn(ctx context.Context, req *pb.TxnRequest) (*txnReply, error)
}

// kvClient sends transactions on the connection of an etcd client, through the interceptors
// (retries, authentication) that client installed on it.
type kvClient struct{ conn grpc.ClientConnInterface }

func newKVClient(c *clientv3.Client) *kvClient {
	return &kvClient{conn: c.ActiveConnection()}
}

// txn sends one transaction. Its errors read as clientv3's do: an etcd server error as that
// error, a call that ended with ctx as ctx's error.
func (c *kvClient) txn(ctx context.Context, req *pb.TxnRequest) (*txnReply, error) {
	reply := &txnReply{}
	if err := c.conn.Invoke(ctx, pb.KV_Txn_FullMethodName, req, reply, txnCallOptions...); err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	if err := answers(req, reply); err != nil {
		return nil, malformed(err)
	}
	return reply, nil
}

// malformed is the error of an answer that was read, yet does not answer its transaction:
// whether the transaction was applied is unknown, as it is when an answer is lost, and the
// caller settles it the same way.
func malformed(err error) error {
	return status.Errorf(codes.Internal, "etcd's answer to a transaction is malformed: %v", err)
}

// answers checks that r has the shape of an answer to req, which every reader of the results
// of a transaction sent through a kvClient relies on: a header, and for each operation of the
// branch it took a result of that operation's kind, nested transactions included. It reads
// the results' kinds, not their contents.
func answers(req *pb.TxnRequest, r *txnReply) error {
	if !r.header {
		return errors.New("it has no header")
	}
	return answersBranch(req, r.body)
}

// answersBranch checks the TxnResponse encoded in body against req. It recurses as deep as
// req nests, which this node built.
func answersBranch(req *pb.TxnRequest, body []byte) error {
	succeeded, err := readSucceeded(body)
	if err != nil {
		return err
	}
	if len(req.GetCompare()) == 0 && !succeeded {
		// etcd takes the success branch of a transaction without compares: a group commit's
		// batch is one, and its readers take its results as such.
		return errors.New("it failed a transaction that has no compares")
	}
	ops := req.GetSuccess()
	if !succeeded {
		ops = req.GetFailure()
	}
	i := 0
	err = eachResult(body, func(member protowire.Number, result []byte) error {
		n := i
		i++
		if n >= len(ops) {
			return nil // counted below
		}
		ok := false
		switch o := ops[n].GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			ok = member == responseRange
		case *pb.RequestOp_RequestPut:
			ok = member == responsePut
		case *pb.RequestOp_RequestDeleteRange:
			ok = member == responseDeleteRange
		case *pb.RequestOp_RequestTxn:
			if member == responseTxn && o != nil {
				if err := answersBranch(o.RequestTxn, result); err != nil {
					return fmt.Errorf("result %d: %w", n, err)
				}
				ok = true
			}
		default:
			ok = true // an operation of no kind, which etcd refuses before it answers
		}
		if !ok {
			return fmt.Errorf("result %d is not of its operation's kind", n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if i != len(ops) {
		return fmt.Errorf("it has %d results for %d operations", i, len(ops))
	}
	return nil
}
