package store_test

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// BenchmarkCreate compares one object creation through the store (Reserve + CommitReady) with
// the raw etcd baseline of two transactions: a put on CreateRevision == 0, then a put on the
// first one's ModRevision. Each run gets a fresh embedded etcd with fsync on, so neither side
// pays for the other's keys.
//
//	go test -run '^$' -bench BenchmarkCreate -benchtime 3s -count 6 ./rt/internal/store/
func BenchmarkCreate(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("raw-etcd/callers=%d", callers), func(b *testing.B) {
			c := freshClient(b)
			prefix := "/bench-raw/"
			rttest.RunCallers(b, callers, func(i int64) error {
				k := fmt.Sprintf("%s%d", prefix, i)
				r1, err := c.Txn(context.Background()).
					If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, "creating-record-of-similar-size")).Commit()
				if err != nil || !r1.Succeeded {
					return fmt.Errorf("raw reserve: %v", err)
				}
				r2, err := c.Txn(context.Background()).
					If(clientv3.Compare(clientv3.ModRevision(k), "=", r1.Header.Revision)).
					Then(clientv3.OpPut(k, "ready-record-of-similar-size-x")).Commit()
				if err != nil || !r2.Succeeded {
					return fmt.Errorf("raw commit: %v", err)
				}
				return nil
			})
		})
		b.Run(fmt.Sprintf("zlink-store/callers=%d", callers), func(b *testing.B) {
			s, err := store.New(freshClient(b), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			reg := register(b, s, "bench-node", store.LeaseOptions{})
			owner := reg.Owner()
			rttest.RunCallers(b, callers, func(i int64) error {
				k := store.SpotKey{Type: "bench.Room", ID: fmt.Sprint(i)}
				r, err := s.Reserve(context.Background(), k, sdk.KindInstance, owner)
				if err != nil || !r.Won {
					return fmt.Errorf("reserve: %v", err)
				}
				_, err = s.CommitReady(context.Background(), r.Reservation)
				return err
			})
		})
	}
}

// freshClient starts an embedded etcd for one benchmark run and returns a client of it.
func freshClient(b *testing.B) *clientv3.Client {
	srv, err := devetcd.Start(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}
