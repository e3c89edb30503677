package zlside_test

import (
	"context"
	"testing"

	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/bench/peers/zlside"
	"github.com/zlink-go/zlink/rt/devetcd"
)

// TestLocalWorkloads runs every single-process workload at smoke-test size on a real embedded
// etcd; each checks its own results (sequence numbers, tick counts, active Spots).
func TestLocalWorkloads(t *testing.T) {
	ctx := context.Background()
	for _, n := range workload.All {
		if n.Remote() {
			continue
		}
		t.Run(string(n), func(t *testing.T) {
			etcd, err := devetcd.Start(ctx, devetcd.WithoutFsync())
			if err != nil {
				t.Fatal(err)
			}
			defer etcd.Close()
			p := workload.Tiny(n)
			p.Etcd = etcd.Endpoints()
			res, stop, err := zlside.Run(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := stop(); err != nil {
				t.Error(err)
			}
			if res.Ops <= 0 || res.Seconds <= 0 {
				t.Fatalf("nothing measured: %+v", res)
			}
		})
	}
}
