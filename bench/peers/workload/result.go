package workload

import (
	"slices"
	"time"
)

// Result is what one run measured.
type Result struct {
	// Ops is the number of operations completed in the measured window (messages handled,
	// objects activated, calls answered).
	Ops int64 `json:"ops"`
	// Seconds is the measured window.
	Seconds float64 `json:"seconds"`
	// Latency summarizes the per-call latency, for the request/reply workloads.
	Latency *Latency `json:"latency,omitempty"`
	// Pushbacks counts sends refused with a full queue and tried again (ZLink one-way).
	Pushbacks int64 `json:"pushbacks,omitempty"`
	// Ceiling is what etcd allows for the same work, measured in the same run (ZLink cold
	// activation: the same two writes per activation with ideal batching), in operations per
	// second; 0 when not measured.
	Ceiling float64 `json:"ceiling,omitempty"`
	// Floor is what the same calls reach with no runtime, measured in the same run (ZLink
	// request/reply: locally through a channel to one goroutine, remotely over a bare gRPC
	// stream to the server process); nil when not measured.
	Floor *Floor `json:"floor,omitempty"`
	// TCPFloor is what the same calls reach over one bare TCP connection with the remote
	// floor's design, measured just before or after Floor (ZLink remote request/reply): Floor
	// against it is what gRPC's own work costs them; nil when not measured.
	TCPFloor *Floor `json:"tcp_floor,omitempty"`
	// Memory is what a memory workload measured; Ops and Seconds are then its activations.
	Memory *Memory `json:"memory,omitempty"`
	// CPUSeconds is the processor time, user and system, that the whole process used in the
	// measured window: the framework's goroutines and the callers' alike; 0 when not measured.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// Processes is what every process of the run used in the measured window: its own and
	// its peers (SetPeers); nil when not measured.
	Processes *Processes `json:"processes,omitempty"`
}

// CPUPerOp is the processor time per operation in seconds, or 0 when it was not measured.
func (r Result) CPUPerOp() float64 {
	if r.Ops <= 0 || r.CPUSeconds <= 0 {
		return 0
	}
	return r.CPUSeconds / float64(r.Ops)
}

// Floor is what a floor probe reached, in a window of its own after ZLink's (right after it,
// but for a remote row's floor measured second, after the other floor's window), in the same
// run: its calls per second, the most the same callers reach there with no runtime, and their
// latency.
type Floor struct {
	// Rate is the probe's calls per second.
	Rate float64 `json:"rate"`
	// Latency summarizes the probe's call latencies; FloorOf always sets it.
	Latency *Latency `json:"latency"`
	// Ops is the probe's calls in its window, and Processes what the run's processes used
	// in it (Result.Processes), when measured.
	Ops       int64      `json:"ops,omitempty"`
	Processes *Processes `json:"processes,omitempty"`
}

// FloorOf is the floor that r, a floor probe's run, measured.
func FloorOf(r Result) *Floor {
	return &Floor{Rate: r.Rate(), Latency: r.Latency, Ops: r.Ops, Processes: r.Processes}
}

// PerOp is the processor time and the read and write system calls per operation of every
// process of a run that made ops operations: each as the run's own process's plus the
// others'. ok is false when p or ops is zero.
func (p *Processes) PerOp(ops int64) (cpu, peerCPU, syscalls, peerSyscalls float64, ok bool) {
	if p == nil || ops <= 0 {
		return 0, 0, 0, 0, false
	}
	n := float64(ops)
	return p.CPUSeconds / n, p.PeerCPUSeconds / n, float64(p.Syscalls) / n, float64(p.PeerSyscalls) / n, true
}

// Rate is operations per second.
func (r Result) Rate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Seconds
}

// Latency is a summary of call latencies, in nanoseconds.
type Latency struct {
	P50  float64 `json:"p50_ns"`
	P99  float64 `json:"p99_ns"`
	P999 float64 `json:"p999_ns"`
	Mean float64 `json:"mean_ns"`
	Max  float64 `json:"max_ns"`
}

// Summarize sorts lat in place and summarizes it; nil when lat is empty.
func Summarize(lat []time.Duration) *Latency {
	if len(lat) == 0 {
		return nil
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Nanoseconds())
	}
	var sum float64
	for _, d := range lat {
		sum += float64(d.Nanoseconds())
	}
	return &Latency{
		P50:  pct(0.50),
		P99:  pct(0.99),
		P999: pct(0.999),
		Mean: sum / float64(len(lat)),
		Max:  float64(lat[len(lat)-1].Nanoseconds()),
	}
}
