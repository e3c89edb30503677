// Command zlserver is the server process of the two-process ZLink workload: a node that hosts
// the generated Echo Spot type on the given etcd, and the bare gRPC and TCP echoes that the
// remote rows measure their floors on. It prints "ready <node> <gRPC echo address> <TCP echo
// address>" once all three serve
// and stops when its standard input closes or it gets SIGTERM or SIGINT. With -cpuprofile it
// writes a CPU profile of its whole run.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/zlink-go/zlink/bench/peers/internal/grpcfloor"
	"github.com/zlink-go/zlink/bench/peers/internal/stopwait"
	"github.com/zlink-go/zlink/bench/peers/internal/tcpfloor"
	"github.com/zlink-go/zlink/bench/peers/zlside"
	"github.com/zlink-go/zlink/sdk"
)

func main() {
	etcd := flag.String("etcd", "", "etcd endpoints, comma-separated")
	node := flag.String("node", "server", "node ID")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	stopProfile := func() {}
	if *cpuProfile != "" {
		stop, err := startProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "zlserver:", err)
			os.Exit(1)
		}
		stopProfile = stop
	}
	wait := stopwait.Arm()
	n, err := zlside.StartNode(context.Background(), strings.Split(*etcd, ","), sdk.NodeID(*node), zlside.NodeOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "zlserver:", err)
		os.Exit(1)
	}
	// The bare gRPC echo and the bare TCP echo that the remote request/reply runs measure
	// their floors on.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	var tcpLis net.Listener
	if err == nil {
		if tcpLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			_ = lis.Close()
		}
	}
	if err != nil {
		_ = n.Close()
		fmt.Fprintln(os.Stderr, "zlserver:", err)
		os.Exit(1)
	}
	floor, tcpFloor := grpcfloor.Serve(lis), tcpfloor.Serve(tcpLis)
	fmt.Printf("ready %s %s %s\n", n.LocalNode(), lis.Addr(), tcpLis.Addr())
	wait()
	// The profile is written before the node stops: the harness may have stopped etcd
	// already, and a node that cannot reach it takes longer to close than the harness waits.
	stopProfile()
	floor.Stop()
	tcpFloor.Stop()
	if err := n.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "zlserver:", err)
	}
}

func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
