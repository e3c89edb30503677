// Command zlink is the operator's command line for a ZLink mesh. It finds the nodes in etcd,
// where each registers itself with the URL of its admin server (rt.Config.AdminAddr), and
// talks to those servers:
//
//	zlink status   -etcd 127.0.0.1:2379
//	zlink relocate -etcd 127.0.0.1:2379 -node node-1 -mode rolling -version 2
//	zlink relocate -etcd 127.0.0.1:2379 -node node-1 -mode planned
//	zlink shutdown -etcd 127.0.0.1:2379 -node node-2
//
// status prints a table of the mesh's nodes, each as its own /status says (or its
// registration, when its admin server does not answer in time). relocate and shutdown start
// the operation on the node (POST /relocate, /shutdown) and print its progress until it ends;
// they exit 1 when it did not end as asked (Blocked, ForceStopped). A node's admin server
// takes them only on loopback, or from a caller with a client certificate (-cert, -key).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the operation failed or did not end as asked
	exitUsage  = 2 // the command line is wrong
)

const usage = `usage: zlink <command> [flags]

commands:
  status    print every node of the mesh and its state
  relocate  relocate a node's objects to other nodes: -node ID -mode planned|rolling [-version N]
  shutdown  shut a node down gracefully: -node ID

Run zlink <command> -h for its flags.
`

// run runs the command line args and returns the process's exit code. Every error is one
// line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "status":
		err = status(ctx, args[1:], stdout)
	case "relocate":
		err = relocate(ctx, args[1:], stdout)
	case "shutdown":
		err = shutdown(ctx, args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "zlink: unknown command %q: use status, relocate or shutdown\n", args[0])
		return exitUsage
	}
	switch e := err.(type) {
	case nil:
		return exitOK
	case helpShown:
		fmt.Fprint(stdout, string(e))
		return exitOK
	case usageError:
		fmt.Fprintf(stderr, "zlink %s: %s\n", args[0], e.msg)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "zlink %s: %v\n", args[0], err)
		return exitFailed
	}
}

// usageError is a wrong command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// helpShown carries a command's help text, asked for with -h.
type helpShown string

func (h helpShown) Error() string { return string(h) }
