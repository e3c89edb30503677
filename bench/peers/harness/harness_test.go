package harness

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

// TestSmoke runs every workload of both frameworks at smoke-test size through the real
// harness: child processes, an etcd process per ZLink run (and for Proto.Actor's remote
// grains), server processes for the remote workloads. Each child checks its own results; here the table must have a figure everywhere.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	const mod = "github.com/zlink-go/zlink/bench/peers/cmd/"
	paths, err := Build(t.TempDir(), mod+"peerbench", mod+"etcdserve", mod+"zlserver", mod+"paserver")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := Run(context.Background(), Config{
		Bin:    Binaries{Peerbench: paths[0], Etcd: paths[1], ZLServer: paths[2], PAServer: paths[3]},
		Rounds: 1, Workloads: workload.All, Params: workload.Tiny, Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := Rows(runs, workload.All, workload.Tiny)
	// Eight workloads with a rate and five latency rows, three with a rate only, and the memory
	// workloads' two and three rows.
	require.Len(t, rows, 8*6+3+2+3)
	for _, r := range rows {
		if r.ZLink <= 0 || r.ProtoActor <= 0 {
			t.Errorf("row %s %s has no figure: %+v", r.Workload, r.Metric, r)
		}
	}
	for _, wl := range []workload.Name{workload.LocalCall1, workload.LocalCall64, workload.RemoteCall1, workload.RemoteCall64, workload.OneWay64} {
		require.NotNil(t, runs[wl][ZLink][0].Floor, "%s: the ZLink run measured no floor", wl)
	}
	for _, wl := range []workload.Name{workload.RemoteCall1, workload.RemoteCall64} {
		require.NotNil(t, runs[wl][ZLink][0].TCPFloor, "%s: the ZLink run measured no TCP floor", wl)
	}
	// The remote runs count their server process's work: it reads and writes every batch.
	for _, fw := range Frameworks {
		procs := runs[workload.RemoteCall64][fw][0].Processes
		require.NotNil(t, procs, "%s: the remote run measured no processes", fw)
		require.Positive(t, procs.PeerSyscalls, "%s: the server process read and wrote nothing in the window", fw)
	}
	md := Report{Machine: ThisMachine(), Rounds: 1, Order: workload.All, Params: workload.Tiny, Runs: runs}.Markdown()
	for _, want := range []string{"| a. local request/reply, 1 caller ", "linearizable etcd write", "cores",
		"| f. remote cold activation of 100 IDs", "ZLink ÷ floor", "TCP floor ÷ gRPC floor", "| — | — | — | — |", "| j. memory with 1,000 active objects", "round-robin pool router", "read/write system calls per operation"} {
		if !strings.Contains(md, want) {
			t.Errorf("RESULTS.md lacks %q", want)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + md)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}
