package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

// Binaries are the executables the harness starts.
type Binaries struct {
	// Peerbench runs one workload as a child ("-child").
	Peerbench string
	// Etcd serves etcd for one ZLink run; ZLServer and PAServer are the remote workloads'
	// server processes.
	Etcd, ZLServer, PAServer string
}

// Config is what Run runs.
type Config struct {
	Bin       Binaries
	Rounds    int
	Workloads []workload.Name
	// Params gives the parameters of a workload.
	Params func(workload.Name) workload.Params
	// ProfileDir, when set, receives a CPU profile of every ZLink child,
	// zlink-<workload>-<round>.pprof, and of the ZLink server process of the remote workloads,
	// zlserver-<workload>-<round>.pprof; the runs then measure no floors (Result.Floor).
	ProfileDir string
	// Log receives one progress line per run.
	Log io.Writer
}

// Runs holds every run's result: Runs[workload][framework] in round order.
type Runs map[workload.Name]map[Framework][]workload.Result

// Run runs every workload Rounds times, alternating the frameworks within each round
// (ZLink, Proto.Actor, ZLink, ...), each run in a child process of its own with its own etcd
// (ZLink, and Proto.Actor's remote grains) and server process (remote workloads). Every process it starts is stopped before it
// returns, on error too.
func Run(ctx context.Context, cfg Config) (Runs, error) {
	defer StopAll()
	runs := Runs{}
	for _, wl := range cfg.Workloads {
		runs[wl] = map[Framework][]workload.Result{}
		for round := 1; round <= cfg.Rounds; round++ {
			for _, fw := range Frameworks {
				if err := ctx.Err(); err != nil {
					return runs, err
				}
				start := time.Now()
				res, err := runOne(ctx, cfg, fw, wl, round)
				if err != nil {
					return runs, fmt.Errorf("%s %s round %d: %w", fw, wl, round, err)
				}
				runs[wl][fw] = append(runs[wl][fw], res)
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "round %d/%d  %-10s %-22s %12s%s  (%.1fs)\n", round, cfg.Rounds,
						fw, wl, figure(wl, res), latencyNote(res), time.Since(start).Seconds())
				}
			}
		}
	}
	return runs, nil
}

func latencyNote(r workload.Result) string {
	note := ""
	if r.Latency != nil {
		note = fmt.Sprintf("  p50 %s  p99 %s  max %s", fmtDur(r.Latency.P50), fmtDur(r.Latency.P99), fmtDur(r.Latency.Max))
	}
	if c := r.CPUPerOp(); c > 0 {
		note += fmt.Sprintf("  cpu %s/op", fmtDur(c*1e9))
	}
	if r.Ceiling > 0 {
		note += fmt.Sprintf("  (etcd ceiling %s, ratio %.2f)", fmtRate(r.Ceiling), r.Rate()/r.Ceiling)
	}
	if f := r.Floor; f != nil && f.Latency != nil {
		note += fmt.Sprintf("  (floor %s, p50 %s, p99 %s, max %s)", fmtRate(f.Rate), fmtDur(f.Latency.P50), fmtDur(f.Latency.P99), fmtDur(f.Latency.Max))
	} else if f != nil {
		note += fmt.Sprintf("  (floor %s)", fmtRate(f.Rate))
	}
	if f := r.TCPFloor; f != nil && f.Latency != nil {
		note += fmt.Sprintf("  (TCP floor %s, p50 %s, p99 %s, max %s)", fmtRate(f.Rate), fmtDur(f.Latency.P50), fmtDur(f.Latency.P99), fmtDur(f.Latency.Max))
	}
	return note
}

// runOne starts what the run needs, runs the child and stops everything again.
func runOne(ctx context.Context, cfg Config, fw Framework, wl workload.Name, round int) (workload.Result, error) {
	p := cfg.Params(wl)
	// A profile holds ZLink's work only: the floors' gRPC frames would mix with its own.
	p.NoFloor = p.NoFloor || cfg.ProfileDir != ""
	p.TCPFloorFirst = round%2 == 0
	var deps []*Proc
	defer func() {
		for i := len(deps) - 1; i >= 0; i-- {
			deps[i].Stop()
		}
	}()
	startDep := func(path string, args ...string) (string, error) {
		proc, err := Start(path, args...)
		if err != nil {
			return "", err
		}
		deps = append(deps, proc)
		return proc.Expect(ctx, "ready ", time.Minute)
	}
	if fw == ZLink || wl.RemoteGrains() {
		eps, err := startDep(cfg.Bin.Etcd)
		if err != nil {
			return workload.Result{}, err
		}
		p.Etcd = strings.Split(eps, ",")
	}
	if wl.Remote() {
		var err error
		switch {
		case fw == ZLink:
			args := []string{"-etcd", strings.Join(p.Etcd, ",")}
			if cfg.ProfileDir != "" {
				args = append(args, "-cpuprofile", filepath.Join(cfg.ProfileDir, fmt.Sprintf("zlserver-%s-%d.pprof", wl, round)))
			}
			var ready string
			if ready, err = startDep(cfg.Bin.ZLServer, args...); err == nil {
				f := strings.Fields(ready)
				if len(f) != 3 {
					return workload.Result{}, fmt.Errorf("zlserver's ready line %q is not \"<node> <gRPC echo address> <TCP echo address>\"", ready)
				}
				p.Floor, p.TCPFloor = f[1], f[2]
			}
		case wl.RemoteGrains():
			_, err = startDep(cfg.Bin.PAServer, "-etcd", strings.Join(p.Etcd, ","))
		default:
			p.Server, err = startDep(cfg.Bin.PAServer)
		}
		if err != nil {
			return workload.Result{}, err
		}
	}
	for _, d := range deps {
		p.Peers = append(p.Peers, d.Pid())
	}
	params, err := json.Marshal(p)
	if err != nil {
		return workload.Result{}, err
	}
	args := []string{"-child", "-framework", string(fw), "-params", string(params)}
	if cfg.ProfileDir != "" && fw == ZLink {
		args = append(args, "-cpuprofile", filepath.Join(cfg.ProfileDir, fmt.Sprintf("zlink-%s-%d.pprof", wl, round)))
	}
	child, err := Start(cfg.Bin.Peerbench, args...)
	if err != nil {
		return workload.Result{}, err
	}
	defer child.Stop()
	line, err := child.Expect(ctx, resultPrefix, time.Duration(p.Windows())*(p.Warmup+p.Duration)+10*p.Timeout+time.Minute)
	if err != nil {
		return workload.Result{}, err
	}
	var res workload.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return workload.Result{}, fmt.Errorf("child result %q: %w", line, err)
	}
	if err := child.Wait(30 * time.Second); err != nil {
		return workload.Result{}, fmt.Errorf("child: %w; its stderr ends:\n%s", err, child.Stderr())
	}
	if cfg.ProfileDir != "" && fw == ZLink {
		// The profilers' own time is in them, and Proto.Actor runs unprofiled.
		res.CPUSeconds, res.Processes = 0, nil
	}
	return res, nil
}
