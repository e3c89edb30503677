package paside_test

import (
	"context"
	"testing"

	"github.com/zlink-go/zlink/bench/peers/paside"
	"github.com/zlink-go/zlink/bench/peers/workload"
)

// TestLocalWorkloads runs every single-process workload at smoke-test size; each checks its
// own results (sequence numbers, tick counts, activated grains).
func TestLocalWorkloads(t *testing.T) {
	for _, n := range workload.All {
		if n.Remote() {
			continue
		}
		t.Run(string(n), func(t *testing.T) {
			res, stop, err := paside.Run(context.Background(), workload.Tiny(n))
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

// TestRemoteInOneProcess runs the remote workload against a server in the same process: the
// harness test covers the two-process set-up.
func TestRemoteInOneProcess(t *testing.T) {
	srv, err := paside.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	p := workload.Tiny(workload.RemoteCall64)
	p.Server = srv.Address()
	res, stop, err := paside.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	_ = stop()
	if res.Ops <= 0 || res.Latency == nil {
		t.Fatalf("nothing measured: %+v", res)
	}
}
