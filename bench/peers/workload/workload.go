// Package workload defines the side-by-side benchmarks' workloads, the parameters and result of
// one run, and the closed-loop drivers that both frameworks' implementations use, so that both
// are measured by the same code.
package workload

import (
	"fmt"
	"time"
)

// Name identifies a workload.
type Name string

// The workloads, in the order the table lists them.
const (
	// LocalCall1 is request/reply to one active object on the same node, one caller.
	LocalCall1 Name = "local-call-1"
	// LocalCall64 is the same with 64 callers.
	LocalCall64 Name = "local-call-64"
	// OneWay64 is one-way sends from 64 callers to 64 objects, counted when handled.
	OneWay64 Name = "oneway-64"
	// ColdActivation is the first call to each of many distinct IDs, 64 callers.
	ColdActivation Name = "cold-activation"
	// Steady10k is request/reply to 10,000 active objects, 64 callers.
	Steady10k Name = "steady-10k"
	// Steady10k1024 is the same with 1,024 callers.
	Steady10k1024 Name = "steady-10k-1024"
	// RemoteCall1 is request/reply to an object in another process, one caller.
	RemoteCall1 Name = "remote-call-1"
	// RemoteCall64 is the same with 64 callers.
	RemoteCall64 Name = "remote-call-64"
	// RemoteColdActivation is the first call to each of many distinct IDs hosted by another
	// process, 64 callers.
	RemoteColdActivation Name = "remote-cold-activation"
	// ActorCall64 is request/reply to one Actor (ZLink) or plain actor (Proto.Actor), 64
	// callers.
	ActorCall64 Name = "actor-call-64"
	// ChannelCall64 is request/reply to a local stateless server reached through a router:
	// a ClientServer channel (ZLink) or a round-robin pool (Proto.Actor), 64 callers.
	ChannelCall64 Name = "channel-call-64"
	// IdleFootprint is the heap that each idle active object holds.
	IdleFootprint Name = "idle-footprint"
	// Memory100k is the memory of a process with 100,000 active objects.
	Memory100k Name = "memory-100k"
)

// All lists every workload in table order.
var All = []Name{
	LocalCall1, LocalCall64, OneWay64, ColdActivation, Steady10k, Steady10k1024, RemoteCall1, RemoteCall64,
	RemoteColdActivation, ActorCall64, ChannelCall64, IdleFootprint, Memory100k,
}

// Remote reports whether the workload needs a server process.
func (n Name) Remote() bool {
	return n == RemoteCall1 || n == RemoteCall64 || n == RemoteColdActivation
}

// RemoteGrains reports whether the Proto.Actor side of the workload is a cluster across two
// processes: its server process is a cluster member on the etcd provider, so the Proto.Actor
// run needs an etcd process too.
func (n Name) RemoteGrains() bool { return n == RemoteColdActivation }

// Memory reports whether the workload measures memory rather than time.
func (n Name) Memory() bool { return n == IdleFootprint || n == Memory100k }

// Params configures one run of a workload.
type Params struct {
	Workload Name
	// Callers is the number of concurrent callers.
	Callers int
	// Warmup runs before measuring; Duration is how long a duration-bound workload measures.
	Warmup, Duration time.Duration
	// Count is the number of messages (OneWay64) or of distinct IDs (ColdActivation,
	// RemoteColdActivation).
	Count int
	// Objects is the number of target objects (OneWay64, Steady10k, Steady10k1024,
	// IdleFootprint, Memory100k).
	Objects int
	// Etcd are the etcd endpoints a ZLink node uses, and those of the Proto.Actor cluster of a
	// RemoteGrains workload.
	Etcd []string
	// Server is the address of the Proto.Actor server process (remote workloads).
	Server string
	// Floor is the address of the bare gRPC echo that the ZLink server process serves, which
	// the remote request/reply runs measure their floor on; TCPFloor that of its echo over bare
	// TCP, which they measure their TCP floor on.
	Floor, TCPFloor string
	// NoFloor skips the floor probes: a profiled run then holds ZLink's work only.
	NoFloor bool
	// TCPFloorFirst measures the TCP floor before the gRPC floor: the harness alternates the
	// two from round to round, so that a drift within a run (the heap, the processors' heat)
	// does not always fall on the same one.
	TCPFloorFirst bool
	// Timeout bounds every single call and every wait of the run.
	Timeout time.Duration
	// Peers are the process IDs of the run's other processes (etcd, the server process),
	// whose work its measured windows count too (Result.Processes).
	Peers []int
}

// HasFloor reports whether a ZLink run of the workload measures a floor (Result.Floor).
func (n Name) HasFloor() bool {
	switch n {
	case LocalCall1, LocalCall64, RemoteCall1, RemoteCall64, OneWay64, ChannelCall64:
		return true
	}
	return false
}

// Windows is how many measured windows (Warmup and Duration) a run of p takes: two when a
// floor is measured for as long after ZLink's window, three when a remote request/reply run
// measures its gRPC and TCP floors after it. The one-way floor sends Count messages instead.
func (p Params) Windows() int {
	switch {
	case !p.Workload.HasFloor() || p.NoFloor || p.Workload == OneWay64:
		return 1
	case p.Workload == RemoteCall1 || p.Workload == RemoteCall64:
		return 3
	}
	return 2
}

// Defaults returns the full-size parameters of workload n.
func Defaults(n Name) Params {
	p := Params{Workload: n, Callers: 64, Warmup: 300 * time.Millisecond, Duration: 3 * time.Second, Timeout: 30 * time.Second}
	switch n {
	case LocalCall1, RemoteCall1:
		p.Callers = 1
	case OneWay64:
		p.Count, p.Objects = 2_000_000, 64
	case ColdActivation:
		p.Count = 100_000
	case RemoteColdActivation:
		p.Count = 20_000
	case Steady10k:
		p.Objects = 10_000
	case Steady10k1024:
		p.Objects, p.Callers = 10_000, 1024
	case IdleFootprint, Memory100k:
		p.Objects = 100_000
	}
	return p
}

// Tiny returns parameters of workload n small enough for a smoke test: about 100 operations.
func Tiny(n Name) Params {
	p := Defaults(n)
	p.Warmup, p.Duration = 10*time.Millisecond, 50*time.Millisecond
	p.Timeout = 20 * time.Second
	switch n {
	case RemoteCall1, RemoteCall64:
		// A framework's first calls to the other process may take it tens of milliseconds (its
		// connection, its first batches): the window starts after them, and is long enough
		// that both processes read and write in it.
		p.Warmup, p.Duration = 200*time.Millisecond, 100*time.Millisecond
	case OneWay64:
		p.Count, p.Objects = 640, 64
	case ColdActivation, RemoteColdActivation:
		p.Count = 100
	case Steady10k, Steady10k1024:
		p.Objects = 100
	case IdleFootprint, Memory100k:
		p.Objects = 1000
	}
	return p
}

// Validate checks the parameters that the workload uses.
func (p Params) Validate() error {
	if p.Callers <= 0 {
		return fmt.Errorf("workload %s: callers must be positive", p.Workload)
	}
	if p.Timeout <= 0 {
		return fmt.Errorf("workload %s: timeout must be positive", p.Workload)
	}
	switch p.Workload {
	case OneWay64:
		if p.Count <= 0 || p.Objects <= 0 {
			return fmt.Errorf("workload %s: count and objects must be positive", p.Workload)
		}
	case ColdActivation, RemoteColdActivation:
		if p.Count <= 0 {
			return fmt.Errorf("workload %s: count must be positive", p.Workload)
		}
	case Steady10k, Steady10k1024:
		if p.Objects <= 0 || p.Duration <= 0 {
			return fmt.Errorf("workload %s: objects and duration must be positive", p.Workload)
		}
	case IdleFootprint, Memory100k:
		if p.Objects <= 0 {
			return fmt.Errorf("workload %s: objects must be positive", p.Workload)
		}
	case LocalCall1, LocalCall64, RemoteCall1, RemoteCall64, ActorCall64, ChannelCall64:
		if p.Duration <= 0 {
			return fmt.Errorf("workload %s: duration must be positive", p.Workload)
		}
	default:
		return fmt.Errorf("unknown workload %q", p.Workload)
	}
	return nil
}
