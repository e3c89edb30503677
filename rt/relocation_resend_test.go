package rt_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// The re-send window of F12 and the SafeToShutdown it holds back, on the paths a relocation
// takes besides a unit that moved.

// goneWindow is long enough that a status read right after the relocation ended falls inside it.
const goneWindow = 2 * time.Second

// F12: a unit whose object is gone by the time it runs (it closed, or moved by this unit's own
// commit whose answer was lost) starts the re-send window as a commit does: the relocation
// answers Relocated, and the node is not SafeToShutdown until the window after that moment
// has passed.
func TestF12_AUnitWhoseObjectWasGoneStartsTheResendWindow(t *testing.T) {
	c := statefulCluster(t, []*statefulCtl{{}, {}}, nil, func(_ int, cfg *rt.Config) {
		cfg.ApplicationVersion = 1
		cfg.RelocationResendWindow = goneWindow
	})
	a, b, caller := c.hosts[0], c.hosts[1], c.hosts[2]
	require.EqualValues(t, 1, addOne(t, caller, sdk.InstanceIntent(statefulType, "gone").WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode())))
	require.True(t, a.Status().SafeToShutdown, "nothing committed yet")

	// A rolling update to version 2, which no node runs yet: the unit waits for its target.
	done := make(chan sdk.RelocationResult, 1)
	go func() {
		res, _ := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(2), Deadline: 30 * time.Second})
		done <- res
	}()
	// The relocation publishes Relocating to the peers before it lists its units; once node-b
	// sees it (one Serving member fewer), the unit is listed and waits for a target.
	require.Eventually(t, func() bool { return b.ServingMembers() == 2 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond)

	// The application closes the Spot while its unit waits.
	require.NoError(t, caller.CloseSpot(ctx, statefulOf("gone")))
	require.Eventually(t, func() bool { return a.MeshStatus().Placement.ActiveSpotCount == 0 }, 10*time.Second, 5*time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("the relocation ended before the unit ran: %+v", res)
	default:
	}

	// A node of version 2 joins: the unit runs, and finds its object gone.
	d := c.start(t, 3, func(_ int, cfg *rt.Config) {
		cfg.ApplicationVersion = 2
		cfg.RelocationResendWindow = goneWindow
		cfg.Register = registerStateful(&statefulCtl{}, false)
	})
	var res sdk.RelocationResult
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the relocation did not end")
	}
	ended := time.Now()
	require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	assert.False(t, a.Status().SafeToShutdown, "the re-send window after the gone unit has not passed")
	require.Eventually(t, func() bool { return a.Status().SafeToShutdown }, 10*time.Second, 10*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(ended), goneWindow*8/10, "not before the window")
	assert.Zero(t, d.MeshStatus().Placement.ActiveSpotCount, "the closed Spot did not move")
}
