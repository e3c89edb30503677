package harness

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	CPUs       int
	GOMAXPROCS int
	CPUModel   string
	MemTotal   string
	GoVersion  string
	OS, Arch   string
}

// ThisMachine reads the machine's description: cores from runtime.NumCPU, memory from
// /proc/meminfo, the CPU model from /proc/cpuinfo where they exist.
func ThisMachine() Machine {
	m := Machine{
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, MemTotal: "unknown", CPUModel: "unknown",
	}
	if v, ok := procField("/proc/meminfo", "MemTotal"); ok {
		var kb int64
		if _, err := fmt.Sscanf(v, "%d kB", &kb); err == nil {
			m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	if v, ok := procField("/proc/cpuinfo", "model name"); ok {
		m.CPUModel = v
	}
	return m
}

// String is the one-line description.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores (runtime.NumCPU; GOMAXPROCS %d), %s, %s memory, %s %s/%s",
		m.CPUs, m.GOMAXPROCS, m.CPUModel, m.MemTotal, m.GoVersion, m.OS, m.Arch)
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
