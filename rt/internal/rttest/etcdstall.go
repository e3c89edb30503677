package rttest

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
)

// StallTxnOnce is an etcd client interceptor for tests: while armed is set, the next
// transaction (a write) is held unsent until its context ends, as by an etcd that does not
// answer before the write's deadline; it says so on entered, and disarms.
func StallTxnOnce(armed *atomic.Bool, entered chan<- struct{}) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.KV/Txn" && armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
