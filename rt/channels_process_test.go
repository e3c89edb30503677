package rt_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// startChannelNode starts a node process with extra flags, printing no message it runs.
func startChannelNode(t *testing.T, c *cluster, id string, flags ...string) *relocNode {
	t.Helper()
	return startNodeProcess(t, c, id, append([]string{"-quiet"}, flags...)...)
}

// A server node killed with SIGKILL under load: the calls it had end with an error by their
// deadline, none hangs, and once its lease ended every call goes to the server that remains.
func TestClientServerSurvivesAServerKilledUnderLoad(t *testing.T) {
	c := newCluster(t, 1, nil) // the client, in this process
	a := c.hosts[0]
	s1 := startChannelNode(t, c, "server-1", "-who-weight", "1")
	startChannelNode(t, c, "server-2", "-who-weight", "1")
	awaitReadyTargets(t, a, 2)

	const callers = 8
	const deadline = 2 * time.Second
	stop := make(chan struct{})
	var killedAt atomic.Int64
	var ok, failed, late atomic.Int64
	var lastToKilled atomic.Int64 // when a call last reached server-1 after the kill
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, deadline)
				start := time.Now()
				node, err := who(cctx, a)
				cancel()
				if took := time.Since(start); took > deadline+time.Second {
					late.Add(1) // it outlived its deadline: it hung
				}
				switch {
				case err == nil:
					ok.Add(1)
					if k := killedAt.Load(); k != 0 && node == "server-1" {
						lastToKilled.Store(time.Now().UnixNano())
					}
				case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sdk.ErrOwnerUnavailable) ||
					errors.Is(err, sdk.ErrClosed) || errors.Is(err, sdk.ErrNotServing) || errors.Is(err, sdk.ErrNoReadyTarget):
					failed.Add(1) // a typed error: the caller knows what happened
				default:
					t.Errorf("an untyped error: %v", err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	s1.p.Kill()
	killedAt.Store(time.Now().UnixNano())
	// Within the lease TTL (2 s) and the watch's report, server-1 is gone from the channel.
	awaitReadyTargets(t, a, 1)
	goneAt := time.Now()
	time.Sleep(time.Second)
	var after []sdk.NodeID
	for range 50 {
		node, err := who(ctx, a)
		require.NoError(t, err, "calls after the lease ended go to the remaining server")
		after = append(after, node)
	}
	close(stop)
	wg.Wait()
	for _, n := range after {
		assert.Equal(t, sdk.NodeID("server-2"), n)
	}
	assert.Less(t, goneAt.Sub(time.Unix(0, killedAt.Load())), 10*time.Second, "the dead server left the channel")
	assert.Zero(t, late.Load(), "no call outlived its deadline")
	assert.Greater(t, ok.Load(), int64(0))
	t.Logf("%d calls ok, %d failed with a typed error, server-1 gone from the channel %v after the kill",
		ok.Load(), failed.Load(), goneAt.Sub(time.Unix(0, killedAt.Load())).Round(time.Millisecond))
}

// Fanout across three processes: two of them publish 5,000 posts each; every subscriber node
// gets each of the 10,000 once, and each publisher's in order.
func TestFanoutAcrossThreeProcesses(t *testing.T) {
	c := newCluster(t, 1, nil) // the etcd, and a node that only watches
	var nodes []*relocNode
	for i := range 3 {
		nodes = append(nodes, startChannelNode(t, c, fmt.Sprintf("sub-%d", i+1), "-feed"))
	}
	awaitSubscribers(t, c, 3)
	const posts = 5000
	for _, n := range nodes[:2] {
		// Each publisher starts once its own posts reach all three subscriber nodes.
		_, err := fmt.Fprintf(n.p.Stdin(), "publish %d 3\n", posts)
		require.NoError(t, err)
	}
	for _, n := range nodes[:2] {
		require.Equal(t, fmt.Sprint(posts), n.expect(t, "published ", 2*time.Minute))
	}
	for _, n := range nodes {
		var report string
		require.Eventually(t, func() bool {
			_, _ = fmt.Fprintln(n.p.Stdin(), "feed-report")
			report = n.expect(t, "feed ", 10*time.Second)
			return strings.HasPrefix(report, fmt.Sprintf("total=%d ", 2*posts))
		}, 30*time.Second, 100*time.Millisecond, "%s: %s", n.id, report)
		assert.Equal(t, fmt.Sprintf("total=%d dups=0 disorder=0", 2*posts), report, "%s got each post once, in its publisher's order", n.id)
	}
}

// awaitSubscribers waits until the cluster's first host sees n subscriber nodes of the Feed.
func awaitSubscribers(t *testing.T, c *cluster, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, ch := range c.hosts[0].MeshStatus().Channels {
			if ch.ChannelName == rttest.FeedChannel {
				return ch.ReadyTargetCount == n
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond)
}
