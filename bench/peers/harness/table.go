package harness

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

// Unit is what the figures of a row count.
type Unit int

// The units of the table's figures.
const (
	// Rate is operations per second.
	Rate Unit = iota
	// Nanos is a latency in nanoseconds.
	Nanos
	// Bytes is an amount of memory in bytes.
	Bytes
)

// Row is one line of the table: one metric of one workload, the median over the rounds for
// each framework.
type Row struct {
	Workload string
	Metric   string
	// HigherBetter tells the direction: throughput rows are better higher, latency and memory
	// rows lower.
	HigherBetter bool
	// Unit is what ZLink and ProtoActor count.
	Unit              Unit
	ZLink, ProtoActor float64
}

// Ratio is ZLink ÷ Proto.Actor.
func (r Row) Ratio() float64 {
	if r.ProtoActor == 0 {
		return 0
	}
	return r.ZLink / r.ProtoActor
}

// Ahead names the framework whose figure is better.
func (r Row) Ahead() string {
	switch {
	case r.ZLink == r.ProtoActor:
		return "even"
	case (r.ZLink > r.ProtoActor) == r.HigherBetter:
		return "ZLink"
	default:
		return "Proto.Actor"
	}
}

// Label describes workload n with its parameters, as the table names it.
func Label(n workload.Name, p workload.Params) string {
	switch n {
	case workload.LocalCall1, workload.LocalCall64:
		return fmt.Sprintf("a. local request/reply, %d caller%s", p.Callers, plural(p.Callers))
	case workload.OneWay64:
		return fmt.Sprintf("b. one-way to %d objects, %d callers, %s msgs", p.Objects, p.Callers, count(p.Count))
	case workload.ColdActivation:
		return fmt.Sprintf("c. cold activation of %s IDs, %d callers (*)", count(p.Count), p.Callers)
	case workload.Steady10k, workload.Steady10k1024:
		return fmt.Sprintf("d. calls to %s active objects, %s callers", count(p.Objects), count(p.Callers))
	case workload.RemoteCall1, workload.RemoteCall64:
		return fmt.Sprintf("e. remote request/reply, 2 processes, %d caller%s", p.Callers, plural(p.Callers))
	case workload.RemoteColdActivation:
		return fmt.Sprintf("f. remote cold activation of %s IDs, 2 processes, %d callers (*)", count(p.Count), p.Callers)
	case workload.ActorCall64:
		return fmt.Sprintf("g. request/reply to an Actor, %d callers", p.Callers)
	case workload.ChannelCall64:
		return fmt.Sprintf("h. ClientServer channel, local server, %d callers", p.Callers)
	case workload.IdleFootprint:
		return fmt.Sprintf("i. idle footprint of %s active objects", count(p.Objects))
	case workload.Memory100k:
		return fmt.Sprintf("j. memory with %s active objects", count(p.Objects))
	}
	return string(n)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func count(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Rows turns the runs into table rows: medians over the rounds, per metric.
func Rows(runs Runs, order []workload.Name, params func(workload.Name) workload.Params) []Row {
	var rows []Row
	for _, wl := range order {
		byFw, ok := runs[wl]
		if !ok {
			continue
		}
		label := Label(wl, params(wl))
		med := func(f func(workload.Result) float64) (z, p float64) {
			return median(byFw[ZLink], f), median(byFw[ProtoActor], f)
		}
		rate := func(metric string) {
			z, p := med(workload.Result.Rate)
			rows = append(rows, Row{Workload: label, Metric: metric, HigherBetter: true, ZLink: z, ProtoActor: p})
		}
		bytes := func(metric string, f func(*workload.Memory) float64) {
			z, p := med(func(r workload.Result) float64 {
				if r.Memory == nil {
					return 0
				}
				return f(r.Memory)
			})
			rows = append(rows, Row{Workload: label, Metric: metric, Unit: Bytes, ZLink: z, ProtoActor: p})
		}
		switch wl {
		case workload.OneWay64:
			rate("handled msgs/s")
			continue
		case workload.ColdActivation, workload.RemoteColdActivation:
			rate("activations/s")
			continue
		case workload.IdleFootprint:
			bytes("live heap/object", func(m *workload.Memory) float64 { return m.LivePerObject })
			bytes("heap in use/object", func(m *workload.Memory) float64 { return m.InusePerObject })
			continue
		case workload.Memory100k:
			bytes("heap in use", func(m *workload.Memory) float64 { return m.HeapInuse })
			bytes("resident", func(m *workload.Memory) float64 { return m.Resident })
			bytes("peak resident", func(m *workload.Memory) float64 { return m.PeakResident })
			continue
		}
		rate("calls/s")
		for _, m := range []struct {
			name string
			f    func(*workload.Latency) float64
		}{
			{"p50", func(l *workload.Latency) float64 { return l.P50 }},
			{"p99", func(l *workload.Latency) float64 { return l.P99 }},
			{"p99.9", func(l *workload.Latency) float64 { return l.P999 }},
			{"mean", func(l *workload.Latency) float64 { return l.Mean }},
			{"max", func(l *workload.Latency) float64 { return l.Max }},
		} {
			z, p := med(func(r workload.Result) float64 {
				if r.Latency == nil {
					return 0
				}
				return m.f(r.Latency)
			})
			rows = append(rows, Row{Workload: label, Metric: "latency " + m.name, Unit: Nanos, ZLink: z, ProtoActor: p})
		}
	}
	return rows
}

// CeilingTable renders, for each workload whose ZLink runs measured a ceiling, the medians of
// ZLink's rate and of the ceiling and their ratio; "" when none did.
func CeilingTable(runs Runs, order []workload.Name, params func(workload.Name) workload.Params) string {
	var b strings.Builder
	for _, wl := range order {
		zl := runs[wl][ZLink]
		ceiling := median(zl, func(r workload.Result) float64 { return r.Ceiling })
		if ceiling == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| Workload | ZLink | etcd ceiling | ZLink ÷ ceiling |\n| --- | ---: | ---: | ---: |\n")
		}
		rate := median(zl, workload.Result.Rate)
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f |\n", Label(wl, params(wl)), fmtRate(rate), fmtRate(ceiling), rate/ceiling)
	}
	return b.String()
}

// CPUTable renders, for each workload whose measured window does no work in another process
// and whose runs of both frameworks measured their processor time, the medians over those
// runs of the processor time per operation, and their ratio; "" when none did. A framework
// some of whose runs measured none says how many did. The time is the whole process's,
// callers and scheduler included.
func CPUTable(runs Runs, order []workload.Name, params func(workload.Name) workload.Params) string {
	var b strings.Builder
	for _, wl := range order {
		if wl.Remote() || wl.Memory() || wl == workload.ColdActivation {
			continue // another process does part of the work: etcd, or the server
		}
		zl, zlNote := measuredCPU(runs[wl][ZLink])
		pa, paNote := measuredCPU(runs[wl][ProtoActor])
		if zl == 0 || pa == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| Workload | ZLink | Proto.Actor | ZLink ÷ Proto.Actor |\n| --- | ---: | ---: | ---: |\n")
		}
		fmt.Fprintf(&b, "| %s | %s%s | %s%s | %.2f |\n", Label(wl, params(wl)), fmtDur(zl*1e9), zlNote, fmtDur(pa*1e9), paNote, zl/pa)
	}
	return b.String()
}

// ProcessesTable renders, for each workload whose window counts work of other processes
// (etcd; a remote workload's server), the processor time and the read and write system calls
// per operation of every process of the run, for both frameworks and, where measured, the
// floor: each as the total, then the run's own process's and the others' parts in parentheses.
// Each cell is of the run whose total is the median (of an even number, the lower of the two in
// the middle), so that its parts add up; "" when no workload measured any.
func ProcessesTable(runs Runs, order []workload.Name, params func(workload.Name) workload.Params) string {
	var b strings.Builder
	for _, wl := range order {
		if !wl.Remote() && wl != workload.ColdActivation {
			continue
		}
		var zl, pa, floor []perOp
		for _, r := range runs[wl][ZLink] {
			zl = appendPerOp(zl, r.Processes, r.Ops)
			if r.Floor != nil {
				floor = appendPerOp(floor, r.Floor.Processes, r.Floor.Ops)
			}
		}
		for _, r := range runs[wl][ProtoActor] {
			pa = appendPerOp(pa, r.Processes, r.Ops)
		}
		if len(zl) == 0 || len(pa) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| Workload | ZLink | Proto.Actor | ZLink ÷ Proto.Actor | ZLink read/write calls | Proto.Actor read/write calls | floor | floor read/write calls |\n" +
				"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		}
		zt, zc := medianPerOp(zl, perOp.cpuTotal), medianPerOp(zl, perOp.callsTotal)
		pt, pc := medianPerOp(pa, perOp.cpuTotal), medianPerOp(pa, perOp.callsTotal)
		ft, fc := "—", "—"
		if len(floor) > 0 {
			ft, fc = medianPerOp(floor, perOp.cpuTotal).cpuCell(), medianPerOp(floor, perOp.callsTotal).callsCell()
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s | %s | %s | %s |\n", Label(wl, params(wl)),
			zt.cpuCell(), pt.cpuCell(), zt.cpuTotal()/pt.cpuTotal(), zc.callsCell(), pc.callsCell(), ft, fc)
	}
	return b.String()
}

// perOp is what the processes of one run used per operation: processor time in seconds and
// read and write system calls, each of the run's own process and of the others.
type perOp struct{ cpu, peerCPU, calls, peerCalls float64 }

func (p perOp) cpuTotal() float64   { return p.cpu + p.peerCPU }
func (p perOp) callsTotal() float64 { return p.calls + p.peerCalls }

func (p perOp) cpuCell() string {
	return fmt.Sprintf("%s (%s + %s)", fmtDur(p.cpuTotal()*1e9), fmtDur(p.cpu*1e9), fmtDur(p.peerCPU*1e9))
}

func (p perOp) callsCell() string {
	return fmt.Sprintf("%s (%s + %s)", fmtCalls(p.callsTotal()), fmtCalls(p.calls), fmtCalls(p.peerCalls))
}

// fmtCalls renders a count per operation as sig3 does, with three decimals below 1, where it
// is usually a fraction (calls shared by a batch of operations).
func fmtCalls(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return sig3(v)
}

// appendPerOp appends what procs measured over ops operations, if it measured anything.
func appendPerOp(to []perOp, procs *workload.Processes, ops int64) []perOp {
	cpu, peerCPU, calls, peerCalls, ok := procs.PerOp(ops)
	if !ok || cpu+peerCPU <= 0 {
		return to
	}
	return append(to, perOp{cpu, peerCPU, calls, peerCalls})
}

// medianPerOp is the run of rs whose by is the median; of an even number, the lower of the two
// in the middle; of equal ones, the earlier. rs is not empty.
func medianPerOp(rs []perOp, by func(perOp) float64) perOp {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b perOp) int { return cmp.Compare(by(a), by(b)) })
	return sorted[(len(sorted)-1)/2]
}

// measuredCPU is the median processor time per operation of the runs that measured it, and a
// note of how many did when some did not.
func measuredCPU(all []workload.Result) (float64, string) {
	var rs []workload.Result
	for _, r := range all {
		if r.CPUPerOp() > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 || len(rs) == len(all) {
		return median(rs, workload.Result.CPUPerOp), ""
	}
	return median(rs, workload.Result.CPUPerOp), fmt.Sprintf(" (%d of %d runs)", len(rs), len(all))
}

// FloorTable renders, for each workload whose ZLink runs measured a floor, the medians over
// those runs of ZLink's rate, the floor's, the ratio of the two in each run, and the p99.9 and
// maximum latency of both; "" when none did. A workload some of whose runs measured no floor
// says how many did.
func FloorTable(runs Runs, order []workload.Name, params func(workload.Name) workload.Params) string {
	var b strings.Builder
	for _, wl := range order {
		all := runs[wl][ZLink]
		var zl []workload.Result
		for _, r := range all {
			// A one-way floor has no latencies, as its row has none.
			if r.Floor != nil && r.Floor.Rate > 0 && (r.Latency == nil) == (r.Floor.Latency == nil) {
				zl = append(zl, r)
			}
		}
		if len(zl) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| Workload | ZLink | floor | ZLink ÷ floor | ZLink p99.9 | floor p99.9 | ZLink max | floor max |\n" +
				"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		}
		label := Label(wl, params(wl))
		if len(zl) < len(all) {
			label += fmt.Sprintf(" (%d of %d runs)", len(zl), len(all))
		}
		dur := func(f func(workload.Result) float64) string {
			if zl[0].Latency == nil {
				return "—"
			}
			return fmtDur(median(zl, f))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s | %s | %s | %s |\n", label,
			fmtRate(median(zl, workload.Result.Rate)),
			fmtRate(median(zl, func(r workload.Result) float64 { return r.Floor.Rate })),
			median(zl, func(r workload.Result) float64 { return r.Rate() / r.Floor.Rate }),
			dur(func(r workload.Result) float64 { return r.Latency.P999 }),
			dur(func(r workload.Result) float64 { return r.Floor.Latency.P999 }),
			dur(func(r workload.Result) float64 { return r.Latency.Max }),
			dur(func(r workload.Result) float64 { return r.Floor.Latency.Max }))
	}
	return b.String()
}

// TCPFloorTable renders, for each workload whose ZLink runs measured a floor over gRPC and one
// over bare TCP (remote request/reply), the medians over those runs of ZLink's rate and of both
// floors', the ratios in each run of the TCP floor to the gRPC floor and of ZLink to the TCP
// floor, and each floor's processor time per call of every process (of the run whose total is
// the median, as the processes table gives it); "" when none did. A workload some of whose
// runs measured no TCP floor says how many did.
func TCPFloorTable(runs Runs, order []workload.Name, params func(workload.Name) workload.Params) string {
	var b strings.Builder
	for _, wl := range order {
		all := runs[wl][ZLink]
		var zl []workload.Result
		for _, r := range all {
			if r.Floor != nil && r.Floor.Rate > 0 && r.TCPFloor != nil && r.TCPFloor.Rate > 0 {
				zl = append(zl, r)
			}
		}
		if len(zl) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| Workload | ZLink | gRPC floor | TCP floor | TCP floor ÷ gRPC floor | ZLink ÷ TCP floor | gRPC floor processor time | TCP floor processor time |\n" +
				"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		}
		label := Label(wl, params(wl))
		if len(zl) < len(all) {
			label += fmt.Sprintf(" (%d of %d runs)", len(zl), len(all))
		}
		var grpcCPU, tcpCPU []perOp
		for _, r := range zl {
			grpcCPU = appendPerOp(grpcCPU, r.Floor.Processes, r.Floor.Ops)
			tcpCPU = appendPerOp(tcpCPU, r.TCPFloor.Processes, r.TCPFloor.Ops)
		}
		cpu := func(p []perOp) string {
			if len(p) == 0 {
				return "—"
			}
			return medianPerOp(p, perOp.cpuTotal).cpuCell()
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f | %.2f | %s | %s |\n", label,
			fmtRate(median(zl, workload.Result.Rate)),
			fmtRate(median(zl, func(r workload.Result) float64 { return r.Floor.Rate })),
			fmtRate(median(zl, func(r workload.Result) float64 { return r.TCPFloor.Rate })),
			median(zl, func(r workload.Result) float64 { return r.TCPFloor.Rate / r.Floor.Rate }),
			median(zl, func(r workload.Result) float64 { return r.Rate() / r.TCPFloor.Rate }),
			cpu(grpcCPU), cpu(tcpCPU))
	}
	return b.String()
}

func median(rs []workload.Result, f func(workload.Result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// Table renders rows as a Markdown table, padded so that it reads in a terminal too.
func Table(rows []Row) string {
	header := []string{"Workload", "Metric", "Better", "ZLink", "Proto.Actor", "ZLink ÷ Proto.Actor", "Ahead"}
	cells := [][]string{header}
	for _, r := range rows {
		better := "higher"
		if !r.HigherBetter {
			better = "lower"
		}
		cells = append(cells, []string{r.Workload, r.Metric, better, r.format(r.ZLink), r.format(r.ProtoActor),
			fmt.Sprintf("%.2f", r.Ratio()), r.Ahead()})
	}
	width := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		b.WriteString("|")
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i >= 3 && i <= 5 {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(cells[0])
	b.WriteString("|")
	for i, w := range width {
		if i >= 3 && i <= 5 {
			b.WriteString(" " + strings.Repeat("-", w-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", w) + " |")
		}
	}
	b.WriteString("\n")
	for _, row := range cells[1:] {
		line(row)
	}
	return b.String()
}

func (r Row) format(v float64) string {
	switch r.Unit {
	case Nanos:
		return fmtDur(v)
	case Bytes:
		return fmtBytes(v)
	}
	return fmtRate(v)
}

// fmtBytes formats bytes in B, KiB, MiB or GiB, with about three significant digits.
func fmtBytes(v float64) string {
	switch {
	case v >= 1<<30:
		return sig3(v/(1<<30)) + " GiB"
	case v >= 1<<20:
		return sig3(v/(1<<20)) + " MiB"
	case v >= 1<<10:
		return sig3(v/(1<<10)) + " KiB"
	}
	return fmt.Sprintf("%.0f B", v)
}

// fmtDur formats nanoseconds with a unit that keeps three significant digits.
func fmtDur(ns float64) string {
	switch {
	case ns >= 1e9:
		return sig3(ns/1e9) + " s"
	case ns >= 1e6:
		return sig3(ns/1e6) + " ms"
	case ns >= 1e3:
		return sig3(ns/1e3) + " µs"
	}
	return fmt.Sprintf("%.0f ns", ns)
}

// fmtRate formats operations per second.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return sig3(v/1e6) + " M/s"
	case v >= 1e3:
		return sig3(v/1e3) + " k/s"
	}
	return sig3(v) + " /s"
}

// sig3 formats v with about three significant digits and no exponent.
func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
