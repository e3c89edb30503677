package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A quiet membership watch still advances: progress notifications move the revision it
// resumes from, and are reported with that revision.
func TestWatchNodesReportsProgress(t *testing.T) {
	s, _ := newFaultyStore(t)
	s.progressEvery = 50 * time.Millisecond
	registerNode(t, s, "node-a")
	_, from, err := s.Nodes(ctx)
	require.NoError(t, err)
	// Revisions that are not the membership's.
	var after int64
	for range 3 {
		resp, err := s.client.Put(ctx, "/elsewhere", "x")
		require.NoError(t, err)
		after = resp.Header.Revision
	}

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	revision := from
	var progress []NodeEvent
	compacted := s.watchOnce(wctx, s.keys.nodesPrefix(), &revision, s.nodeHandlers(func(ev NodeEvent) {
		require.True(t, ev.Progress, "no membership change happened: %+v", ev)
		progress = append(progress, ev)
		if ev.Revision >= after {
			cancel()
		}
	}))
	require.False(t, compacted)
	require.NotEmpty(t, progress, "no progress notification within 10 s")
	last := progress[len(progress)-1]
	require.GreaterOrEqual(t, last.Revision, after)
	require.Equal(t, NodeEvent{Progress: true, Revision: last.Revision}, last, "only the revision is set")
	require.Equal(t, last.Revision, revision, "the watch resumes after the notified revision")
}
