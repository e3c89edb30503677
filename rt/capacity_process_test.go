package rt_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// residentKiB reads a field of /proc/<pid>/status (VmRSS, VmHWM) in KiB.
func residentKiB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// E1, E6 across processes: 64 callers send 1 MiB messages to one slow Spot of a node process
// for 10 s. The node runs under GOMEMLIMIT=128MiB, so its Core HWM is a quarter of that, 32 MiB,
// and its lanes are made far larger than that, so that only the Core HWM bounds what it holds.
// Its resident memory stays under the memory limit plus 64 MiB, nothing crashes, every call ends
// with a reply or a typed capacity error by its deadline, and another node's calls to other
// Spots keep working during the flood.
func TestE6_FloodAcrossProcessesStaysWithinTheBudget(t *testing.T) {
	if os.Getenv("ZLINK_FLOOD") == "" {
		t.Skip("a 10 s flood that needs the machine to itself: make flood")
	}
	const (
		memoryLimit = 128 << 20
		budget      = memoryLimit / 4
		payload     = 1 << 20
		callers     = 64
		flood       = 10 * time.Second
	)
	// etcd runs in a process of its own, out of reach of the load this process makes.
	_, etcdEndpoints := proctest.EtcdProcess(t, "-nofsync")
	endpoints := strings.Join(etcdEndpoints, ",")

	bin := proctest.BuildWithoutRace(t, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	node := proctest.Start(t, bin, []string{"GOMEMLIMIT=128MiB"},
		"-etcd", endpoints, "-node", "receiver", "-quiet", "-record-delay", "20ms", "-lease-ttl", "10s",
		"-max-message", fmt.Sprint(2<<20), "-lane-bytes", fmt.Sprint(4<<30))
	_, err := node.Expect("ready ", 60*time.Second)
	require.NoError(t, err)
	t.Cleanup(node.Stop)

	client := func(id string) *rt.Host {
		cfg := rt.DefaultConfig()
		cfg.NodeID = sdk.NodeID(id)
		cfg.EtcdEndpoints = etcdEndpoints
		cfg.Roles = rt.RoleObjectClient
		cfg.MaxMessageSize = 2 << 20
		cfg.LeaseTTL = 10 * time.Second
		cfg.Logger = slog.New(slog.DiscardHandler)
		h, err := rt.Start(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	flooder, bystander := client("flooder"), client("bystander")
	warm(t, flooder, "slow")
	for i := range 4 {
		warm(t, bystander, fmt.Sprint("calm-", i))
	}
	baseline, err := residentKiB(node.Pid(), "VmRSS")
	require.NoError(t, err)

	var maxRSS int64
	// One message for every call: the flood costs this process as little as it can.
	run := startFlood(flooder, bystander, callers, 2*time.Second, wrapperspb.String("flood-"+strings.Repeat("z", payload-64)), func() {
		if rss, err := residentKiB(node.Pid(), "VmRSS"); err == nil {
			maxRSS = max(maxRSS, rss)
		}
	})
	time.Sleep(flood)
	run.end()
	got := &run.got

	hwm, err := residentKiB(node.Pid(), "VmHWM")
	require.NoError(t, err, "the node process is still running")
	require.NoError(t, node.Signal(syscall.SIGTERM))
	line, err := node.Expect("capacity ", 30*time.Second)
	require.NoError(t, err)
	var peak, effective uint64
	_, err = fmt.Sscanf(line, "peak=%d budget=%d", &peak, &effective)
	require.NoError(t, err, line)

	p50, p99, longest := run.calm(t)
	t.Logf("flood of %d callers × 1 MiB for %v: %d replies, %d ErrInboundBudget, %d send queue full, %d scheduler, %d deadline; "+
		"receiver RSS %d MiB before, %d MiB at most (VmHWM %d MiB), Core HWM peak %d MiB of %d MiB; calm calls %d: p50 %v, p99 %v, max %v",
		callers, flood, got.ok, got.inboundBudget, got.sendQueue, got.scheduler, got.deadlines,
		baseline>>10, maxRSS>>10, hwm>>10, peak>>20, effective>>20,
		len(run.latencies), p50, p99, longest)

	require.Empty(t, got.other, "every call ends with a reply or a typed capacity error by its deadline")
	assert.Positive(t, got.ok)
	assert.Positive(t, got.inboundBudget)
	require.Empty(t, run.calmErrs, "another node's calls keep working during the flood")
	assert.Equal(t, uint64(budget), effective, "the budget is a quarter of GOMEMLIMIT")
	assert.LessOrEqual(t, peak, uint64(budget))
	assert.Less(t, hwm<<10, int64(memoryLimit+64<<20), "the receiver's resident memory stays under its memory limit plus 64 MiB")
}
