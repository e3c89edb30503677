// Command etcdserve runs ZLink's embedded etcd (rt/devetcd: a real single-member etcd with
// fsync on, on free loopback ports) as a process of its own, so that the measured process holds
// only the node. It prints "ready <endpoints>" once etcd serves and stops when its standard
// input closes or it gets SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/zlink-go/zlink/bench/peers/internal/stopwait"
	"github.com/zlink-go/zlink/rt/devetcd"
)

func main() {
	wait := stopwait.Arm()
	srv, err := devetcd.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdserve:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", strings.Join(srv.Endpoints(), ","))
	wait()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdserve:", err)
		os.Exit(1)
	}
}
