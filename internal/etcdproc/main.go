// Command etcdproc runs the embedded etcd of rt/devetcd as a process of its own, for tests and
// benchmarks that must keep etcd out of the measured process or kill it. It prints
// "endpoints=<host:port,...>" on stdout once etcd serves, and stops when its standard input
// closes or it gets SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/zlink-go/zlink/internal/procstop"
	"github.com/zlink-go/zlink/rt/devetcd"
)

func main() {
	dir := flag.String("dir", "", "data directory kept across runs (default: a temporary one)")
	noFsync := flag.Bool("nofsync", false, "turn fsync off (tests only)")
	maxTxnOps := flag.Uint("max-txn-ops", 0, "etcd's --max-txn-ops (default: etcd's)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the server's whole run to this file")
	name := flag.String("name", "", "with -cluster: this member's name")
	cluster := flag.String("cluster", "", "run as a member of this cluster: name=clientaddr=peeraddr,... (every member)")
	flag.Parse()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcdproc:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "etcdproc:", err)
			os.Exit(1)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}

	var opts []devetcd.Option
	if *dir != "" {
		opts = append(opts, devetcd.WithDir(*dir))
	}
	if *noFsync {
		opts = append(opts, devetcd.WithoutFsync())
	}
	if *maxTxnOps > 0 {
		opts = append(opts, devetcd.WithMaxTxnOps(*maxTxnOps))
	}
	if *cluster != "" {
		opt, err := memberOption(*name, *cluster)
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcdproc:", err)
			os.Exit(2)
		}
		opts = append(opts, opt)
	}
	srv, err := devetcd.Start(context.Background(), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdproc:", err)
		os.Exit(1)
	}
	fmt.Printf("endpoints=%s\n", strings.Join(srv.Endpoints(), ","))

	procstop.Wait()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdproc:", err)
	}
}

// memberOption parses -cluster: "name=clientaddr=peeraddr,..." and finds -name in it.
func memberOption(name, cluster string) (devetcd.Option, error) {
	var members []devetcd.Member
	var self *devetcd.Member
	for _, part := range strings.Split(cluster, ",") {
		f := strings.Split(part, "=")
		if len(f) != 3 || f[0] == "" || f[1] == "" || f[2] == "" {
			return nil, fmt.Errorf("-cluster: %q is not name=clientaddr=peeraddr", part)
		}
		members = append(members, devetcd.Member{Name: f[0], ClientAddr: f[1], PeerAddr: f[2]})
		if f[0] == name {
			self = &members[len(members)-1]
		}
	}
	if self == nil {
		return nil, fmt.Errorf("-name %q is not a member of -cluster", name)
	}
	return devetcd.WithMember(*self, members), nil
}
