// Command zlserver is the server process of the two-process ZLink workload: a node that hosts
// the generated Echo Spot type on the given etcd. It prints "ready <endpoint>" once it serves
// and stops when its standard input closes or it gets SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/zlink-go/zlink/bench/peers/internal/stopwait"
	"github.com/zlink-go/zlink/bench/peers/zlside"
	"github.com/zlink-go/zlink/sdk"
)

func main() {
	etcd := flag.String("etcd", "", "etcd endpoints, comma-separated")
	node := flag.String("node", "server", "node ID")
	flag.Parse()
	wait := stopwait.Arm()
	n, err := zlside.StartNode(context.Background(), strings.Split(*etcd, ","), sdk.NodeID(*node), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "zlserver:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", n.Endpoint())
	wait()
	if err := n.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "zlserver:", err)
		os.Exit(1)
	}
}
