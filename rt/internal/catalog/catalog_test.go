package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

func TestK2_PlainCallToMissingIDCreatesNothing(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.callT(sdk.InstanceTarget(roomType, "nobody"), "Join", "ann")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	assert.Contains(t, err.Error(), `test.Room/"nobody"`)
	require.ErrorIs(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "nobody"), "Say", str("hi")), sdk.ErrNotFound)
	assert.Equal(t, 0, n.f.factoryRuns("nobody"), "a plain message creates nothing")
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "nobody").State)

	out, err := n.call("room-1", "Join", "ann")
	require.NoError(t, err)
	assert.Equal(t, "ann joined room-1 #1", out)
	assert.Equal(t, 1, n.f.factoryRuns("room-1"), "an intent call creates")
	out, err = n.callT(sdk.InstanceTarget(roomType, "room-1"), "Join", "bob")
	require.NoError(t, err, "a plain call reaches an existing Spot")
	assert.Equal(t, "bob joined room-1 #2", out)
}

func TestK3_ConcurrentCreateRunsFactoryOnce(t *testing.T) {
	n := newNode(t, nodeOpts{})
	const callers = 64
	var wg sync.WaitGroup
	outs := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { outs[i], errs[i] = n.call("room-k3", "Join", fmt.Sprint(i)) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range callers {
		require.NoError(t, errs[i])
		seen[outs[i]] = true
	}
	assert.Equal(t, 1, n.f.factoryRuns("room-k3"))
	assert.Len(t, seen, callers, "every caller reached the one object: its join counter went 1..64")
}

func TestB5_ThirtyTwoIntentCallersFiveHundredTrials(t *testing.T) {
	n := newNode(t, nodeOpts{})
	const callers, trials = 32, 500
	for trial := range trials {
		id := fmt.Sprintf("b5-%d", trial)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				<-start
				_, errs[i] = n.call(id, "Join", "x")
			})
		}
		close(start)
		wg.Wait()
		for i := range callers {
			require.NoError(t, errs[i], "trial %d caller %d", trial, i)
		}
		require.Equal(t, 1, n.f.factoryRuns(id), "trial %d: the factory runs exactly once", trial)
	}
}

func TestK3_TwoHostsShareOneEtcd(t *testing.T) {
	mesh := uniqueMesh(t)
	f := newFixture() // one fixture: factory runs counted across both hosts
	a := newNode(t, nodeOpts{mesh: mesh, id: "host-a", fixture: f})
	b := newNode(t, nodeOpts{mesh: mesh, id: "host-b", fixture: f})
	const trials, callers = 100, 16
	for trial := range trials {
		id := fmt.Sprintf("shared-%d", trial)
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]error, 2*callers)
		for i := range 2 * callers {
			h := a
			if i%2 == 1 {
				h = b
			}
			wg.Go(func() {
				<-start
				_, results[i] = h.call(id, "Join", "x")
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, 1, f.factoryRuns(id), "trial %d: one factory run across two hosts", trial)
		res := a.lookup(t, roomType, id)
		require.Equal(t, store.StateReady, res.State)
		winner, loser := a, b
		if res.Record.Owner.Node == "host-b" {
			winner, loser = b, a
		}
		for i, err := range results {
			onLoser := (i%2 == 1) == (loser == b)
			if !onLoser {
				require.NoError(t, err, "trial %d: the winner's callers reach the object", trial)
				continue
			}
			// Remote calls arrive with the mesh: the losing host observes the created record.
			require.ErrorIs(t, err, catalog.ErrRemoteOwner, "trial %d", trial)
			assert.Contains(t, err.Error(), string(winner.reg.Owner().Node))
		}
	}
}

func TestK4_MessageRightAfterCreationIsProcessedAtOnce(t *testing.T) {
	n := newNode(t, nodeOpts{})
	for i := range 50 {
		id := fmt.Sprintf("k4-%d", i)
		_, err := n.call(id, "Join", "first")
		require.NoError(t, err)
		// Right after the creation completed, a plain message is admitted and run at once: the
		// route was registered in the same continuation as the Ready commit (B7).
		start := time.Now()
		out, err := n.callT(sdk.InstanceTarget(roomType, id), "Join", "second")
		require.NoError(t, err)
		assert.Equal(t, "second joined "+id+" #2", out)
		assert.Less(t, time.Since(start), 5*time.Second, "not held for a cache lifetime")
	}
}

func TestB7_WaitersSendTheirFirstMessageAfterTheRouteIsRegistered(t *testing.T) {
	n := newNode(t, nodeOpts{})
	const callers = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	notFound := 0
	for i := range callers {
		wg.Go(func() {
			if i == 0 {
				_, err := n.call("b7", "Join", "creator")
				assert.NoError(t, err)
				return
			}
			// Plain callers racing the creation: either not found yet, or served; never a
			// stale-route or a lost message.
			_, err := n.callT(sdk.InstanceTarget(roomType, "b7"), "Join", "plain")
			if err != nil {
				mu.Lock()
				notFound++
				mu.Unlock()
				assert.ErrorIs(t, err, sdk.ErrNotFound)
			}
		})
	}
	wg.Wait()
	out, err := n.callT(sdk.InstanceTarget(roomType, "b7"), "Join", "after")
	require.NoError(t, err)
	assert.Contains(t, out, "after joined b7")
	t.Logf("%d of %d plain callers came before the creation", notFound, callers-1)
}

func TestK8_ActiveObjectCapRefusesActivation(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.MaxActive = 3 }})
	for i := range 3 {
		_, err := n.call(fmt.Sprint("cap-", i), "Join", "x")
		require.NoError(t, err)
	}
	_, err := n.call("cap-3", "Join", "x")
	require.ErrorIs(t, err, sdk.ErrCapacityExceeded)
	var ce *sdk.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, sdk.CapacityActivationCap, ce.Where)
	assert.Equal(t, int64(3), ce.Limit)
	require.ErrorIs(t, n.cat.Create(ctx, sdk.UserTarget(playerType, "p1")), sdk.ErrCapacityExceeded, "User Spots count too")
	assert.Equal(t, 0, n.f.factoryRuns("cap-3"))
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "cap-3").State, "no reservation was taken")
	assert.False(t, n.cat.HasRoom())

	// Existing Spots still serve; a close makes room.
	_, err = n.call("cap-0", "Join", "y")
	require.NoError(t, err)
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "cap-0")))
	_, err = n.call("cap-3", "Join", "x")
	require.NoError(t, err)
	assert.Equal(t, int64(2), n.cat.Stats().CapRefusals)
}

func TestK9_OnlyInstanceSpotsAreCleanedUp(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.InstanceSpotIdleTimeout = 50 * time.Millisecond
		c.IdleScanInterval = 10 * time.Millisecond
	}})
	require.NoError(t, n.cat.Create(ctx, sdk.UserTarget(playerType, "p1")))
	_, err := n.callT(sdk.EntryTarget(lobbyType, "node-a"), "Join", "x")
	require.NoError(t, err)
	_, err = n.call("r1", "Join", "x")
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(n.f.closeReasons("r1")) == 1 }, 5*time.Second, 5*time.Millisecond)
	waitScans(t, n, 200*time.Millisecond) // four timeouts more, with scans to prove it
	assert.Equal(t, []sdk.CloseReason{sdk.CloseIdleEvicted}, n.f.closeReasons("r1"))
	assert.Empty(t, n.f.closeReasons("p1"), "a User Spot is never idle-evicted (D7)")
	assert.Empty(t, n.f.closeReasons(""), "an Entry Spot is never idle-evicted (D7)")
	_, err = n.callT(sdk.UserTarget(playerType, "p1"), "Join", "still here")
	require.NoError(t, err)
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "r1").State, "the evicted Spot's location was released")
}

func TestK10_InstanceWithWorkInProgressIsNotCleanedUp(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.InstanceSpotIdleTimeout = 30 * time.Millisecond
		c.IdleScanInterval = 5 * time.Millisecond
	}})
	_, err := n.call("busy", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "busy"), "BlockSend", str("")))
	<-n.f.blocked
	waitScans(t, n, 300*time.Millisecond) // ten timeouts with work in progress
	assert.Empty(t, n.f.closeReasons("busy"), "a Spot with work in progress is not cleaned up (D8)")
	close(n.f.release)
	require.Eventually(t, func() bool { return len(n.f.closeReasons("busy")) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, sdk.CloseIdleEvicted, n.f.closeReasons("busy")[0])
}

func TestK11_CleanupCallsClosingCallbackWithIdleEvicted(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.InstanceSpotIdleTimeout = 20 * time.Millisecond
		c.IdleScanInterval = 5 * time.Millisecond
	}})
	for i := range 10 {
		_, err := n.call(fmt.Sprint("k11-", i), "Join", "x")
		require.NoError(t, err)
	}
	// The callback runs before the location is released, and the count after it.
	require.Eventually(t, func() bool { return n.cat.Stats().IdleEvicted == 10 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 10, n.f.totalCloses(sdk.CloseIdleEvicted))
	// Evicted Spots are created afresh by the next intent call.
	out, err := n.call("k11-0", "Join", "back")
	require.NoError(t, err)
	assert.Equal(t, "back joined k11-0 #1", out)
	assert.Equal(t, 2, n.f.factoryRuns("k11-0"))
}

func TestD1_TenThousandIdleInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 Spots")
	}
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.InstanceSpotIdleTimeout = time.Hour // made while off; switched on below by type option
		c.IdleScanInterval = 2 * time.Millisecond
	}, register: func(ts *catalog.Types, f *fixture) {
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods}, factory(f),
			sdk.WithIdleTimeout(300*time.Millisecond)))
	}})
	const spots = 10_000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range spots {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := n.call(fmt.Sprint("d1-", i), "Join", "x")
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	// A call whose Spot a stalled machine evicted before the call's message reached it waits
	// for the close and creates the Spot again (D4): that one is evicted in turn.
	require.Eventually(t, func() bool {
		st := n.cat.Stats()
		return st.IdleEvicted >= spots && st.Active == 0
	}, 3*time.Minute, 50*time.Millisecond, "evicted %d of %d", n.cat.Stats().IdleEvicted, spots)
	st := n.cat.Stats()
	assert.LessOrEqual(t, st.MaxScanned, int64(catalog.MaxScanCandidates), "no scan examines more than 64 (D1)")
	assert.Equal(t, int64(catalog.MaxScanCandidates), st.MaxScanned)
	assert.EqualValues(t, st.IdleEvicted, n.f.totalCloses(sdk.CloseIdleEvicted), "callbacks = evictions")
	assert.Equal(t, int64(0), st.Active)
	assert.Equal(t, 0, st.IdleCandidates)
	t.Logf("%d scans", st.IdleScans)
}

// D1: the idle scan runs at the pace of the shortest idle timeout in force, so a type that
// declares a short one (`idle=` on its descriptor) on a node whose default is ten minutes is
// evicted a few of its own timeouts after its last work, not ten seconds later.
func TestD1_ShortTypeTimeoutIsScannedAtItsOwnPace(t *testing.T) {
	const timeout = time.Second
	n := newNode(t, nodeOpts{register: func(ts *catalog.Types, f *fixture) {
		// The node's default (ten minutes) and its default scan interval stay as they are.
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods, IdleTimeout: timeout}, factory(f)))
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: playerType, Kind: sdk.KindUser, Methods: methods}, factory(f)))
	}})
	_, err := n.call("d1-short", "Join", "x")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(n.f.closeReasons("d1-short")) == 1 }, 5*timeout, 10*time.Millisecond,
		"a Spot of a type with a %v idle timeout is evicted within a few of its timeouts", timeout)
	assert.Equal(t, []sdk.CloseReason{sdk.CloseIdleEvicted}, n.f.closeReasons("d1-short"))
	// The closing callback runs before the location is released.
	require.Eventually(t, func() bool { return n.lookup(t, roomType, "d1-short").State == store.StateMissing },
		5*time.Second, 10*time.Millisecond, "its location was released")
}

func TestD3_ConcurrentClosesMerge(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("d3", "Join", "x")
	require.NoError(t, err)
	// Hold the Spot's turn so that every close meets the one in progress.
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "d3"), "BlockSend", str("")))
	<-n.f.blocked
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() { errs[i] = n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "d3")) })
	}
	// While the close waits for the turn in progress, no new work is admitted: a caller waits
	// for the close to be decided, then learns the Spot is gone.
	waitAdmissionPaused(t, n, "d3")
	late := make(chan error, 1)
	go func() {
		_, err := n.callT(sdk.InstanceTarget(roomType, "d3"), "Join", "late")
		late <- err
	}()
	select {
	case err := <-late:
		t.Fatalf("the late call did not wait for the close to be decided: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(n.f.release)
	wg.Wait()
	require.ErrorIs(t, <-late, sdk.ErrNotFound, "the close was decided: the late call did not run")
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, []sdk.CloseReason{sdk.CloseExplicit}, n.f.closeReasons("d3"), "one close, one callback")
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "d3").State)
}

func TestD3_CallbackRunsBeforeTheLocationIsReleased(t *testing.T) {
	n := newNode(t, nodeOpts{register: func(ts *catalog.Types, f *fixture) {
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods},
			func(sc sdk.SpotContext) (any, error) {
				ls := &lookingSpot{spot: spot{f: f, sc: sc}}
				lookingSpots.put(sc.ID(), ls)
				return ls, nil
			}))
	}})
	_, err := n.call("d3b", "Join", "x")
	require.NoError(t, err)
	ls := lookingSpots.get("d3b")
	ls.st = n.store
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "d3b")))
	assert.Equal(t, store.StateUnavailable, ls.seen.State, "during the callback the record is still there")
	assert.Equal(t, store.EvidenceReleasing, ls.seen.Evidence)
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "d3b").State)
}

func TestD4_IntentCallDuringReleaseWaitsThenCreates(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("d4", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "d4"), "BlockSend", str("")))
	<-n.f.blocked
	closed := make(chan error, 1)
	go func() { closed <- n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "d4")) }()
	time.Sleep(20 * time.Millisecond)
	joined := make(chan string, 1)
	go func() {
		out, err := n.call("d4", "Join", "newcomer")
		assert.NoError(t, err)
		joined <- out
	}()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-joined:
		t.Fatal("the intent call did not wait for the release")
	default:
	}
	close(n.f.release)
	require.NoError(t, <-closed)
	assert.Equal(t, "newcomer joined d4 #1", <-joined, "a fresh Spot after the release")
	assert.Equal(t, 2, n.f.factoryRuns("d4"))
}

// D4, F8: a message resolved to a Spot that the node's shutdown closes before its delivery is
// refused unrun as closing, as any close refuses, not answered as closed: its caller resolves
// again, and an intent call is created where the store and placement say (the closing node
// refuses to create it, so the caller places it elsewhere).
func TestD4_AMessageForASpotTheShutdownClosedAfterItsResolveIsRefusedUnrun(t *testing.T) {
	n := newNode(t, nodeOpts{})
	target := sdk.InstanceIntent(roomType, "shut")
	_, err := n.callT(target, "Join", "x")
	require.NoError(t, err)
	route, ok := n.cat.LocalSpot(target)
	require.True(t, ok)

	require.NoError(t, n.cat.Close(ctx))
	for _, oneWay := range []bool{false, true} {
		method := "Join"
		if oneWay {
			method = "BlockSend"
		}
		_, admitted, err := n.cat.Deliver(ctx, route, method, str("late"), oneWay)
		assert.False(t, admitted, "one-way %v", oneWay)
		assert.ErrorIs(t, err, catalog.ErrClosing, "one-way %v: the caller may resolve again", oneWay)
		assert.NotErrorIs(t, err, sdk.ErrClosed, "one-way %v", oneWay)
	}
	assert.False(t, n.f.said1("shut:late"), "nothing ran")

	_, err = n.callT(target, "Join", "again")
	require.ErrorIs(t, err, sdk.ErrNotServing, "the closing node refuses to create it, unrun: the caller places it elsewhere")
	_, err = n.callT(target.Plain(), "Join", "again")
	require.ErrorIs(t, err, sdk.ErrNotFound, "a plain call finds it gone, as its released record says")
}

// quotaError is an application's typed error, as a factory may return.
type quotaError struct{ tenant string }

func (e *quotaError) Error() string { return "quota exceeded for " + e.tenant }

// B8: the error of a failed creation matches sdk.ErrCreationFailed, and errors.As reaches the
// factory's own typed error through it. An sdk detail type in the factory's error is not
// reached, and no other sentinel matches: the failure still reads as a creation failure.
func TestB8_FailedCreationLetsErrorsAsReachTheFactoryError(t *testing.T) {
	n := newNode(t, nodeOpts{})
	n.f.mu.Lock()
	n.f.failWith["b8as"] = fmt.Errorf("load the room: %w", errors.Join(
		&quotaError{tenant: "acme"},
		&sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: 1},
	))
	n.f.mu.Unlock()
	_, err := n.call("b8as", "Join", "x")
	require.ErrorIs(t, err, sdk.ErrCreationFailed)
	assert.Contains(t, err.Error(), "quota exceeded for acme")
	var qe *quotaError
	require.ErrorAs(t, err, &qe, "errors.As reaches the factory's typed error")
	assert.Equal(t, "acme", qe.tenant)
	var ce *sdk.CapacityError
	assert.False(t, errors.As(err, &ce), "an sdk detail type in the cause is not reached")
	assert.NotErrorIs(t, err, sdk.ErrCapacityExceeded)
}

func TestB8_FailedCreationReleasesAndCanBeCreatedAgain(t *testing.T) {
	for _, how := range []string{"error", "panic"} {
		t.Run(how, func(t *testing.T) {
			n := newNode(t, nodeOpts{})
			n.f.mu.Lock()
			if how == "error" {
				n.f.failWith["b8"] = errBoom
			} else {
				n.f.panicIn["b8"] = true
			}
			n.f.mu.Unlock()
			var wg sync.WaitGroup
			errs := make([]error, 16)
			for i := range errs {
				wg.Go(func() { _, errs[i] = n.call("b8", "Join", "x") })
			}
			wg.Wait()
			for _, err := range errs {
				require.ErrorIs(t, err, sdk.ErrCreationFailed, "every waiter gets the error")
			}
			if how == "error" {
				assert.Contains(t, errs[0].Error(), "factory says no")
			} else {
				assert.Contains(t, errs[0].Error(), "factory panic for b8")
			}
			assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "b8").State, "the reservation was released")

			n.f.mu.Lock()
			delete(n.f.failWith, "b8")
			delete(n.f.panicIn, "b8")
			n.f.mu.Unlock()
			out, err := n.call("b8", "Join", "x")
			require.NoError(t, err, "the ID can be created again")
			assert.Equal(t, "x joined b8 #1", out)
		})
	}
}

func TestHandlerPanicBecomesErrorAndSpotKeepsServing(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("p", "Boom", "now")
	require.ErrorIs(t, err, sdk.ErrHandlerPanicked)
	assert.Contains(t, err.Error(), "boom now")
	out, err := n.call("p", "Join", "x")
	require.NoError(t, err)
	assert.Equal(t, "x joined p #1", out, "same activation, still serving")
	assert.Equal(t, 1, n.f.factoryRuns("p"))
}

func TestHandlerErrorReachesCallerWithItsMessage(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("f", "Fail", "")
	var ae *sdk.AppError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "room_full", ae.Code)
	assert.Equal(t, "room f is full", ae.Message)
}

func TestUserSpotsAreCreatedOnlyExplicitly(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.callT(sdk.UserTarget(playerType, "ann"), "Join", "x")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	require.NoError(t, n.cat.Create(ctx, sdk.UserTarget(playerType, "ann")))
	require.ErrorIs(t, n.cat.Create(ctx, sdk.UserTarget(playerType, "ann")), sdk.ErrAlreadyExists)
	out, err := n.callT(sdk.UserTarget(playerType, "ann"), "Join", "x")
	require.NoError(t, err)
	assert.Equal(t, "x joined ann #1", out)
	require.ErrorIs(t, n.cat.Create(ctx, sdk.InstanceIntent(roomType, "r")), sdk.ErrInvalidArgument, "only User Spots are created explicitly")

	// Concurrent explicit creates: one succeeds, the rest are told it exists.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() { errs[i] = n.cat.Create(ctx, sdk.UserTarget(playerType, "bob")) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			require.ErrorIs(t, err, sdk.ErrAlreadyExists)
		}
	}
	assert.Equal(t, 1, ok)
	assert.Equal(t, 1, n.f.factoryRuns("bob"))
}

func TestEntrySpotsAreMadeAtStartOnePerType(t *testing.T) {
	n := newNode(t, nodeOpts{})
	assert.Equal(t, 1, n.f.factoryRuns(""), "the Entry Spot exists before any call")
	out, err := n.callT(sdk.EntryTarget(lobbyType, "node-a"), "Join", "x")
	require.NoError(t, err)
	assert.Equal(t, "x joined  #1", out)
	_, err = n.callT(sdk.EntryTarget(lobbyType, "node-b"), "Join", "x")
	require.ErrorIs(t, err, catalog.ErrRemoteOwner)
	assert.Equal(t, 1, n.f.factoryRuns(""))
}

func TestUnknownTypeAndMethodAreUnhandled(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.callT(sdk.InstanceIntent("no.Such", "x"), "Join", "x")
	require.ErrorIs(t, err, sdk.ErrUnhandled)
	_, err = n.call("x", "NoSuchMethod", "x")
	require.ErrorIs(t, err, sdk.ErrUnhandled)
	_, err = n.call("x", "Say", "x")
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "a one-way method is not called for a reply")
	_, err = n.cat.Call(ctx, sdk.InstanceIntent(roomType, "x"), "Join", nil)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	_, err = n.cat.Call(ctx, sdk.InstanceIntent(roomType, "x"), "Join", (*wrapperspb.StringValue)(nil))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	_, err = n.cat.Call(ctx, sdk.Target{}, "Join", str("x"))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	_, err = n.callT(sdk.InstanceIntent(roomType, "bad\x00id"), "Join", "x")
	require.ErrorIs(t, err, sdk.ErrInvalidID)
}

func TestK5_UnavailableOwnerStartsNoCreation(t *testing.T) {
	mesh := uniqueMesh(t)
	f := newFixture()
	a := newNode(t, nodeOpts{mesh: mesh, id: "host-a", fixture: f})
	b := newNode(t, nodeOpts{mesh: mesh, id: "host-b", fixture: f})
	_, err := a.call("k5", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, a.reg.Close(ctx)) // host-a's owner lease ends
	_, err = b.call("k5", "Join", "x")
	require.ErrorIs(t, err, sdk.ErrOwnerUnavailable)
	assert.Contains(t, err.Error(), "host-a")
	assert.Equal(t, 1, f.factoryRuns("k5"), "no creation started")
	_, err = b.store.Reclaim(ctx, b.reg.Owner())
	require.NoError(t, err)
	out, err := b.call("k5", "Join", "x")
	require.NoError(t, err, "after the formal release an intent call creates it again")
	assert.Equal(t, "x joined k5 #1", out)
	assert.Equal(t, 2, f.factoryRuns("k5"))
}

func TestSendQueueFullNamesLaneAndAxis(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.Exec.Application = exec.Limits{Count: 3, Bytes: 1 << 20}
	}})
	_, err := n.call("q", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "q"), "BlockSend", str("")))
	<-n.f.blocked
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "q"), "Say", str("1")))
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "q"), "Say", str("2")))
	err = n.cat.Send(ctx, sdk.InstanceTarget(roomType, "q"), "Say", str("3"))
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.LaneApplication, qf.Lane)
	assert.Equal(t, sdk.AxisCount, qf.Axis)
	assert.Contains(t, err.Error(), `test.Room.Say on Instance/"q"`)
	close(n.f.release)
}

// TestE8_AOneWayMessageHoldsItsJobPermitUntilItsJobEnds: a one-way message takes a permit of
// the node's application job queue when it is admitted and gives it back when its job ends; a
// message its Spot's lane refuses gives it back at once.
func TestE8_AOneWayMessageHoldsItsJobPermitUntilItsJobEnds(t *testing.T) {
	meter := jobMeter(t, 100)
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.Exec.Application = exec.Limits{Count: 3, Bytes: 1 << 20}
		c.Meter = meter
	}})
	permits := func() uint64 { return meter.Status(0, exec.DefaultConfig()).ApplicationJobQueue.PermitsInUse }
	_, err := n.call("jp", "Join", "x")
	require.NoError(t, err)
	require.Zero(t, permits(), "a request run inline on its caller's goroutine takes none")

	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "jp"), "BlockSend", str("")))
	<-n.f.blocked
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "jp"), "Say", str("1")))
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "jp"), "Say", str("2")))
	assert.Equal(t, uint64(3), permits(), "the running message and the two queued ones")

	err = n.cat.Send(ctx, sdk.InstanceTarget(roomType, "jp"), "Say", str("3"))
	require.ErrorIs(t, err, sdk.ErrQueueFull)
	assert.Equal(t, uint64(3), permits(), "the refused message gave its permit back")

	close(n.f.release)
	require.Eventually(t, func() bool { return permits() == 0 }, 5*time.Second, time.Millisecond,
		"every permit returns as its job ends")
	out, err := n.call("jp", "Join", "y")
	require.NoError(t, err)
	assert.Equal(t, "y joined jp #2", out)
}

// jobMeter is a meter whose application job queue has n permits.
func jobMeter(t *testing.T, n uint64) *capacity.Meter {
	t.Helper()
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{
		ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: new(n),
	}, 1<<20)
	require.NoError(t, err)
	return capacity.New(settings)
}

// TestE8_DroppedOneWayMessagesGiveTheirPermitsBack: one-way messages still queued when their
// node is force-stopped are dropped unrun, and give their job permits back; the one running
// keeps its own until it ends.
func TestE8_DroppedOneWayMessagesGiveTheirPermitsBack(t *testing.T) {
	meter := jobMeter(t, 100)
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.Meter = meter; c.OperationTimeout = time.Minute }})
	permits := func() uint64 { return meter.Status(0, exec.DefaultConfig()).ApplicationJobQueue.PermitsInUse }
	_, err := n.call("dp", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "dp"), "BlockSend", str("")))
	<-n.f.blocked
	for range 5 {
		require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "dp"), "Say", str("q")))
	}
	require.Equal(t, uint64(6), permits())
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, n.cat.Close(c), catalog.ErrForceStopped)
	assert.Equal(t, uint64(1), permits(), "the 5 dropped messages gave theirs back; the running one holds its own")
	close(n.f.release)
	require.Eventually(t, func() bool { return permits() == 0 }, 5*time.Second, time.Millisecond)
}

// TestE8_SelfSendsTakeReservedPermitsAndGiveThemBack: a turn that sends to its own Spot while
// the job queue is full takes reserved permits rather than wait for its own, and every permit
// comes back.
func TestE8_SelfSendsTakeReservedPermitsAndGiveThemBack(t *testing.T) {
	meter := jobMeter(t, 2)
	var ran atomic.Int64
	reg := func(ts *catalog.Types, f *fixture) {
		registerAll(ts, f)
		ms := []sdk.MethodDesc{
			method("Relay", true, func(s *spot, ctx context.Context, in string) (string, error) {
				for range 3 {
					if err := s.sc.Client().Send(ctx, sdk.InstanceTarget("test.Relay", s.sc.ID()), "Hit", str("")); err != nil {
						return "", err
					}
				}
				return "", nil
			}),
			method("Hit", true, func(s *spot, ctx context.Context, in string) (string, error) {
				ran.Add(1)
				return "", nil
			}),
			method("Ping", false, func(s *spot, ctx context.Context, in string) (string, error) { return "pong", nil }),
		}
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: "test.Relay", Kind: sdk.KindInstance, Methods: ms}, factory(f)))
	}
	n := newNode(t, nodeOpts{register: reg, cfg: func(c *catalog.Config) { c.Meter = meter }})
	st := func() sdk.ApplicationJobQueueStatus { return meter.Status(0, exec.DefaultConfig()).ApplicationJobQueue }
	_, err := n.cat.Call(ctx, sdk.InstanceIntent("test.Relay", "r"), "Ping", str(""))
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget("test.Relay", "r"), "Relay", str("")))
	require.Eventually(t, func() bool { return ran.Load() == 3 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { s := st(); return s.PermitsInUse == 0 && s.ReservedSupplyPermits == 0 }, 5*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, st().PeakPermitsInUse, uint64(3), "reserved permits were taken beyond the 2")
}

// gatedNode is a node metered by meter with the Spot type test.Gated: its one-way Gate(name)
// announces name on entered and runs until gates[name] is closed; Hit and Ping return at once.
func gatedNode(t *testing.T, meter *capacity.Meter, names ...string) (*node, map[string]chan struct{}, <-chan string) {
	gates := make(map[string]chan struct{}, len(names))
	for _, g := range names {
		gates[g] = make(chan struct{})
	}
	entered := make(chan string, len(names))
	reg := func(ts *catalog.Types, f *fixture) {
		registerAll(ts, f)
		ms := []sdk.MethodDesc{
			method("Gate", true, func(s *spot, ctx context.Context, in string) (string, error) {
				entered <- in
				<-gates[in]
				return "", nil
			}),
			method("Hit", true, func(s *spot, ctx context.Context, in string) (string, error) { return "", nil }),
			method("Ping", false, func(s *spot, ctx context.Context, in string) (string, error) { return "pong", nil }),
		}
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: "test.Gated", Kind: sdk.KindInstance, Methods: ms}, factory(f)))
	}
	n := newNode(t, nodeOpts{register: reg, cfg: func(c *catalog.Config) { c.Meter = meter }})
	return n, gates, entered
}

// TestE8_ARunnerReturnsThePermitsOfEndedJobsTogether: a Spot's runner takes over the job
// permits of the one-way messages and queued requests whose turns ended and returns them in
// batches, holding fewer than a batch back beside the permits of the running and queued jobs,
// and returns all it holds once it runs out of work.
func TestE8_ARunnerReturnsThePermitsOfEndedJobsTogether(t *testing.T) {
	meter := jobMeter(t, 100)
	n, gates, entered := gatedNode(t, meter, "a", "b", "c", "d")
	permits := func() uint64 { return meter.Status(0, exec.DefaultConfig()).ApplicationJobQueue.PermitsInUse }
	target := sdk.InstanceTarget("test.Gated", "g")
	_, err := n.cat.Call(ctx, sdk.InstanceIntent("test.Gated", "g"), "Ping", str(""))
	require.NoError(t, err)
	send := func(method, in string) { require.NoError(t, n.cat.Send(ctx, target, method, str(in))) }
	const ended = 20 // jobs that end while the runner is held by the next gate
	heldBack := uint64(ended % catalog.PermitBatch)

	// One-way messages.
	send("Gate", "a")
	require.Equal(t, "a", <-entered)
	for range ended - 1 {
		send("Hit", "")
	}
	send("Gate", "b")
	for range 20 {
		send("Hit", "")
	}
	require.Equal(t, uint64(ended+1+20), permits(), "every admitted job holds a permit")
	close(gates["a"])
	require.Equal(t, "b", <-entered)
	assert.Equal(t, 1+20+heldBack, permits(), "gate b and the 20 queued behind it, and what the runner holds back")
	close(gates["b"])
	require.Eventually(t, func() bool { return permits() == 0 }, 5*time.Second, time.Millisecond,
		"the runner returns what it held back when it runs out of work")

	// Requests that were queued.
	send("Gate", "c")
	require.Equal(t, "c", <-entered)
	var callers sync.WaitGroup
	for range ended - 1 {
		callers.Go(func() {
			_, err := n.cat.Call(ctx, target, "Ping", str(""))
			assert.NoError(t, err)
		})
	}
	// The requests are in the lane (not only holding their permits) before gate d follows them.
	require.Eventually(t, func() bool {
		return meter.Status(0, exec.DefaultConfig()).ApplicationJobQueue.QueuedApplicationJobs == ended-1
	}, 5*time.Second, time.Millisecond)
	send("Gate", "d")
	close(gates["c"])
	require.Equal(t, "d", <-entered)
	callers.Wait()
	assert.Equal(t, 1+heldBack, permits(), "gate d, and what the runner holds back of the requests' permits")
	close(gates["d"])
	require.Eventually(t, func() bool { return permits() == 0 }, 5*time.Second, time.Millisecond)
}

// TestE8_PermitsHeldBackByABlockedRunnerAreReclaimedForAWaitingJob: a runner holds back the
// permits of jobs that ended while its next handler blocks; a job that waits for a permit
// meanwhile gets one of them back, instead of waiting for the handler.
func TestE8_PermitsHeldBackByABlockedRunnerAreReclaimedForAWaitingJob(t *testing.T) {
	meter := jobMeter(t, 6)
	n, gates, entered := gatedNode(t, meter, "z", "a")
	permits := func() uint64 { return meter.Status(0, exec.DefaultConfig()).ApplicationJobQueue.PermitsInUse }
	for _, id := range []string{"g", "h"} {
		_, err := n.cat.Call(ctx, sdk.InstanceIntent("test.Gated", id), "Ping", str(""))
		require.NoError(t, err)
	}
	g, h := sdk.InstanceTarget("test.Gated", "g"), sdk.InstanceTarget("test.Gated", "h")
	require.NoError(t, n.cat.Send(ctx, g, "Gate", str("z")))
	require.Equal(t, "z", <-entered)
	for range 4 {
		require.NoError(t, n.cat.Send(ctx, g, "Hit", str("")))
	}
	require.NoError(t, n.cat.Send(ctx, g, "Gate", str("a")))
	require.Equal(t, uint64(6), permits(), "the queue is full")
	close(gates["z"])
	require.Equal(t, "a", <-entered)
	require.Equal(t, uint64(6), permits(), "gate a runs; the runner holds back the permits of gate z and the four hits")

	// Not a job made by a turn, so it waits for a permit: it gets one that the runner held back.
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, n.cat.Send(c, h, "Hit", str("")), "a job waiting for a permit has the held ones reclaimed")
	require.Eventually(t, func() bool { return permits() == 1 }, 5*time.Second, time.Millisecond,
		"all that was held back returned; gate a holds its own")
	close(gates["a"])
	require.Eventually(t, func() bool { return permits() == 0 }, 5*time.Second, time.Millisecond)
}

func TestCallerCancellationWhileQueued(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("cx", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceTarget(roomType, "cx"), "BlockSend", str("")))
	<-n.f.blocked
	c, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = n.cat.Call(c, sdk.InstanceTarget(roomType, "cx"), "Join", str("late"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(n.f.release)
	out, err := n.call("cx", "Join", "next")
	require.NoError(t, err)
	assert.Equal(t, "next joined cx #2", out, "the cancelled call was dropped unrun")
}

func TestTimersRunOnTheSpotsQueueAndStopAtClose(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("t1", "Tick", "5ms")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.f.ticksOf("t1") >= 5 }, 5*time.Second, time.Millisecond)
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(roomType, "t1")))
	stopped := n.f.ticksOf("t1")

	// While another Spot's timer runs ten of its periods, the closed Spot's timer stays
	// stopped, and a one-shot timer runs once.
	_, err = n.call("t2", "After", "10ms")
	require.NoError(t, err)
	_, err = n.call("t3", "Tick", "10ms")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.f.ticksOf("t3") >= 10 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, stopped, n.f.ticksOf("t1"), "the timer stopped at close")
	assert.Equal(t, 1, n.f.ticksOf("t2"), "a one-shot timer runs once")
}

func TestPeriodicTimerDoesNotKeepASpotAliveUnlessAsked(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.InstanceSpotIdleTimeout = 60 * time.Millisecond
		c.IdleScanInterval = 5 * time.Millisecond
	}})
	_, err := n.call("tick", "Tick", "5ms")
	require.NoError(t, err)
	_, err = n.call("keep", "TickKeepAlive", "5ms")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(n.f.closeReasons("tick")) == 1 }, 5*time.Second, 5*time.Millisecond)
	waitScans(t, n, 200*time.Millisecond)
	assert.Empty(t, n.f.closeReasons("keep"), "a KeepAlive timer counts as activity")
}

func TestCloseIsBoundedAndStopsEverything(t *testing.T) {
	n := newNode(t, nodeOpts{})
	for i := range 100 {
		_, err := n.call(fmt.Sprint("c-", i), "Join", "x")
		require.NoError(t, err)
	}
	require.NoError(t, n.cat.Create(ctx, sdk.UserTarget(playerType, "u")))
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, n.cat.Close(c))
	assert.Equal(t, 102, n.f.totalCloses(sdk.CloseShutdown), "every owned Spot and the Entry Spot got Shutdown")
	for i := range 100 {
		assert.Equal(t, store.StateMissing, n.lookup(t, roomType, fmt.Sprint("c-", i)).State)
	}
	_, err := n.call("after", "Join", "x")
	require.Error(t, err)
	require.NoError(t, n.cat.Close(c), "Close twice is safe")
}

func TestConfigValidation(t *testing.T) {
	base := catalog.Config{Node: "n", Exec: exec.DefaultConfig()}
	require.NoError(t, base.Validate())
	bad := base
	bad.Exec.Application.Count = 0
	require.ErrorIs(t, bad.Validate(), sdk.ErrConfig)
	bad = base
	bad.MaxActive = -1
	require.ErrorIs(t, bad.Validate(), sdk.ErrConfig)
	bad = base
	bad.Node = ""
	require.ErrorIs(t, bad.Validate(), sdk.ErrInvalidID)
}

func TestRegistrationErrors(t *testing.T) {
	ts := &catalog.Types{}
	f := newFixture()
	desc := &sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods}
	require.NoError(t, ts.RegisterSpot(desc, factory(f)))
	require.ErrorIs(t, ts.RegisterSpot(desc, factory(f)), sdk.ErrInvalidArgument)
	require.ErrorIs(t, ts.RegisterSpot(&sdk.SpotDesc{Name: "u", Kind: sdk.KindUser}, factory(f), sdk.WithIdleTimeout(time.Second)), sdk.ErrInvalidArgument, "only Instance types take an idle timeout (D7)")
	require.ErrorIs(t, ts.RegisterSpot(&sdk.SpotDesc{Name: "k", Kind: sdk.KindInvalid}, factory(f)), sdk.ErrInvalidArgument)
	require.ErrorIs(t, ts.RegisterSpot(&sdk.SpotDesc{Name: "", Kind: sdk.KindUser}, factory(f)), sdk.ErrInvalidID)
	require.ErrorIs(t, ts.RegisterSpot(nil, nil), sdk.ErrInvalidArgument)
	dup := []sdk.MethodDesc{methods[0], methods[0]}
	require.ErrorIs(t, ts.RegisterSpot(&sdk.SpotDesc{Name: "d", Kind: sdk.KindUser, Methods: dup}, factory(f)), sdk.ErrInvalidArgument)
	assert.Equal(t, []string{roomType}, ts.Names())
}

// Every message that takes a turn is counted once, whether its handler answers, fails or
// panics, and from many callers at once; a plain call that finds nothing takes no turn.
func TestTurnsCountEveryMessageThatRan(t *testing.T) {
	n := newNode(t, nodeOpts{})
	base := n.cat.Stats().Turns
	_, err := n.callT(sdk.InstanceTarget(roomType, "nobody"), "Join", "ann")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	require.Equal(t, base, n.cat.Stats().Turns, "nothing ran")
	_, err = n.call("t", "Join", "ann")
	require.NoError(t, err)
	_, err = n.call("t", "Boom", "now")
	require.ErrorIs(t, err, sdk.ErrHandlerPanicked)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 25 {
				_, err := n.call(fmt.Sprintf("t%d", j%4), "Join", fmt.Sprintf("u%d-%d", i, j))
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, base+2+200, n.cat.Stats().Turns)
}
