package rt

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/sdk"
)

// H1: a mesh status Failed, which the host's Error makes and only a shutdown follows, that an
// observer missed is counted apart as a lost terminal status, as the runtime's Error is.
func TestH1_AMissedFailedMeshStatusIsCountedAsALostTerminalStatus(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs, err := h.ObserveMesh(ctx, cfg.MeshName)
	require.NoError(t, err)
	next, stop := iter.Pull(obs)
	defer stop()
	_, ok := next() // the first status; the observer reads no more until the shutdown ended
	require.True(t, ok)

	h.fail(errors.New("the listener failed"))
	require.Eventually(t, func() bool { return h.lc.mesh.Current().State == sdk.TopologyStateFailed }, 10*time.Second, time.Millisecond,
		"Failed was published to the mesh's observers")
	_, err = h.Shutdown(context.Background(), 10*time.Second)
	require.NoError(t, err)
	var discarded uint64
	for o, ok := next(); ok; o, ok = next() {
		discarded += o.Loss.DiscardedTerminalCount
	}
	assert.Positive(t, discarded, "the Failed status was coalesced away as if it were not terminal")
}

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

// H1: the Error status a host turned to is what its admin snapshot keeps as Failed, through
// the shutdown that follows, so that an admin stream that coalesced it away still shows it
// before the newer statuses.
func TestH1_TheErrorAHostTurnedToIsKeptInItsAdminSnapshot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	require.Nil(t, adminNode{h}.Snapshot().Failed, "a serving host has not failed")

	h.fail(errors.New("the listener failed"))
	snap := adminNode{h}.Snapshot()
	require.NotNil(t, snap.Failed)
	assert.Equal(t, sdk.RuntimeStateError, snap.Failed.State)
	assert.Equal(t, snap.Runtime.Sequence, snap.Failed.Sequence, "the status the host published when it turned Error")

	_, err = h.Shutdown(context.Background(), 10*time.Second)
	require.NoError(t, err)
	after := adminNode{h}.Snapshot()
	require.Equal(t, sdk.RuntimeStateStopped, after.Runtime.State)
	require.NotNil(t, after.Failed, "the Error is kept once the host moved on to Stopped")
	assert.Equal(t, *snap.Failed, *after.Failed)
}

// F8: a forced stop is reported by its cause. One that a Spot's failed close made before the
// deadline is TeardownFailed, even when etcd's silence timed the close out; DeadlineExceeded
// once the deadline passed, or when a Spot's work outlasted its close, whatever else failed
// (some Spot was stopped without its closing callback), with every failure in the error.
func TestF8_AForcedStopIsReportedByItsCause(t *testing.T) {
	closeFailed := fmt.Errorf("%w: 1 Spot did not close: %w", catalog.ErrForceStopped, errors.New("release: etcd refused the write"))
	for _, tc := range []struct {
		name    string
		err     error
		expired bool
		want    sdk.TerminationResult
		says    string
	}{
		{"clean", nil, false, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeStopped}, ""},
		{"clean after the deadline", nil, true, sdk.TerminationResult{Outcome: sdk.TerminationOutcomeStopped}, ""},
		{"a close failed before the deadline", closeFailed, false,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonTeardownFailed}, "etcd refused the write"},
		{"the deadline passed", fmt.Errorf("%w: %w", catalog.ErrForceStopped, context.DeadlineExceeded), true,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, "did not stop within 1s"},
		{"a close failed and the deadline passed", closeFailed, true,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, "did not stop within 1s"},
		{"a Spot's work outlasted its close before the deadline",
			fmt.Errorf("%w: 1 Spot did not close: %w", catalog.ErrForceStopped, fmt.Errorf("%w: %w", catalog.ErrWorkOutlastedClose, context.DeadlineExceeded)), false,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, "outlasted its close"},
		{"a Spot's work outlasted its close and another's close failed",
			fmt.Errorf("%w: 2 Spots did not close: %w", catalog.ErrForceStopped, errors.Join(
				fmt.Errorf("%w: %w", catalog.ErrWorkOutlastedClose, context.DeadlineExceeded), errors.New("release: etcd refused the write"))), false,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonDeadlineExceeded}, "etcd refused the write"},
		{"a release timed out by etcd's silence before the deadline",
			fmt.Errorf("%w: 1 Spot did not close: store: begin release: %w", catalog.ErrForceStopped, context.DeadlineExceeded), false,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonTeardownFailed}, "begin release"},
		{"the revoke timed out", fmt.Errorf("store: deregister n1: %w", context.DeadlineExceeded), false,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonTeardownFailed}, "deregister"},
		{"another step failed", errors.New("revoke: lease not found"), false,
			sdk.TerminationResult{Outcome: sdk.TerminationOutcomeForceStopped, Reason: sdk.TerminationReasonTeardownFailed}, "lease not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := termination("n1", time.Second, tc.err, tc.expired)
			assert.Equal(t, tc.want, got)
			if tc.says == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.says)
			assert.ErrorIs(t, err, tc.err)
		})
	}
}
