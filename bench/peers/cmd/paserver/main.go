// Command paserver is the server process of the two-process Proto.Actor workload: an actor
// system with remote on a free loopback port and one echo actor. It prints "ready <address>"
// once it serves and stops when its standard input closes or it gets SIGTERM or SIGINT.
package main

import (
	"fmt"
	"os"

	"github.com/zlink-go/zlink/bench/peers/internal/stopwait"
	"github.com/zlink-go/zlink/bench/peers/paside"
)

func main() {
	wait := stopwait.Arm()
	s, err := paside.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "paserver:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", s.Address())
	wait()
	s.Stop()
}
