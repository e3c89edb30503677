package rt_test

import (
	"context"
	"runtime"
	"strings"
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

// F12, H1: once the re-send window after the relocation's last commit has passed, the node
// publishes a status with SafeToShutdown by itself, with nothing else changing to prompt it;
// and a host closed while that wait is pending ends it, neither hanging nor leaking its
// goroutine.
func TestF12_SafeToShutdownIsPublishedOnItsOwnOnceTheWindowPassed(t *testing.T) {
	relocated := func(t *testing.T, window time.Duration) (*rt.Host, <-chan sdk.RuntimeStatus) {
		t.Helper()
		c := statefulCluster(t, []*statefulCtl{{}, {}}, nil, func(_ int, cfg *rt.Config) { cfg.RelocationResendWindow = window })
		a, caller := c.hosts[0], c.hosts[2]
		require.EqualValues(t, 1, addOne(t, caller, sdk.InstanceIntent(statefulType, "safe").WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode())))
		octx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		statuses := make(chan sdk.RuntimeStatus, 64)
		observing := make(chan struct{})
		go func() {
			defer close(statuses)
			first := true
			for o := range a.ObserveRuntime(octx) {
				if first {
					close(observing)
					first = false
				}
				select {
				case statuses <- o.Status:
				case <-octx.Done():
					return
				}
			}
		}()
		<-observing
		res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 20 * time.Second})
		require.NoError(t, err)
		require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
		return a, statuses
	}

	t.Run("published after the window", func(t *testing.T) {
		const window = time.Second
		_, statuses := relocated(t, window)
		ended := time.Now()
		var sawRelocated bool
		timeout := time.After(15 * time.Second)
		for {
			var st sdk.RuntimeStatus
			select {
			case s, ok := <-statuses:
				require.True(t, ok, "the stream ended")
				st = s
			case <-timeout:
				t.Fatal("no status with SafeToShutdown came after the relocation")
			}
			if st.State != sdk.RuntimeStateRelocated {
				continue
			}
			if !st.SafeToShutdown {
				sawRelocated = true
				continue
			}
			assert.True(t, sawRelocated, "Relocated was published first, not yet safe")
			assert.GreaterOrEqual(t, time.Since(ended), window*8/10, "not before the window")
			return
		}
	})

	t.Run("the stopped host's status stays the last one published", func(t *testing.T) {
		const window = time.Second
		a, statuses := relocated(t, window)
		require.NoError(t, a.Close())
		var last sdk.RuntimeStatus
		for st := range statuses {
			last = st
		}
		require.Equal(t, sdk.RuntimeStateStopped, last.State)
		time.Sleep(window + 200*time.Millisecond) // past the re-send window the relocation began
		st := a.Status()
		assert.Equal(t, last.Sequence, st.Sequence)
		assert.Equal(t, last.SafeToShutdown, st.SafeToShutdown, "Status says what no published status said, under its Sequence")
	})

	t.Run("ended by the host's close", func(t *testing.T) {
		a, statuses := relocated(t, time.Minute)
		closed := make(chan error, 1)
		go func() { closed <- a.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("Close waited for the SafeToShutdown timer")
		}
		assert.Eventually(t, func() bool { return !goroutineRuns("rt.(*Host).scheduleSafe") }, 5*time.Second, 10*time.Millisecond,
			"the timer ended with the host")
		timeout := time.After(15 * time.Second)
		for stopped := false; !stopped; {
			select {
			case st, ok := <-statuses:
				require.True(t, ok, "the stream ended before Stopped")
				if st.State == sdk.RuntimeStateRelocated {
					assert.False(t, st.SafeToShutdown, "the window never passed")
				}
				stopped = st.State == sdk.RuntimeStateStopped
			case <-timeout:
				t.Fatal("Stopped was never observed")
			}
		}
	})
}

// goroutineRuns reports whether a goroutine of this process has fn in its stack.
func goroutineRuns(fn string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), fn)
		}
		buf = make([]byte, 2*len(buf))
	}
}
