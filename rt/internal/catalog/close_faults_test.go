package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// closingType is an Instance Spot whose turns and closing callback take the time the test
// sets, and which can close itself from a turn.
const closingType = "test.Closing"

type closingSpot struct {
	sc sdk.SpotContext
	st *store.Etcd
	r  *closingState
}

type closingState struct {
	mu                sync.Mutex
	slowFor, closeFor time.Duration
	gate, started     chan struct{}
	quitErr           chan error
	// seenAtEnd is the state of the Spot's record at the end of each closing callback.
	seenAtEnd []store.State
}

func newClosingState() *closingState {
	return &closingState{gate: make(chan struct{}), started: make(chan struct{}, 8), quitErr: make(chan error, 1)}
}

func (s *closingSpot) OnClose(context.Context, sdk.CloseReason) {
	time.Sleep(s.r.closeFor)
	res, _ := s.st.Lookup(context.Background(), store.SpotKey{Type: closingType, ID: s.sc.ID()})
	s.r.mu.Lock()
	s.r.seenAtEnd = append(s.r.seenAtEnd, res.State)
	s.r.mu.Unlock()
}

func closingMethod(name string, fn func(s *closingSpot, ctx context.Context) error) sdk.MethodDesc {
	return sdk.MethodDesc{Name: name, OneWay: true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, _ proto.Message) (proto.Message, error) {
			return nil, fn(impl.(*closingSpot), ctx)
		}}
}

// requireCallbackSawItsRecord requires that the closing callback ran once, before the close
// returned, and found its Spot's record still there at its end (D3).
func requireCallbackSawItsRecord(t *testing.T, r *closingState) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.seenAtEnd, 1, "the closing callback ran once, before the close returned")
	assert.NotEqual(t, store.StateMissing, r.seenAtEnd[0],
		"the record was deleted while the closing callback, within its budget, still ran")
}

// closingNode is a node that also registers closingType, whose Spots read their records in
// the etcd the node runs on.
func closingNode(t *testing.T, r *closingState, opts nodeOpts) *node {
	var onEtcd *store.Etcd
	inner := opts.wrap
	opts.wrap = func(e *store.Etcd) store.Store {
		onEtcd = e
		if inner != nil {
			return inner(e)
		}
		return e
	}
	opts.register = func(ts *catalog.Types, f *fixture) {
		registerAll(ts, f)
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: closingType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
			closingMethod("Slow", func(s *closingSpot, _ context.Context) error {
				s.r.started <- struct{}{}
				time.Sleep(s.r.slowFor)
				return nil
			}),
			closingMethod("WaitThenQuit", func(s *closingSpot, ctx context.Context) error {
				s.r.started <- struct{}{}
				<-s.r.gate
				err := s.sc.Client().CloseSpot(ctx, sdk.InstanceTarget(closingType, s.sc.ID()))
				s.r.quitErr <- err
				return err
			}),
		}}, func(sc sdk.SpotContext) (any, error) { return &closingSpot{sc: sc, st: onEtcd, r: r}, nil }))
	}
	return newNode(t, opts)
}

// D3: the location is not removed before the closing callback ends. The wait for the last turn
// and the callback each have an OperationTimeout: a turn that took most of the first leaves the
// callback its whole budget, so one that ends within it sees its record still there.
func TestD3_TheClosingCallbackHasABudgetOfItsOwn(t *testing.T) {
	r := newClosingState()
	r.slowFor, r.closeFor = 800*time.Millisecond, 500*time.Millisecond
	n := closingNode(t, r, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = time.Second }})
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceIntent(closingType, "budget"), "Slow", str("")))
	wait.For(t, r.started)
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(closingType, "budget")))
	requireCallbackSawItsRecord(t, r)
	assert.Equal(t, store.StateMissing, n.lookup(t, closingType, "budget").State)
}

// A Spot that closes itself from its turn is told its close was taken. When the close it
// joined fails (here another closer's, whose store write fails once), its own close is still
// carried out.
func TestD3_ASpotsCloseOfItselfOutlivesAFailedCloseItJoined(t *testing.T) {
	var fs *faultStore
	r := newClosingState()
	n := closingNode(t, r, nodeOpts{wrap: withFaults(&fs)})
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceIntent(closingType, "self"), "WaitThenQuit", str("")))
	wait.For(t, r.started)
	fs.onBeginRelease(func(context.Context, store.SpotKey, store.Record, store.ReleaseTag) (store.Record, error) {
		fs.onBeginRelease(nil)
		return store.Record{}, fmt.Errorf("store: begin release: %w", sdk.ErrStoreUnavailable)
	})
	closed := make(chan error, 1)
	go func() { closed <- n.cat.CloseTarget(ctx, sdk.InstanceTarget(closingType, "self")) }()
	require.Eventually(t, func() bool { return n.cat.Closing(sdk.InstanceTarget(closingType, "self")) },
		10*time.Second, time.Millisecond, "the outside close waits for the running turn")
	close(r.gate)
	require.NoError(t, wait.For(t, r.quitErr), "the Spot's own close was taken")
	require.ErrorIs(t, wait.For(t, closed), sdk.ErrStoreUnavailable)
	require.Eventually(t, func() bool { return n.lookup(t, closingType, "self").State == store.StateMissing },
		10*time.Second, 10*time.Millisecond, "the Spot's close of itself was carried out")
}

// D2: an idle cleanup's timeout counts from the end of the Spot's last work. Work that ran and
// ended after a scan chose the Spot keeps it: the close re-checks once admission is paused.
func TestD2_IdleCleanupSparesASpotThatWorkedSinceTheScan(t *testing.T) {
	r := newClosingState()
	n := closingNode(t, r, nodeOpts{cfg: func(c *catalog.Config) { c.InstanceSpotIdleTimeout = time.Hour }})
	target := sdk.InstanceTarget(closingType, "busy")
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceIntent(closingType, "busy"), "Slow", str("")))
	wait.For(t, r.started)
	require.Eventually(t, func() bool { return n.cat.Quiescent(target) }, 10*time.Second, time.Millisecond)
	err := n.cat.EvictIdle(ctx, target)
	require.Error(t, err, "the Spot was evicted right after its work")
	assert.True(t, catalog.IsNotQuiescent(err), "%v", err)
	assert.Equal(t, store.StateReady, n.lookup(t, closingType, "busy").State)
	require.NoError(t, n.cat.Send(ctx, target, "Slow", str("")), "it serves on")
	wait.For(t, r.started)
}

// D3: the record's release write is not taken out of the callback's budget either: a store that
// takes most of an OperationTimeout to mark the record Releasing leaves the callback its whole.
func TestD3_ASlowReleaseWriteLeavesTheCallbackItsBudget(t *testing.T) {
	var fs *faultStore
	r := newClosingState()
	r.closeFor = 500 * time.Millisecond
	n := closingNode(t, r, nodeOpts{wrap: withFaults(&fs), cfg: func(c *catalog.Config) { c.OperationTimeout = time.Second }})
	require.NoError(t, n.cat.Send(ctx, sdk.InstanceIntent(closingType, "slow-release"), "Slow", str("")))
	wait.For(t, r.started)
	fs.onBeginRelease(func(ctx context.Context, key store.SpotKey, rec store.Record, tag store.ReleaseTag) (store.Record, error) {
		time.Sleep(800 * time.Millisecond)
		return fs.Etcd.BeginRelease(ctx, key, rec, tag)
	})
	require.NoError(t, n.cat.CloseTarget(ctx, sdk.InstanceTarget(closingType, "slow-release")))
	requireCallbackSawItsRecord(t, r)
}

// closeWhileCreating creates the Instance Spot id on n and holds its creation once its record
// is committed Ready, before the Spot is in the node's index, until Close has listed the Spots
// to close and sealed its background work: the creation passed its check of the node's
// closing before Close began, and the close of the Spot that the creation starts itself can
// no longer start. It returns what Close returned.
func closeWhileCreating(t *testing.T, n *node, fs *faultStore, id string) error {
	t.Helper()
	closed, _ := closeWhileCommitting(t, n, fs, id, func(_ store.Reservation, rec store.Record, err error) (store.Record, error) {
		return rec, err
	})
	return closed
}

// closeWhileCommitting is closeWhileCreating with the commit's answer that the creation gets:
// answer's, given the reservation and the commit's own answer. It returns what Close and the
// call returned.
func closeWhileCommitting(t *testing.T, n *node, fs *faultStore, id string,
	answer func(r store.Reservation, rec store.Record, err error) (store.Record, error)) (closed, called error) {
	t.Helper()
	committed, resume := make(chan struct{}), make(chan struct{})
	fs.onCommitReady(func(ctx context.Context, r store.Reservation) (store.Record, error) {
		fs.onCommitReady(nil)
		rec, err := fs.Etcd.CommitReady(ctx, r)
		close(committed)
		select {
		case <-resume:
		case <-time.After(wait.Bound):
		}
		return answer(r, rec, err)
	})
	calls := make(chan error, 1)
	go func() {
		_, err := n.call(id, "Join", "x")
		calls <- err
	}()
	wait.For(t, committed)
	closes := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		closes <- n.cat.Close(c)
	}()
	require.Eventually(t, n.cat.BackgroundSealed, wait.Bound, time.Millisecond,
		"Close did not reach the end of its background work")
	close(resume)
	closed = wait.For(t, closes)
	return closed, wait.For(t, calls) // its outcome depends on whether Join ran before the close
}

// B8: a creation whose commit of Ready took, but whose answer the node's close cut off, fails
// and releases its record, now Ready at a later revision than its reservation: the reconcile,
// which would find it otherwise, has stopped with the close, and the record would name the
// closing node until its lease ended.
func TestB8_ACreationWhoseReadyCommitsAnswerTheCloseCutOffReleasesItsRecord(t *testing.T) {
	var fs *faultStore
	n := newNode(t, nodeOpts{wrap: withFaults(&fs)})
	closed, called := closeWhileCommitting(t, n, fs, "cut-off", func(r store.Reservation, _ store.Record, err error) (store.Record, error) {
		if err != nil {
			return store.Record{}, err
		}
		return store.Record{}, fmt.Errorf("store: commit ready %s: %w", r.Key, store.ErrOutcomeUnknown)
	})
	require.ErrorIs(t, called, sdk.ErrCreationFailed)
	require.NoError(t, closed)
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "cut-off").State, "its record was released")
	assert.Empty(t, n.f.closeReasons("cut-off"), "no Spot ran under it")
}

// F8: a Spot whose creation finished while the node closed, after Close listed the Spots to
// close, is closed as they are while Close has time left: its closing callback gets Shutdown,
// its record is released, and Close is not forced.
func TestF8_ASpotCreatedWhileTheNodeClosesIsClosedNotForceStopped(t *testing.T) {
	var fs *faultStore
	n := newNode(t, nodeOpts{wrap: withFaults(&fs)})
	require.NoError(t, closeWhileCreating(t, n, fs, "late"), "nothing was left to force-stop")
	assert.Equal(t, []sdk.CloseReason{sdk.CloseShutdown}, n.f.closeReasons("late"))
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "late").State, "its record was released")
	assert.Zero(t, n.cat.ActiveOwned(), "the Spot left the node")
}

// F8: a Spot whose creation finished while the node closed is closed once the creations
// have ended, while other background work of the node's still goes on.
func TestF8_ASpotCreatedWhileTheNodeClosesIsClosedWhileOtherBackgroundWorkGoesOn(t *testing.T) {
	var fs *faultStore
	n := newNode(t, nodeOpts{wrap: withFaults(&fs)})
	release := make(chan struct{})
	require.True(t, n.cat.HoldBackground(release))
	var closedWhileHeld atomic.Bool
	go func() {
		defer close(release)
		deadline := time.Now().Add(wait.Bound)
		for time.Now().Before(deadline) {
			if len(n.f.closeReasons("late")) > 0 {
				closedWhileHeld.Store(true)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	require.NoError(t, closeWhileCreating(t, n, fs, "late"), "nothing was left to force-stop")
	assert.True(t, closedWhileHeld.Load(), "the late Spot waited for the other background work")
	assert.Equal(t, []sdk.CloseReason{sdk.CloseShutdown}, n.f.closeReasons("late"))
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "late").State, "its record was released")
}

// F8: a Spot created while the node closed whose close fails is force-stopped, and Close's
// error says why: it wraps ErrForceStopped and the close's failure, names the Spot's late
// creation, and formats no missing cause.
func TestF8_AForcedStopOfASpotCreatedWhileTheNodeClosedSaysWhy(t *testing.T) {
	var fs *faultStore
	n := newNode(t, nodeOpts{wrap: withFaults(&fs)})
	fs.onBeginRelease(func(context.Context, store.SpotKey, store.Record, store.ReleaseTag) (store.Record, error) {
		return store.Record{}, fmt.Errorf("store: begin release: %w", sdk.ErrStoreUnavailable)
	})
	err := closeWhileCreating(t, n, fs, "late")
	require.ErrorIs(t, err, catalog.ErrForceStopped)
	require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Close's deadline had not passed")
	assert.Contains(t, err.Error(), "created while the node closed")
	assert.NotContains(t, err.Error(), "%!")
	assert.Empty(t, n.f.closeReasons("late"), "a force-stopped Spot gets no callback")
}

// F8: a close that waits for room in a lifecycle lane that stays full behind a turn that does
// not end gives up as one whose Spot's work outlasted it, not as a failure of its own.
func TestF8_ACloseBehindAFullLifecycleLaneSaysTheWorkOutlastedIt(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.OperationTimeout = time.Second
		c.Exec.Lifecycle.Count = 2
	}})
	t.Cleanup(func() { close(n.f.release) })
	go func() { _, _ = n.call("full", "Block", "") }()
	require.Equal(t, "full", <-n.f.blocked)
	queued, err := n.cat.FillLifecycleLane(room("full"))
	require.NoError(t, err)
	require.Equal(t, 2, queued)

	err = n.cat.CloseTarget(ctx, room("full"))
	require.ErrorIs(t, err, catalog.ErrWorkOutlastedClose)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
