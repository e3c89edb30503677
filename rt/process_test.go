package rt_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// nodeProcess starts a node of the mesh as a process of its own (internal/nodeproc) and feeds
// the messages its Ledgers run into runs.
func nodeProcess(t *testing.T, c *cluster, id string) *proctest.Process {
	t.Helper()
	bin := proctest.Build(t, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	p := proctest.Start(t, bin, nil, "-etcd", strings.Join(c.endpoints, ","), "-node", id, "-lease-ttl", "2s")
	_, err := p.Expect("ready ", 60*time.Second)
	require.NoError(t, err)
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for line := range p.Lines() {
			if rest, ok := strings.CutPrefix(line, "ran "); ok {
				spot, msg, _ := strings.Cut(rest, " ")
				c.runs.Add(spot, msg)
			}
		}
	}()
	t.Cleanup(func() {
		p.Stop() // ends its output, which ends the reader
		done.Wait()
	})
	return p
}

// waitPeers waits until h sees every one of peers as a Ready peer.
func waitPeers(t *testing.T, h *rt.Host, peers ...sdk.NodeID) {
	t.Helper()
	require.Eventually(t, func() bool {
		ready := map[sdk.NodeID]bool{}
		for _, p := range h.MeshStatus().Peers {
			ready[p.NodeRid] = p.State == sdk.PeerStateReady
		}
		for _, p := range peers {
			if !ready[p] {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
}

func TestK5_KilledOwnerIsUnavailableUntilReclaimed(t *testing.T) {
	c := newCluster(t, 2, nil) // two survivors in this process
	a := nodeProcess(t, c, "proc-a")
	caller := c.hosts[0]
	waitPeers(t, caller, "proc-a")
	const objects = 10
	for i := range objects {
		_, err := record(caller, openLedger(fmt.Sprint("k5-", i)), "create", sdk.OnNode("proc-a"))
		require.NoError(t, err)
	}
	a.Kill()

	// Until the reclaimer formally releases them, the dead owner's objects answer
	// ErrOwnerUnavailable and no creation starts (K5).
	unavailable := 0
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < objects && time.Now().Before(deadline); {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := caller.Call(cctx, openLedger(fmt.Sprint("k5-", i)), rttest.LedgerRecord, wrapperspb.String(fmt.Sprint("after-", i)))
		cancel()
		switch {
		case err == nil:
			i++ // re-created after the reclaim
		case errors.Is(err, sdk.ErrOwnerUnavailable):
			unavailable++
			assert.Zero(t, c.factoryRuns(fmt.Sprint("k5-", i)), "no creation starts while the owner is only unavailable")
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatalf("object %d: %v", i, err)
		}
	}
	assert.Positive(t, unavailable, "the dead owner's objects were Unavailable before the reclaim")
	for i := range objects {
		assert.Equal(t, 1, c.factoryRuns(fmt.Sprint("k5-", i)), "object %d re-created once, here, after the formal release", i)
	}
}

func TestOwnerKilledUnderLoad(t *testing.T) {
	c := newCluster(t, 1, nil) // the callers' node, which can host re-created objects too
	procA := nodeProcess(t, c, "proc-a")
	nodeProcess(t, c, "proc-b")
	caller := c.hosts[0]
	waitPeers(t, caller, "proc-a", "proc-b")
	const objects, callers = 100, 8
	for i := range objects {
		_, err := record(caller, openLedger(fmt.Sprint("obj-", i)), fmt.Sprint("create-", i), sdk.OnNode("proc-a"))
		require.NoError(t, err)
	}

	var (
		stop      atomic.Bool
		seq       atomic.Int64
		ok, fails atomic.Int64
		late      atomic.Int64
		mu        sync.Mutex
		lastOK    = make(map[int]time.Time)
	)
	const deadline = 2 * time.Second
	var wg sync.WaitGroup
	killedAt := make(chan time.Time, 1)
	for range callers {
		wg.Go(func() {
			for !stop.Load() {
				obj := rand.IntN(objects)
				msg := fmt.Sprintf("msg-%d", seq.Add(1))
				cctx, cancel := context.WithTimeout(ctx, deadline)
				start := time.Now()
				_, err := caller.Call(cctx, openLedger(fmt.Sprint("obj-", obj)), rttest.LedgerRecord, wrapperspb.String(msg))
				took := time.Since(start)
				cancel()
				if took > deadline+time.Second {
					late.Add(1) // a call must end by its deadline: reply or terminal error
				}
				if err != nil {
					fails.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				ok.Add(1)
				mu.Lock()
				lastOK[obj] = time.Now()
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	procA.Kill()
	killedAt <- time.Now()
	killed := <-killedAt

	// Wait until every object answered after the kill: re-created once the reclaim released it.
	recovered := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range objects {
			if !lastOK[i].After(killed) {
				return false
			}
		}
		return true
	}
	assert.Eventually(t, recovered, 60*time.Second, 50*time.Millisecond, "every object callable again after the reclaim")
	stop.Store(true)
	wg.Wait()

	assert.Empty(t, c.runs.Twice(), "no message ran twice")
	assert.Zero(t, late.Load(), "every call ended with a reply or a terminal error by its deadline")
	assert.Positive(t, fails.Load(), "calls to the dead owner ended with errors")
	t.Logf("%d calls answered, %d ended with an error, %d messages ran", ok.Load(), fails.Load(), c.runs.Len())
	for i := range objects {
		_, err := record(caller, ledger(fmt.Sprint("obj-", i)), fmt.Sprint("final-", i))
		require.NoError(t, err, "object %d", i)
	}
}

// F8 across processes: a node process that gets SIGTERM shuts down gracefully within its
// deadline: its Spots close with reason Shutdown, their records are released (not left
// Unavailable with its lease), and a peer creates them again at once.
func TestF8_SIGTERMShutsANodeProcessDownGracefully(t *testing.T) {
	c := newCluster(t, 1, nil)
	caller := c.hosts[0]
	bin := proctest.Build(t, "github.com/zlink-go/zlink/rt/internal/nodeproc")
	p := proctest.Start(t, bin, nil, "-etcd", strings.Join(c.endpoints, ","), "-node", "proc-s", "-lease-ttl", "10s",
		"-shutdown-deadline", "20s")
	_, err := p.Expect("ready ", 60*time.Second)
	require.NoError(t, err)
	waitPeers(t, caller, "proc-s")
	const objects = 10
	for i := range objects {
		_, err := record(caller, openLedger(fmt.Sprint("sigterm-", i)), "create", sdk.OnNode("proc-s"))
		require.NoError(t, err)
	}
	require.Zero(t, c.builtOn[0].Load())

	require.NoError(t, p.Signal(syscall.SIGTERM))
	var closed int
	stopped := ""
	for line := range p.Lines() {
		if strings.HasSuffix(line, " closed:Shutdown") {
			closed++
		}
		if rest, ok := strings.CutPrefix(line, "stopped "); ok {
			stopped = rest
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(wctx), "the process exits cleanly")
	assert.Equal(t, "Stopped/None", stopped)
	assert.Equal(t, objects, closed, "every Spot closed with reason Shutdown")

	// The lease is 10 s: a record left Unavailable would hold a creation that long.
	start := time.Now()
	for i := range objects {
		_, err := record(caller, openLedger(fmt.Sprint("sigterm-", i)), "again")
		require.NoError(t, err)
	}
	assert.Less(t, time.Since(start), 5*time.Second, "the records were released, not left to the lease")
	assert.Equal(t, int64(objects), c.builtOn[0].Load(), "the peer created them afresh")
}
