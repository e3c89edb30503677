// Command peerbench runs ZLink and Proto.Actor Go side by side on the same workloads and prints
// one table of medians; `make bench` runs it from the repository root. Every run of a workload
// is a child process of its own (this command with -child), started with the processes it
// needs and stopped after it.
//
//	go run ./cmd/peerbench                       # everything, 3 rounds, writes ../RESULTS.md
//	go run ./cmd/peerbench -workloads oneway-64 -rounds 1 -out '' -profile /tmp/prof
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/zlink-go/zlink/bench/peers/harness"
	"github.com/zlink-go/zlink/bench/peers/workload"
)

func main() {
	child := flag.Bool("child", false, "run one workload of one framework in this process (used by the harness)")
	framework := flag.String("framework", "", "with -child: zlink or protoactor")
	params := flag.String("params", "", "with -child: the workload's parameters as JSON")
	cpuProfile := flag.String("cpuprofile", "", "with -child: write a CPU profile of the run here")
	rounds := flag.Int("rounds", 3, "runs per framework and workload, alternating the frameworks")
	list := flag.String("workloads", "all", "comma-separated workloads, or all: "+names())
	tiny := flag.Bool("tiny", false, "run every workload at smoke-test size")
	out := flag.String("out", "../RESULTS.md", "write the results here (empty: do not write)")
	profile := flag.String("profile", "", "write a CPU profile of every ZLink child and ZLink server process into this directory (such runs measure no floor)")
	flag.Parse()

	if *child {
		// The harness holds this process's standard input: if the harness goes away, so does
		// the child.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(2)
		}()
		if err := runChild(*framework, *params, *cpuProfile); err != nil {
			fmt.Fprintln(os.Stderr, "peerbench child:", err)
			os.Exit(1)
		}
		// Exit without stopping the framework: the harness stops this process's etcd and
		// server, and nothing here outlives the process.
		os.Exit(0)
	}
	if err := orchestrate(*rounds, *list, *tiny, *out, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func names() string {
	s := make([]string, len(workload.All))
	for i, n := range workload.All {
		s[i] = string(n)
	}
	return strings.Join(s, ",")
}

func runChild(framework, params, cpuProfile string) error {
	var p workload.Params
	if err := json.Unmarshal([]byte(params), &p); err != nil {
		return fmt.Errorf("-params: %w", err)
	}
	return harness.RunChild(context.Background(), harness.Framework(framework), p, cpuProfile, os.Stdout)
}

// stallWindow is how long the probe of the machine's stalls spins before the runs.
const stallWindow = 2 * time.Second

func orchestrate(rounds int, list string, tiny bool, out, profile string) error {
	if rounds < 1 {
		return fmt.Errorf("-rounds must be at least 1")
	}
	order := workload.All
	if list != "all" {
		order = nil
		for _, n := range strings.Split(list, ",") {
			wl := workload.Name(strings.TrimSpace(n))
			if err := workload.Defaults(wl).Validate(); err != nil {
				return err
			}
			order = append(order, wl)
		}
	}
	params := workload.Defaults
	if tiny {
		params = workload.Tiny
	}
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return err
		}
	}
	begin := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	bin, cleanup, err := binaries()
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(os.Stderr, "peerbench: %d round(s) of %d workload(s); each run in a child process\n", rounds, len(order))
	stalls := harness.ProbeStalls(stallWindow)
	fmt.Fprintf(os.Stderr, "peerbench: stalls: %s\n", stalls)
	cpuBefore, cpuOK := harness.ReadCPUTimes()
	runs, err := harness.Run(ctx, harness.Config{
		Bin: bin, Rounds: rounds, Workloads: order, Params: params, ProfileDir: profile, Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	report := harness.Report{
		When: begin, Machine: harness.ThisMachine(), Rounds: rounds, Wall: time.Since(begin),
		Order: order, Params: params, Runs: runs, Versions: versions(), Stalls: &stalls,
	}
	if cpuAfter, ok := harness.ReadCPUTimes(); ok && cpuOK {
		if share, ok := harness.StealShare(cpuBefore, cpuAfter); ok {
			report.Steal = &share
		}
	}
	fmt.Println(report.Table())
	if t := harness.ProcessesTable(runs, order, params); t != "" {
		fmt.Printf("processor time and read/write system calls per operation, every process of the run: total (own + others)\n%s\n", t)
	}
	fmt.Printf("ratio = ZLink ÷ Proto.Actor; (*) a ZLink activation includes a linearizable etcd write, a Proto.Actor one does not.\n")
	fmt.Printf("medians of %d runs each; %s; wall time %s\n", rounds, report.Machine, report.Wall.Round(time.Second))
	if out != "" {
		if err := report.Write(out); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", out)
	}
	return nil
}

// binaries builds the helper processes and names this executable as the child.
func binaries() (harness.Binaries, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return harness.Binaries{}, nil, err
	}
	dir, err := os.MkdirTemp("", "peerbench-*")
	if err != nil {
		return harness.Binaries{}, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	const mod = "github.com/zlink-go/zlink/bench/peers/cmd/"
	paths, err := harness.Build(dir, mod+"etcdserve", mod+"zlserver", mod+"paserver")
	if err != nil {
		cleanup()
		return harness.Binaries{}, nil, err
	}
	return harness.Binaries{Peerbench: self, Etcd: paths[0], ZLServer: paths[1], PAServer: paths[2]}, cleanup, nil
}

// versions names the module versions this binary was built with.
func versions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	want := map[string]string{
		"github.com/asynkron/protoactor-go": "protoactor-go",
		"google.golang.org/grpc":            "grpc",
		"google.golang.org/protobuf":        "protobuf",
		"go.etcd.io/etcd/server/v3":         "etcd",
	}
	var parts []string
	for _, d := range info.Deps {
		if name, ok := want[d.Path]; ok {
			parts = append(parts, name+" "+d.Version)
		}
	}
	return "ZLink (this repository), " + strings.Join(parts, ", ")
}
