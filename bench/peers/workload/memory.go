package workload

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Memory is what a memory workload measured, in bytes.
type Memory struct {
	// Objects is the number of active objects the figures are for.
	Objects int `json:"objects"`
	// LivePerObject is the growth of the live heap (runtime.MemStats.HeapAlloc right after a
	// collection) from before the first activation to after the last, divided by Objects.
	LivePerObject float64 `json:"live_per_object"`
	// InusePerObject is the same for the heap's spans in use (HeapInuse), which counts the
	// free room of partly used spans too.
	InusePerObject float64 `json:"inuse_per_object"`
	// HeapInuse is the whole process's HeapInuse at the end, after a collection.
	HeapInuse float64 `json:"heap_inuse"`
	// Resident is the process's resident set (VmRSS) at the end, after
	// debug.FreeOSMemory returned what the heap does not use to the operating system.
	Resident float64 `json:"resident"`
	// PeakResident is the most the process held resident at any time of the run (VmHWM).
	PeakResident float64 `json:"peak_resident"`
}

// HeapMark is a reading of the heap after a collection, to measure growth from.
type HeapMark struct {
	live, inuse uint64
}

// MarkHeap collects garbage and reads the heap. The goroutines that ended just before may not
// have exited yet, so it waits a little first.
func MarkHeap() HeapMark {
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return HeapMark{live: ms.HeapAlloc, inuse: ms.HeapInuse}
}

// MeasureMemory completes a memory workload's measurement: the heap's growth since before and
// the process's memory now, for objects active objects. It collects garbage and returns free
// memory to the operating system.
func MeasureMemory(before HeapMark, objects int) (*Memory, error) {
	after := MarkHeap()
	debug.FreeOSMemory()
	rss, err := procStatusBytes("VmRSS")
	if err != nil {
		return nil, err
	}
	hwm, err := procStatusBytes("VmHWM")
	if err != nil {
		return nil, err
	}
	return &Memory{
		Objects:        objects,
		LivePerObject:  (float64(after.live) - float64(before.live)) / float64(objects),
		InusePerObject: (float64(after.inuse) - float64(before.inuse)) / float64(objects),
		HeapInuse:      float64(after.inuse),
		Resident:       float64(rss),
		PeakResident:   float64(hwm),
	}, nil
}

// procStatusBytes reads a "Key: N kB" line of /proc/self/status.
func procStatusBytes(key string) (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		var kb uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
			return 0, fmt.Errorf("/proc/self/status %s: %w", key, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/self/status has no %s", key)
}
