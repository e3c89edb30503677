// Command paserver is the server process of the two-process Proto.Actor workloads. By default
// it is an actor system with remote on a free loopback port and one echo actor, for remote
// request/reply; with -etcd it is instead a cluster member on the etcd provider at those
// endpoints that hosts the echo grain kind, for remote activation. It prints "ready <address>"
// once it serves and stops when its standard input closes or it gets SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/zlink-go/zlink/bench/peers/internal/stopwait"
	"github.com/zlink-go/zlink/bench/peers/paside"
)

func main() {
	etcd := flag.String("etcd", "", "etcd endpoints, comma-separated: serve echo grains as a cluster member")
	flag.Parse()
	wait := stopwait.Arm()
	if *etcd != "" {
		m, err := paside.StartRemoteMember(context.Background(), strings.Split(*etcd, ","), false)
		if err != nil {
			fmt.Fprintln(os.Stderr, "paserver:", err)
			os.Exit(1)
		}
		fmt.Printf("ready %s\n", m.ActorSystem.Address())
		wait()
		_ = m.Stop()
		return
	}
	s, err := paside.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "paserver:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", s.Address())
	wait()
	s.Stop()
}
