package harness

import (
	"strings"
	"testing"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

func TestMedianAndDirection(t *testing.T) {
	runs := Runs{workload.OneWay64: {
		ZLink:      {{Ops: 300, Seconds: 1}, {Ops: 100, Seconds: 1}, {Ops: 200, Seconds: 1}},
		ProtoActor: {{Ops: 400, Seconds: 1}, {Ops: 400, Seconds: 2}, {Ops: 100, Seconds: 1}},
	}}
	rows := Rows(runs, []workload.Name{workload.OneWay64}, workload.Defaults)
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	if r.ZLink != 200 || r.ProtoActor != 200 || r.Ahead() != "even" {
		t.Fatalf("row %+v", r)
	}
	lat := Row{Latency: true, ZLink: 1, ProtoActor: 2}
	if lat.Ahead() != "ZLink" || lat.Ratio() != 0.5 {
		t.Fatalf("lower latency is better: %+v", lat)
	}
}

func TestFormats(t *testing.T) {
	for in, want := range map[float64]string{999.6e6: "1000 ms", 1.5e9: "1.50 s", 412: "412 ns", 12345: "12.3 µs"} {
		if got := fmtDur(in); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", in, got, want)
		}
	}
	if got := fmtRate(2_345_678); got != "2.35 M/s" {
		t.Errorf("fmtRate = %q", got)
	}
	if got := count(100000); got != "100,000" {
		t.Errorf("count = %q", got)
	}
	if !strings.Contains(Table([]Row{{Workload: "w", Metric: "m", HigherBetter: true, ZLink: 2, ProtoActor: 1}}), " 2.00 |") {
		t.Error("ratio cell missing")
	}
}
