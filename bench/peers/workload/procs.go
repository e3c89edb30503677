package workload

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// Processes is what every process of a run used in its measured window: the run's own process
// (the callers and, in a one-process workload, the framework) and the others whose work the
// window includes (the server process of a remote workload, etcd).
type Processes struct {
	// CPUSeconds and PeerCPUSeconds are the processor time, user and system, of the run's own
	// process and of the others together.
	CPUSeconds     float64 `json:"cpu_seconds"`
	PeerCPUSeconds float64 `json:"peer_cpu_seconds"`
	// Syscalls and PeerSyscalls are the read and write system calls (the read and write
	// families: a socket's reads and writes, not its polls or wake-ups) of the run's own
	// process and of the others together.
	Syscalls     int64 `json:"syscalls"`
	PeerSyscalls int64 `json:"peer_syscalls"`
}

// peers are the other processes of this run whose work a window counts (SetPeers).
var peers atomic.Pointer[[]int]

// SetPeers names, by process ID, the other processes of this run whose work its measured
// windows include: each window then also reports what they used (Result.Processes). A run's
// child process sets them once, before its first window; a run without them reports its own
// process alone.
func SetPeers(pids []int) {
	p := append([]int(nil), pids...)
	peers.Store(&p)
}

// usage is a reading of what the run's processes have used so far.
type usage struct {
	cpu, peerCPU           time.Duration
	syscalls, peerSyscalls int64
}

// readUsage reads what this process and the peers, if any, have used so far; ok is false when
// one of them could not be read.
func readUsage() (u usage, ok bool) {
	var pids []int
	if p := peers.Load(); p != nil {
		pids = *p
	}
	var err error
	if u.cpu = ProcessCPU(); u.cpu < 0 {
		return usage{}, false
	}
	if u.syscalls, err = readWriteSyscalls("self"); err != nil {
		return usage{}, false
	}
	for _, pid := range pids {
		id := strconv.Itoa(pid)
		cpu, err := processCPUOf(id)
		if err != nil {
			return usage{}, false
		}
		calls, err := readWriteSyscalls(id)
		if err != nil {
			return usage{}, false
		}
		u.peerCPU += cpu
		u.peerSyscalls += calls
	}
	return u, true
}

// since is what was used between start and u.
func (u usage) since(start usage) *Processes {
	return &Processes{
		CPUSeconds: (u.cpu - start.cpu).Seconds(), PeerCPUSeconds: (u.peerCPU - start.peerCPU).Seconds(),
		Syscalls: u.syscalls - start.syscalls, PeerSyscalls: u.peerSyscalls - start.peerSyscalls,
	}
}

// clockTick is the unit of the processor times in /proc/<pid>/stat: Linux reports them in
// USER_HZ, which is 100 on every architecture.
const clockTick = 10 * time.Millisecond

// processCPUOf is the processor time, user and system, that process pid has used so far, from
// /proc/<pid>/stat, to the nearest clock tick.
func processCPUOf(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces and parentheses: the fields that
	// follow start after the last ')'. utime and stime are the 14th and 15th fields of the
	// line, the 12th and 13th after the name.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%s/stat has no command name", pid)
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat has %d fields after the command name", pid, len(f))
	}
	utime, err := strconv.ParseInt(string(f[11]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: utime: %w", pid, err)
	}
	stime, err := strconv.ParseInt(string(f[12]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: stime: %w", pid, err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// readWriteSyscalls is how many read and write system calls process pid ("self" for this one)
// has made so far, from /proc/<pid>/io.
func readWriteSyscalls(pid string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0, err
	}
	var n int64
	found := 0
	for line := range bytes.Lines(b) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || (string(name) != "syscr" && string(name) != "syscw") {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%s/io: %s: %w", pid, name, err)
		}
		n += v
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("/proc/%s/io has no syscr and syscw", pid)
	}
	return n, nil
}
