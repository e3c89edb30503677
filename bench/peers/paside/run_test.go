package paside_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/paside"
	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/rt/devetcd"
)

// TestLocalWorkloads runs every single-process workload at smoke-test size; each checks its
// own results (sequence numbers, tick counts, activated grains).
func TestLocalWorkloads(t *testing.T) {
	for _, n := range workload.All {
		if n.Remote() {
			continue
		}
		t.Run(string(n), func(t *testing.T) {
			p := workload.Tiny(n)
			if n.Memory() {
				// Enough actors that their heap outweighs what the earlier subtests' actor
				// systems free as they finish shutting down.
				p.Objects = 20_000
			}
			res, stop, err := paside.Run(context.Background(), p)
			require.NoError(t, err)
			require.NoError(t, stop())
			require.Positive(t, res.Ops, "operations")
			require.Positive(t, res.Seconds, "seconds")
			if n.Memory() {
				require.NotNil(t, res.Memory)
				require.Equal(t, p.Objects, res.Memory.Objects)
				require.Positive(t, res.Memory.LivePerObject)
				require.GreaterOrEqual(t, res.Memory.PeakResident, res.Memory.Resident)
			}
		})
	}
}

// TestRemoteInOneProcess runs the remote workload against a server in the same process: the
// harness test covers the two-process set-up.
func TestRemoteInOneProcess(t *testing.T) {
	srv, err := paside.StartServer()
	require.NoError(t, err)
	defer srv.Stop()
	p := workload.Tiny(workload.RemoteCall64)
	p.Server = srv.Address()
	res, stop, err := paside.Run(context.Background(), p)
	require.NoError(t, err)
	_ = stop()
	require.Positive(t, res.Ops)
	require.NotNil(t, res.Latency)
}

// TestRemoteGrainsInOneProcess runs the remote cold activation with the cluster member that
// hosts the grains in the same process, on an embedded etcd.
func TestRemoteGrainsInOneProcess(t *testing.T) {
	ctx := context.Background()
	etcd, err := devetcd.Start(ctx, devetcd.WithoutFsync())
	require.NoError(t, err)
	defer etcd.Close()
	srv, err := paside.StartRemoteMember(ctx, etcd.Endpoints(), false)
	require.NoError(t, err)
	defer srv.Stop()
	p := workload.Tiny(workload.RemoteColdActivation)
	p.Etcd = etcd.Endpoints()
	res, stop, err := paside.Run(ctx, p)
	require.NoError(t, err)
	require.NoError(t, stop())
	require.Equal(t, int64(p.Count), res.Ops)
	// Every grain the client activated is on the member: the warm-up's and one per ID.
	require.Equal(t, int32(p.Count+1), srv.GetClusterKind(paside.EchoKind).Count())
}
