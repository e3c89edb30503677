package zlside_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/internal/grpcfloor"
	"github.com/zlink-go/zlink/bench/peers/internal/tcpfloor"
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
			require.NoError(t, err)
			defer etcd.Close()
			p := workload.Tiny(n)
			p.Etcd = etcd.Endpoints()
			res, stop, err := zlside.Run(ctx, p)
			require.NoError(t, err)
			require.NoError(t, stop())
			checkResult(t, n, res)
		})
	}
}

// TestRemoteInOneProcess runs the remote workloads against a server node in the same process:
// the harness test covers the two-process set-up.
func TestRemoteInOneProcess(t *testing.T) {
	ctx := context.Background()
	for _, n := range workload.All {
		if !n.Remote() {
			continue
		}
		t.Run(string(n), func(t *testing.T) {
			etcd, err := devetcd.Start(ctx, devetcd.WithoutFsync())
			require.NoError(t, err)
			defer etcd.Close()
			srv, err := zlside.StartNode(ctx, etcd.Endpoints(), "server", zlside.NodeOptions{})
			require.NoError(t, err)
			defer srv.Close()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			floor := grpcfloor.Serve(lis)
			defer floor.Stop()
			tcpLis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			tcpFloor := tcpfloor.Serve(tcpLis)
			defer tcpFloor.Stop()
			p := workload.Tiny(n)
			p.Etcd, p.Floor, p.TCPFloor = etcd.Endpoints(), lis.Addr().String(), tcpLis.Addr().String()
			p.TCPFloorFirst = n == workload.RemoteCall1 // both orders of the floors
			res, stop, err := zlside.Run(ctx, p)
			require.NoError(t, err)
			require.NoError(t, stop())
			checkResult(t, n, res)
			if n == workload.RemoteColdActivation {
				// Every Spot the client activated is on the server: the warm-up's and one per ID.
				require.Equal(t, p.Count+1, srv.MeshStatus().Placement.ActiveSpotCount)
			}
		})
	}
}

// checkResult checks that a run measured what its workload measures.
func checkResult(t *testing.T, n workload.Name, res workload.Result) {
	t.Helper()
	require.Positive(t, res.Ops, "operations")
	require.Positive(t, res.Seconds, "seconds")
	if n.Memory() {
		require.NotNil(t, res.Memory)
		require.Equal(t, workload.Tiny(n).Objects, res.Memory.Objects)
		require.Positive(t, res.Memory.LivePerObject)
		require.Positive(t, res.Memory.HeapInuse)
		require.GreaterOrEqual(t, res.Memory.PeakResident, res.Memory.Resident)
	}
	if n != workload.OneWay64 && n != workload.ColdActivation && n != workload.RemoteColdActivation && !n.Memory() {
		require.NotNil(t, res.Latency, "latency")
	}
	switch n {
	case workload.LocalCall1, workload.LocalCall64, workload.RemoteCall1, workload.RemoteCall64, workload.ChannelCall64:
		require.NotNil(t, res.Floor, "floor")
		require.Positive(t, res.Floor.Rate)
		require.NotNil(t, res.Floor.Latency)
		require.Positive(t, res.Floor.Latency.P50)
		require.GreaterOrEqual(t, res.Floor.Latency.Max, res.Floor.Latency.P999)
	case workload.OneWay64:
		require.NotNil(t, res.Floor, "floor")
		require.Positive(t, res.Floor.Rate)
		require.Nil(t, res.Floor.Latency, "one-way sends have no latency")
	default:
		require.Nil(t, res.Floor, "a floor is measured for request/reply to one object or a channel's server and for one-way sends only")
	}
	if n == workload.RemoteCall1 || n == workload.RemoteCall64 {
		require.NotNil(t, res.TCPFloor, "TCP floor")
		require.Positive(t, res.TCPFloor.Rate)
		require.NotNil(t, res.TCPFloor.Latency)
		require.Positive(t, res.TCPFloor.Latency.P50)
	} else {
		require.Nil(t, res.TCPFloor, "a TCP floor is measured for remote request/reply only")
	}
}
