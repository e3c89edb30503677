package rt

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

// G1 InternalFailure: when the node's listener fails (the transport reports it through
// OnServeFailure, which calls fail; transport's TestListenerFailureIsReported proves that
// half), the host is in Error, not ready and not accepting work, and its mesh is Failed with
// placement unavailable for InternalFailure. A shutdown still stops it.
func TestG1_InternalFailurePutsTheHostInError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	obs, err := h.ObserveMesh(context.Background(), cfg.MeshName)
	require.NoError(t, err)
	failed := make(chan sdk.RouteMeshStatus, 1)
	go func() {
		for o := range obs {
			if o.Status.State == sdk.TopologyStateFailed {
				failed <- o.Status
				break
			}
		}
		close(failed)
	}()

	h.fail(errors.New("the listener failed"))
	st := h.Status()
	assert.Equal(t, sdk.RuntimeStateError, st.State)
	assert.False(t, st.IsReady)
	assert.False(t, st.AcceptingWork)
	_, err = h.Call(context.Background(), sdk.InstanceIntent("t.T", "x"), "M", nil)
	require.ErrorIs(t, err, sdk.ErrNotServing)
	select {
	case ms := <-failed:
		assert.False(t, ms.IsReady)
		require.NotNil(t, ms.Placement.UnavailableReason)
		assert.Equal(t, sdk.TopologyReasonInternalFailure, *ms.Placement.UnavailableReason)
	case <-time.After(10 * time.Second):
		t.Fatal("the mesh status did not turn Failed")
	}
	res, err := h.Shutdown(context.Background(), 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, res.Outcome)
	assert.Equal(t, sdk.RuntimeStateStopped, h.Status().State)
}

// H1, H5: an observer that missed the Error status, replaced by the shutdown's statuses before
// it read, is told of it apart from the ordinary statuses it skipped.
func TestH5_AMissedErrorStatusIsCountedApart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	next, stop := iter.Pull(h.ObserveRuntime(context.Background()))
	defer stop()
	first, ok := next()
	require.True(t, ok)
	require.Equal(t, sdk.RuntimeStateServing, first.Status.State)
	h.fail(errors.New("the listener failed")) // Error, not read
	_, err = h.Shutdown(context.Background(), 10*time.Second)
	require.NoError(t, err)
	var last sdk.Observed[sdk.RuntimeStatus]
	for o, ok := next(); ok; o, ok = next() {
		last = o
	}
	require.Equal(t, sdk.RuntimeStateStopped, last.Status.State)
	assert.EqualValues(t, 1, last.Loss.DiscardedTerminalCount, "the Error status it missed")
	assert.NotZero(t, last.Loss.CoalescedCount)
}
