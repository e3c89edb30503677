package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// faultStore puts the test between the catalog and etcd for some kinds of write.
type faultStore struct {
	*store.Etcd
	mu           sync.Mutex
	beginRelease func(ctx context.Context, key store.SpotKey, rec store.Record, tag store.ReleaseTag) (store.Record, error)
	commitReady  func(ctx context.Context, r store.Reservation) (store.Record, error)
}

func (f *faultStore) CommitReady(ctx context.Context, r store.Reservation) (store.Record, error) {
	f.mu.Lock()
	h := f.commitReady
	f.mu.Unlock()
	if h != nil {
		return h(ctx, r)
	}
	return f.Etcd.CommitReady(ctx, r)
}

func (f *faultStore) onCommitReady(h func(ctx context.Context, r store.Reservation) (store.Record, error)) {
	f.mu.Lock()
	f.commitReady = h
	f.mu.Unlock()
}

func (f *faultStore) BeginRelease(ctx context.Context, key store.SpotKey, rec store.Record, tag store.ReleaseTag) (store.Record, error) {
	f.mu.Lock()
	h := f.beginRelease
	f.mu.Unlock()
	if h != nil {
		return h(ctx, key, rec, tag)
	}
	return f.Etcd.BeginRelease(ctx, key, rec, tag)
}

func (f *faultStore) onBeginRelease(h func(ctx context.Context, key store.SpotKey, rec store.Record, tag store.ReleaseTag) (store.Record, error)) {
	f.mu.Lock()
	f.beginRelease = h
	f.mu.Unlock()
}

func withFaults(fs **faultStore) func(*store.Etcd) store.Store {
	return func(st *store.Etcd) store.Store {
		*fs = &faultStore{Etcd: st}
		return *fs
	}
}

func shortLease() store.LeaseOptions {
	return store.LeaseOptions{TTL: 2 * time.Second, KeepAliveInterval: 100 * time.Millisecond}
}

func room(id string) sdk.Target { return sdk.InstanceTarget(roomType, id) }

func waitLost(t *testing.T, n *node) {
	t.Helper()
	select {
	case <-n.reg.Lost():
	case <-time.After(15 * time.Second):
		t.Fatal("the owner lease's end was not noticed")
	}
}

// endLease ends n's owner lease, as a pause or a partition would, and waits until n saw it.
func endLease(t *testing.T, n *node) {
	t.Helper()
	_, err := n.store.Client().Revoke(ctx, clientv3LeaseID(n.reg.Owner().Lease))
	require.NoError(t, err)
	waitLost(t, n)
}

// registerAgain registers n's node again, after its owner lease ended, and rebinds its catalog.
func registerAgain(t *testing.T, n *node) {
	t.Helper()
	next, err := n.store.Register(ctx, nodeDesc(string(n.cat.Owner().Node)), shortLease())
	require.NoError(t, err)
	t.Cleanup(func() { _ = next.Close(context.Background()) })
	require.NoError(t, n.cat.Rebind(next))
}

// C1: when the owner lease ends, the work queued for the node's Spots never runs, their timers
// stop, and only then does the closing callback run, with CloseOwnerLost.
func TestC1_QueuedWorkDoesNotRunAfterLeaseLoss(t *testing.T) {
	n := newNode(t, nodeOpts{lease: shortLease()})
	_, err := n.call("c1", "Tick", "5ms")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.f.ticksOf("c1") >= 3 }, 5*time.Second, time.Millisecond)
	require.NoError(t, n.cat.Send(ctx, room("c1"), "BlockSend", str("")))
	<-n.f.blocked
	ticks := n.f.ticksOf("c1")
	for i := range 100 {
		require.NoError(t, n.cat.Send(ctx, room("c1"), "Say", str(fmt.Sprint("q", i))))
	}
	queued := make(chan error, 1)
	go func() {
		_, err := n.callT(room("c1"), "Join", "queued")
		queued <- err
	}()

	revoked := time.Now()
	endLease(t, n)
	assert.ErrorIs(t, n.reg.Cause(), store.ErrLeaseNotFound)
	close(n.f.release)

	require.Eventually(t, func() bool { return len(n.f.closeReasons("c1")) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []sdk.CloseReason{sdk.CloseOwnerLost}, n.f.closeReasons("c1"))
	err = <-queued
	assert.True(t, errors.Is(err, sdk.ErrStaleRoute) || errors.Is(err, sdk.ErrOwnerUnavailable), "the queued request did not run: %v", err)
	n.f.mu.Lock()
	for _, s := range n.f.said {
		assert.False(t, strings.HasPrefix(s, "c1:q"), "%s ran after the owner lease ended", s)
	}
	n.f.mu.Unlock()
	assert.Equal(t, ticks, n.f.ticksOf("c1"), "no timer ran after the owner lease ended")
	require.Eventually(t, func() bool { return n.cat.Stats().OwnerLost == 1 }, 10*time.Second, time.Millisecond)
	assert.True(t, n.f.spotContext("c1").TurnStart().Before(revoked),
		"the work refused at its turn, the closing callback's among it, did not count as a turn's start")
}

// C1: a process can pause between a turn's lease check and its handler's first line, and the
// handler then runs after the lease ended (a turn already let start is not stopped); its
// TurnStart still names the instant of the check, which the lease covered.
func TestC1_TurnStartIsTheChecksInstantWhenAPauseFollowsIt(t *testing.T) {
	var hook atomic.Pointer[func()]
	t.Cleanup(catalog.OnTurnChecked(func() {
		if h := hook.Load(); h != nil {
			(*h)()
		}
	}))
	n := newNode(t, nodeOpts{lease: shortLease()})
	_, err := n.call("pz", "Join", "x")
	require.NoError(t, err)

	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pause := func() { once.Do(func() { close(paused); <-resume }) }
	hook.Store(&pause)
	type outcome struct {
		out string
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		out, err := n.callT(room("pz"), "TurnStart", "")
		done <- outcome{out, err}
	}()
	<-paused
	revoked := time.Now()
	endLease(t, n)
	close(resume)
	got := <-done
	require.NoError(t, got.err)
	var start, handler int64
	_, err = fmt.Sscan(got.out, &start, &handler)
	require.NoError(t, err)
	assert.True(t, time.Unix(0, start).Before(revoked), "the turn's start %v is its check's, before the lease ended at %v", time.Unix(0, start), revoked)
	assert.True(t, time.Unix(0, handler).After(revoked), "the handler ran after the pause")
}

// C1: a turn's TurnStart is the instant the runtime found the owner lease valid and let the
// turn start: after the turn ahead of it ended, not when it was queued; before the handler's
// first line; a timer's when it fires; an Entry Spot's too. The factory runs before any turn.
func TestC1_TurnStartIsTheInstantTheLeaseCheckLetTheTurnStart(t *testing.T) {
	n := newNode(t, nodeOpts{})
	turnStart := func(target sdk.Target) (start, handler time.Time) {
		t.Helper()
		out, err := n.callT(target, "TurnStart", "")
		require.NoError(t, err)
		var s, h int64
		_, err = fmt.Sscan(out, &s, &h)
		require.NoError(t, err)
		return time.Unix(0, s), time.Unix(0, h)
	}

	before := time.Now()
	start, handler := turnStart(sdk.InstanceIntent(roomType, "ts"))
	after := time.Now()
	n.f.mu.Lock()
	assert.True(t, n.f.builtAtStart["ts"].IsZero(), "no turn before the factory")
	n.f.mu.Unlock()
	assert.False(t, start.Before(before), "%v is before the call at %v", start, before)
	assert.False(t, handler.Before(start), "the handler at %v ran before its turn started at %v", handler, start)
	assert.False(t, after.Before(handler))

	require.NoError(t, n.cat.Send(ctx, room("ts"), "BlockSend", str("")))
	assert.Equal(t, "ts", <-n.f.blocked)
	queued := make(chan time.Time, 1)
	go func() {
		s, _ := turnStart(room("ts"))
		queued <- s
	}()
	time.Sleep(50 * time.Millisecond) // the call is queued behind the blocked turn
	released := time.Now()
	close(n.f.release)
	s := <-queued
	assert.False(t, s.Before(released), "the queued turn's start %v is before the turn ahead of it ended at %v", s, released)

	called := time.Now()
	_, err := n.call("ts", "AfterStamp", "30ms")
	require.NoError(t, err)
	var stamp string
	require.Eventually(t, func() bool {
		n.f.mu.Lock()
		defer n.f.mu.Unlock()
		for _, said := range n.f.said {
			if v, ok := strings.CutPrefix(said, "ts:timer:"); ok {
				stamp = v
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
	var ns int64
	_, err = fmt.Sscan(stamp, &ns)
	require.NoError(t, err)
	assert.False(t, time.Unix(0, ns).Before(called.Add(30*time.Millisecond)), "the timer's turn started when it fired")

	before = time.Now()
	start, handler = turnStart(sdk.EntryTarget(lobbyType, "node-a"))
	assert.False(t, start.Before(before))
	assert.False(t, handler.Before(start))
}

// C1: a node cut off from etcd stops owning its Spots when its lease guard runs out, before
// etcd expires the lease, without waiting for etcd to say so.
func TestC1_GuardRunningOutEndsTheSpots(t *testing.T) {
	n := newNode(t, nodeOpts{lease: shortLease()})
	_, err := n.call("g1", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.store.Client().Close()) // a partition from etcd
	waitLost(t, n)
	assert.ErrorIs(t, n.reg.Cause(), store.ErrLeaseGuardExpired)
	require.Eventually(t, func() bool { return len(n.f.closeReasons("g1")) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []sdk.CloseReason{sdk.CloseOwnerLost}, n.f.closeReasons("g1"))
	_, err = n.callT(room("g1"), "Join", "late")
	require.Error(t, err, "nothing runs on a node that owns nothing")
}

// B8: a factory that never returns fails its creation at OperationTimeout and releases the
// reservation; the ID can be created again, and the stuck factory does not hold up Close.
func TestB8_FactoryTimeout(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = 300 * time.Millisecond }})
	n.f.set(n.f.building, "slow")
	_, err := n.call("slow", "Join", "x")
	require.ErrorIs(t, err, sdk.ErrCreationFailed)
	assert.Equal(t, "factory:slow", <-n.f.blocked)
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "slow").State, "the reservation was released")

	n.f.mu.Lock()
	delete(n.f.building, "slow")
	n.f.mu.Unlock()
	out, err := n.call("slow", "Join", "x")
	require.NoError(t, err, "the ID can be created again")
	assert.Equal(t, "x joined slow #1", out)

	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, n.cat.Close(c), "the abandoned factory is not the close's to wait for")
	assert.Less(t, time.Since(start), 5*time.Second)
	close(n.f.release)
	assert.Equal(t, 2, n.f.factoryRuns("slow"))
}

// F8: a Spot that closes itself from its own one-way handler through its SpotContext closes
// after that turn; nothing hangs.
func TestF8_SelfCloseDoesNotHang(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("self", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, room("self"), "Quit", str("")))
	require.Eventually(t, func() bool { return len(n.f.closeReasons("self")) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []sdk.CloseReason{sdk.CloseExplicit}, n.f.closeReasons("self"))
	require.Eventually(t, func() bool { return n.lookup(t, roomType, "self").State == store.StateMissing }, 10*time.Second, time.Millisecond)
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, n.cat.Close(c))
}

// F8: a handler that closes its own Spot through a client that cannot know it is that Spot's
// turn makes the close wait for its own turn: the close gives up at OperationTimeout, the
// handler gets the error, and the Spot serves on.
func TestF8_CloseFromTheOwnTurnThroughAnotherClientFailsInTime(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = 300 * time.Millisecond }})
	_, err := n.call("outer", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, room("outer"), "QuitOuter", str("")))
	require.Eventually(t, func() bool { return n.f.said1("outer:quit:true") }, 10*time.Second, time.Millisecond)
	out, err := n.call("outer", "Join", "y")
	require.NoError(t, err)
	assert.Equal(t, "y joined outer #2", out, "the same activation serves on")
	assert.Empty(t, n.f.closeReasons("outer"))
}

// F8: Close is bounded by its context: a handler that never returns does not hold it; the Spot
// is force-stopped without its callback and Close says so, naming the deadline.
func TestF8_CloseIsBoundedByItsContext(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = time.Minute }})
	_, err := n.call("stuck", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(ctx, room("stuck"), "BlockSend", str("")))
	<-n.f.blocked
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = n.cat.Close(c)
	took := time.Since(start)
	require.ErrorIs(t, err, catalog.ErrForceStopped)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the error names the deadline")
	assert.NotContains(t, err.Error(), "%!")
	assert.Less(t, took, 5*time.Second)
	assert.Empty(t, n.f.closeReasons("stuck"), "a force-stopped Spot gets no callback")
	close(n.f.release)
}

// F8, C3: a Spot that the node's close force-stopped keeps its record until the node's lease
// ends, and its handler may still run: a message for it is refused unrun as not serving, at
// once, by the node itself (a local caller) or for a peer, so that the caller may look
// elsewhere, and nothing is created on the closing node.
func TestF8_AMessageForAForceStoppedSpotIsRefusedAsNotServing(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = time.Minute }})
	target := room("forced")
	_, err := n.call(target.ID(), "Join", "x")
	require.NoError(t, err)
	route, ok := n.cat.LocalSpot(target)
	require.True(t, ok)
	require.NoError(t, n.cat.Send(ctx, target, "BlockSend", str("")))
	<-n.f.blocked
	defer close(n.f.release)
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, n.cat.Close(c), catalog.ErrForceStopped)
	require.Equal(t, store.StateReady, n.lookup(t, roomType, target.ID()).State, "the record stays until the lease ends")

	_, admitted, err := n.cat.Deliver(ctx, route, "Join", str("late"), false)
	require.False(t, admitted)
	require.ErrorIs(t, err, catalog.ErrClosing, "refused unrun: the caller resolves again")
	_, err = n.call(target.ID(), "Join", "late")
	require.ErrorIs(t, err, sdk.ErrNotServing, "the intent call is refused unrun")
	_, err = n.cat.Resolve(ctx, target, catalog.Intent)
	require.ErrorIs(t, err, sdk.ErrNotServing, "as a peer's intent call is")
	assert.False(t, n.f.said1("forced:late"), "nothing ran")
	assert.Equal(t, 1, n.f.factoryRuns(target.ID()), "nothing was created")
}

// D3: a closing callback that never returns holds its Spot's close only for OperationTimeout;
// the location is released after it.
func TestD3_HangingClosingCallbackDoesNotBlockTheClose(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) { c.OperationTimeout = 300 * time.Millisecond }})
	_, err := n.call("hang", "Join", "x")
	require.NoError(t, err)
	n.f.set(n.f.hangOnClose, "hang")
	start := time.Now()
	require.NoError(t, n.cat.CloseTarget(ctx, room("hang")))
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, "onclose:hang", <-n.f.blocked)
	assert.Equal(t, store.StateMissing, n.lookup(t, roomType, "hang").State)
	close(n.f.release)
}

// D3: a Spot is closing only once the store took its release. While the store has not
// answered, callers wait; when it refuses, the Spot serves on and they run.
func TestD3_SpotIsNotClosingUntilTheStoreTakesTheRelease(t *testing.T) {
	var fs *faultStore
	n := newNode(t, nodeOpts{wrap: withFaults(&fs)})
	_, err := n.call("p", "Join", "x")
	require.NoError(t, err)
	entered, refuse := make(chan struct{}), make(chan struct{})
	fs.onBeginRelease(func(ctx context.Context, _ store.SpotKey, _ store.Record, _ store.ReleaseTag) (store.Record, error) {
		fs.onBeginRelease(nil)
		close(entered)
		<-refuse
		return store.Record{}, fmt.Errorf("store: begin release: %w", sdk.ErrStoreUnavailable)
	})
	closed := make(chan error, 1)
	go func() { closed <- n.cat.CloseTarget(ctx, room("p")) }()
	<-entered
	joined := make(chan string, 1)
	go func() {
		out, err := n.callT(room("p"), "Join", "meanwhile")
		assert.NoError(t, err, "a Spot whose release the store has not taken is not gone")
		joined <- out
	}()
	select {
	case out := <-joined:
		t.Fatalf("the call ran while the close was undecided: %q", out)
	case <-time.After(50 * time.Millisecond):
	}
	close(refuse)
	require.ErrorIs(t, <-closed, sdk.ErrStoreUnavailable)
	assert.Equal(t, "meanwhile joined p #2", <-joined)
	assert.Empty(t, n.f.closeReasons("p"))
	assert.Equal(t, store.StateReady, n.lookup(t, roomType, "p").State)
}

// D3, B8: a release that took effect although its answer was lost is finished by the
// reconcile: the Spot closes, its callback runs once, and its location is released.
func TestD3_LostReleaseAnswerIsFinishedByTheReconcile(t *testing.T) {
	var fs *faultStore
	n := newNode(t, nodeOpts{wrap: withFaults(&fs)})
	_, err := n.call("lost", "Join", "x")
	require.NoError(t, err)
	fs.onBeginRelease(func(ctx context.Context, key store.SpotKey, rec store.Record, tag store.ReleaseTag) (store.Record, error) {
		fs.onBeginRelease(nil)
		if _, err := fs.Etcd.BeginRelease(ctx, key, rec, tag); err != nil {
			return store.Record{}, err
		}
		return store.Record{}, fmt.Errorf("store: begin release: answer lost: %w", store.ErrOutcomeUnknown)
	})
	require.ErrorIs(t, n.cat.CloseTarget(ctx, room("lost")), store.ErrOutcomeUnknown)
	require.Eventually(t, func() bool { return n.lookup(t, roomType, "lost").State == store.StateMissing }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []sdk.CloseReason{sdk.CloseExplicit}, n.f.closeReasons("lost"))
	out, err := n.call("lost", "Join", "again")
	require.NoError(t, err)
	assert.Equal(t, "again joined lost #1", out, "created afresh")
}

// B8: a peer's message for a Spot whose record names this node but which has no activation
// here gets a stale route, and makes the node release that record.
func TestB8_PeerMessageForALeakedRecordReleasesIt(t *testing.T) {
	n := newNode(t, nodeOpts{})
	key := store.SpotKey{Type: roomType, ID: "leak"}
	r, err := n.store.Reserve(ctx, key, sdk.KindInstance, n.reg.Owner())
	require.NoError(t, err)
	_, err = n.store.CommitReady(ctx, r.Reservation)
	require.NoError(t, err)
	err = n.cat.Admit(ctx, room("leak"), "Join", str("x"), 1, false, catalog.AnswerFunc(func(proto.Message, error) {
		t.Error("a message ran without an activation")
	}))
	require.ErrorIs(t, err, sdk.ErrStaleRoute)
	// The record goes before the release's answer comes back and is counted.
	require.Eventually(t, func() bool {
		return n.lookup(t, roomType, "leak").State == store.StateMissing && n.cat.Stats().LeaksReleased == 1
	}, 10*time.Second, 5*time.Millisecond)
}

// B7: a peer's message for a Spot this node is creating is not refused as a stale route: Admit
// answers ErrCreating at once, without waiting, and once AwaitCreation returns the message is
// admitted to the new Spot.
func TestB7_AdmitDuringCreationAnswersErrCreating(t *testing.T) {
	n := newNode(t, nodeOpts{})
	n.f.set(n.f.building, "b7")
	created := make(chan error, 1)
	go func() {
		_, err := n.call("b7", "Join", "first")
		created <- err
	}()
	require.Equal(t, "factory:b7", <-n.f.blocked)
	ran := make(chan string, 1)
	admit := func() error {
		return n.cat.Admit(ctx, room("b7"), "Join", str("peer"), 1, false, catalog.AnswerFunc(func(out proto.Message, err error) {
			assert.NoError(t, err)
			ran <- out.(*wrapperspb.StringValue).GetValue()
		}))
	}
	require.ErrorIs(t, admit(), catalog.ErrCreating)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	require.ErrorIs(t, n.cat.AwaitCreation(short, room("b7")), context.DeadlineExceeded, "the wait is bounded by its context")
	cancel()

	close(n.f.release)
	require.NoError(t, n.cat.AwaitCreation(ctx, room("b7")))
	require.NoError(t, <-created)
	require.NoError(t, admit())
	assert.Equal(t, "peer joined b7 #2", <-ran)
}

// C1: every activation of a Spot gets a Fence that supersedes the previous one's.
func TestC1_FenceGrowsWithEveryActivation(t *testing.T) {
	n := newNode(t, nodeOpts{})
	first, err := n.call("f", "Fence", "")
	require.NoError(t, err)
	require.NoError(t, n.cat.CloseTarget(ctx, room("f")))
	second, err := n.call("f", "Fence", "")
	require.NoError(t, err)
	var e1, l1, e2, l2 int64
	_, err = fmt.Sscanf(first, "%d/%d", &e1, &l1)
	require.NoError(t, err)
	_, err = fmt.Sscanf(second, "%d/%d", &e2, &l2)
	require.NoError(t, err)
	assert.True(t, sdk.Fence{Epoch: e2, Lease: l2}.Supersedes(sdk.Fence{Epoch: e1, Lease: l1}), "%s then %s", first, second)
	assert.Equal(t, n.reg.Owner().Lease, l1)
	assert.Equal(t, l1, l2, "same node registration")
}

// C3: a handler's error reaches its caller as an application error, whatever runtime answer it
// wraps, so that neither the runtime nor the caller takes it for the runtime's answer about
// the call (which could make either send it again); and the message ran once.
func TestC3_HandlerErrorReachesTheCallerAsAnApplicationError(t *testing.T) {
	n := newNode(t, nodeOpts{})
	for name, inner := range nested {
		t.Run(name, func(t *testing.T) {
			id := "c3-" + name
			_, err := n.call(id, "FailWith", name)
			var ae *sdk.AppError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, ae.Message, "nested call failed")
			for _, sentinel := range []error{sdk.ErrStaleRoute, sdk.ErrNotFound, sdk.ErrCapacityExceeded, sdk.ErrQueueFull, catalog.ErrClosing} {
				assert.NotErrorIs(t, err, sentinel)
			}
			if want, ok := inner.(*sdk.AppError); ok {
				assert.Equal(t, want.Code, ae.Code, "an application code inside is kept")
			}
			n.f.mu.Lock()
			runs := 0
			for _, s := range n.f.said {
				if s == id+":failwith:"+name {
					runs++
				}
			}
			n.f.mu.Unlock()
			assert.Equal(t, 1, runs, "ran once")
		})
	}
}

// C1: an Entry Spot takes turns only while its node holds a certainly valid lease: between the
// end of one registration and the next it refuses work, and it serves again, the same
// activation, once the node registers again.
func TestC1_EntrySpotRunsOnlyUnderAValidRegistration(t *testing.T) {
	n := newNode(t, nodeOpts{lease: shortLease()})
	lobby := sdk.EntryTarget(lobbyType, "node-a")
	out, err := n.callT(lobby, "Join", "x")
	require.NoError(t, err)
	assert.Equal(t, "x joined  #1", out)
	before, err := n.callT(lobby, "Fence", "")
	require.NoError(t, err)

	endLease(t, n)
	_, err = n.callT(lobby, "Join", "between")
	require.ErrorIs(t, err, sdk.ErrStaleRoute, "no registration, no turn")

	registerAgain(t, n)
	out, err = n.callT(lobby, "Join", "y")
	require.NoError(t, err)
	assert.Equal(t, "y joined  #2", out, "the same Entry Spot serves again")
	after, err := n.callT(lobby, "Fence", "")
	require.NoError(t, err)
	assert.NotEqual(t, before, after, "its Fence follows the node's registration")

	_, err = n.call("fresh", "Join", "z")
	require.NoError(t, err, "the new registration owns new Spots")
}

// F8: a request of a Spot to itself from its own turn would wait for that turn to end; it is
// refused at once, and the Spot serves on.
func TestF8_RequestOfASpotToItselfIsRefused(t *testing.T) {
	n := newNode(t, nodeOpts{})
	out, err := n.call("me", "AskSelf", "")
	require.NoError(t, err)
	assert.Contains(t, out, sdk.ErrInvalidArgument.Error())
	assert.Contains(t, out, "to itself")
	out, err = n.call("me", "Join", "x")
	require.NoError(t, err)
	assert.Equal(t, "x joined me #1", out, "the refused request did not run")
}

// F8: a one-way message sent from a request's turn runs in a turn of its own; a request it
// makes of the sender's Spot while that turn goes on waits for the turn and runs, never refused
// as a request of the Spot to itself.
func TestF8_AOneWayTurnIsNotItsSendersRequestTurn(t *testing.T) {
	calling, answered := make(chan struct{}, 1), make(chan error, 1)
	start := func(s *spot, ctx context.Context, peer string) (string, error) {
		if err := s.sc.Client().Send(ctx, sdk.InstanceIntent("test.Hop", peer), "Back", str(s.sc.ID())); err != nil {
			return "", err
		}
		select {
		case <-calling:
		case <-time.After(5 * time.Second):
			return "", errors.New("the one-way message did not run")
		}
		// The peer's request is on its way to this Spot while this turn goes on: it must
		// neither be refused nor run before the turn ends.
		select {
		case err := <-answered:
			return "", fmt.Errorf("the peer's request was answered during this turn: %v", err)
		case <-time.After(100 * time.Millisecond):
			return "started", nil
		}
	}
	n := newNode(t, nodeOpts{register: callBackType("test.Hop", start, func() { calling <- struct{}{} }, 5*time.Second, answered)})
	// A caller's context with a deadline gives the request's turn an identity of its own.
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := n.cat.Call(c, sdk.InstanceIntent("test.Hop", "a"), "Start", str("b"))
	require.NoError(t, err)
	assert.Equal(t, "started", out.(*wrapperspb.StringValue).GetValue())
	awaitCallBack(t, answered, "the one-way turn's request waited for the sender's turn and ran")
}

// F8: a request's turn that sends to another Spot and then waits for that Spot, whose
// one-way turn meanwhile calls back, makes a cycle of requests: the caller's deadline ends it,
// as it ends any such cycle, and then the other Spot's request runs.
func TestF8_ACycleThroughAOneWayTurnEndsWithTheCallersDeadline(t *testing.T) {
	pinged := make(chan error, 1)
	start := func(s *spot, ctx context.Context, peer string) (string, error) {
		if err := s.sc.Client().Send(ctx, sdk.InstanceIntent("test.Cycle", peer), "Back", str(s.sc.ID())); err != nil {
			return "", err
		}
		// Queued behind Back's turn, which waits for this one.
		_, err := s.sc.Client().Call(ctx, sdk.InstanceTarget("test.Cycle", peer), "Ping", str(""))
		return "", err
	}
	n := newNode(t, nodeOpts{register: callBackType("test.Cycle", start, nil, 10*time.Second, pinged)})
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := n.cat.Call(c, sdk.InstanceIntent("test.Cycle", "a"), "Start", str("b"))
	// The caller's wait or the handler's, whichever ends first, answers: the handler's error
	// reaches the caller as a handler's error with its text.
	require.ErrorContains(t, err, context.DeadlineExceeded.Error())
	awaitCallBack(t, pinged, "the one-way turn's request ran once the sender's turn ended")
}

// callBackType registers, beside the fixture's types, the Instance type name: its request
// Start runs start; its one-way Back, sent the ID of the Spot that sent it, runs before (when
// set) and then calls that Spot's Ping within bound, and reports the outcome to called; Ping
// answers at once.
func callBackType(name string, start func(*spot, context.Context, string) (string, error), before func(),
	bound time.Duration, called chan<- error) func(*catalog.Types, *fixture) {
	return func(ts *catalog.Types, f *fixture) {
		registerAll(ts, f)
		ms := []sdk.MethodDesc{
			method("Start", false, start),
			method("Back", true, func(s *spot, ctx context.Context, sender string) (string, error) {
				if before != nil {
					before()
				}
				c, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				_, err := s.sc.Client().Call(c, sdk.InstanceTarget(name, sender), "Ping", str(""))
				called <- err
				return "", nil
			}),
			method("Ping", false, func(s *spot, ctx context.Context, in string) (string, error) { return "pong", nil }),
		}
		must(ts.RegisterSpot(&sdk.SpotDesc{Name: name, Kind: sdk.KindInstance, Methods: ms}, factory(f)))
	}
}

// awaitCallBack requires that the call back of a callBackType Spot returns, without an error.
func awaitCallBack(t *testing.T, called <-chan error, why string) {
	t.Helper()
	select {
	case err := <-called:
		require.NoError(t, err, why)
	case <-time.After(10 * time.Second):
		t.Fatal("the one-way turn's request did not return")
	}
}

// F8: the turn of a request that found its Spot idle runs on its caller's goroutine; another
// goroutine that shares the caller's context (an ordinary Go pattern) is an ordinary caller,
// not the turn: it waits for the turn and runs, never refused as a request of the Spot to
// itself.
func TestF8_CallersSharingAContextAreNotTakenForTheTurn(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := n.call("shared", "Join", "x")
	require.NoError(t, err)
	shared, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	call := func(m string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := n.cat.Call(shared, room("shared"), m, str(""))
			done <- err
		}()
		return done
	}
	first := call("Block")
	assert.Equal(t, "shared", <-n.f.blocked, "the first call's turn runs")
	second := call("Join")
	select {
	case err := <-second:
		t.Fatalf("the second caller did not wait for the turn: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(n.f.release)
	require.NoError(t, <-first)
	require.NoError(t, <-second, "the second caller ran after the turn")
}

// peerCtx stands for the context of a peer's request, as the transport makes it: made for that
// request alone, it answers the request and can carry its turn's identity.
type peerCtx struct {
	context.Context
	turn    exec.RequestTurn
	outcome chan string
}

func newPeerCtx(parent context.Context) *peerCtx {
	return &peerCtx{Context: parent, outcome: make(chan string, 1)}
}

func (c *peerCtx) RequestTurn() *exec.RequestTurn { return &c.turn }

func (c *peerCtx) Value(key any) any {
	if v, ok := exec.RequestTurnValue(key, &c.turn); ok {
		return v
	}
	return c.Context.Value(key)
}

func (c *peerCtx) Answer(out proto.Message, err error) {
	if err != nil {
		c.outcome <- "error: " + err.Error()
		return
	}
	c.outcome <- out.(*wrapperspb.StringValue).GetValue()
}

// turnType registers, beside the fixture's types, the Instance type test.Turn: Self asks its
// own Spot with its context and with one derived from it, and answers whether its context is a
// peer's request's and what the two requests met; Relay asks the Spot it is sent the ID of to
// run Self, with its own context.
func turnType(ts *catalog.Types, f *fixture) {
	registerAll(ts, f)
	self := func(s *spot, ctx context.Context, _ string) (string, error) {
		_, err := s.sc.Client().Call(ctx, sdk.InstanceTarget("test.Turn", s.sc.ID()), "Self", str(""))
		derived, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err2 := s.sc.Client().Call(derived, sdk.InstanceTarget("test.Turn", s.sc.ID()), "Self", str(""))
		_, own := ctx.(*peerCtx)
		return fmt.Sprintf("peer's context: %v; refused as a request to itself: %v, %v", own,
			errors.Is(err, sdk.ErrInvalidArgument) && strings.Contains(err.Error(), "to itself"),
			errors.Is(err2, sdk.ErrInvalidArgument) && strings.Contains(err2.Error(), "to itself")), nil
	}
	relay := func(s *spot, ctx context.Context, id string) (string, error) {
		out, err := s.sc.Client().Call(ctx, sdk.InstanceIntent("test.Turn", id), "Self", str(""))
		if err != nil {
			return "", err
		}
		return out.(*wrapperspb.StringValue).GetValue(), nil
	}
	must(ts.RegisterSpot(&sdk.SpotDesc{Name: "test.Turn", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
		method("Self", false, self), method("Relay", false, relay),
	}}, factory(f)))
}

// F8: the turn of a peer's request runs with the request's own context, which names the turn:
// the turn's requests of its own Spot, with that context or one derived from it, are refused
// as requests to itself. A context that is not the request's own, or whose request is not the
// one the turn runs (a request the turn makes of another Spot with it), gets a context of its
// own around it, which names that turn alone.
func TestF8_APeersRequestTurnIsNamedByTheRequestsOwnContext(t *testing.T) {
	n := newNode(t, nodeOpts{register: turnType})
	for _, id := range []string{"p", "q"} {
		_, err := n.cat.Call(ctx, sdk.InstanceIntent("test.Turn", id), "Self", str(""))
		require.NoError(t, err)
	}
	admit := func(c context.Context, method, in string, done catalog.Answer) {
		t.Helper()
		require.NoError(t, n.cat.Admit(c, sdk.InstanceTarget("test.Turn", "p"), method, str(in), len(in), false, done))
	}
	await := func(c *peerCtx) string {
		t.Helper()
		select {
		case out := <-c.outcome:
			return out
		case <-time.After(10 * time.Second):
			t.Fatal("the request was not answered: a request of a Spot to itself waited for its own turn")
			return ""
		}
	}

	own := newPeerCtx(ctx)
	admit(own, "Self", "", own)
	assert.Equal(t, "peer's context: true; refused as a request to itself: true, true", await(own))

	// The same kind of context, answered by another: its own turn gets a context of its own.
	other, answer := newPeerCtx(ctx), newPeerCtx(ctx)
	admit(other, "Self", "", answer)
	assert.Equal(t, "peer's context: false; refused as a request to itself: true, true", await(answer))

	// p's turn holds its request's context; q's turn, asked with it, is named apart: q's
	// requests of itself are refused, and q's turn is not taken for p's.
	relayed := newPeerCtx(ctx)
	admit(relayed, "Relay", "q", relayed)
	assert.Equal(t, "peer's context: false; refused as a request to itself: true, true", await(relayed))
}

// C1: the context of a turn in progress ends when the Spot's owner lease ends, a one-way
// message's too, so that a handler that watches it stops. The one-way handler's context
// carries its sender's values.
func TestC1_RunningHandlersContextEndsWithTheLease(t *testing.T) {
	n := newNode(t, nodeOpts{lease: shortLease()})
	_, err := n.call("ctx", "Join", "x")
	require.NoError(t, err)
	require.NoError(t, n.cat.Send(context.WithValue(ctx, senderKey{}, "sender's"), room("ctx"), "AwaitEnd", str("")))
	assert.Equal(t, "awaitend:ctx", <-n.f.blocked)
	assert.True(t, n.f.said1("ctx:value:sender's"), "the handler's context carries the sender's values")
	endLease(t, n)
	require.Eventually(t, func() bool { return n.f.said1("ctx:ctx-ended") }, 10*time.Second, time.Millisecond,
		"the running handler saw its context end")
	require.Eventually(t, func() bool { return len(n.f.closeReasons("ctx")) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []sdk.CloseReason{sdk.CloseOwnerLost}, n.f.closeReasons("ctx"))
}

// G5: at most MaxConcurrentActivations creations run at once; the next waits for a place
// instead of failing, and one that waits longer than OperationTimeout fails as a capacity
// refusal.
func TestG5_CreationsWaitForAnActivationSlot(t *testing.T) {
	n := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.MaxConcurrentActivations = 1
		c.OperationTimeout = 2 * time.Second
	}})
	n.f.set(n.f.building, "first")
	first := make(chan error, 1)
	go func() { _, err := n.call("first", "Join", "x"); first <- err }()
	assert.Equal(t, "factory:first", <-n.f.blocked)
	second := make(chan error, 1)
	go func() { _, err := n.call("second", "Join", "x"); second <- err }()
	select {
	case err := <-second:
		t.Fatalf("the second creation did not wait for the first: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	assert.Zero(t, n.f.factoryRuns("second"), "its factory waits for a place")
	close(n.f.release)
	require.NoError(t, <-first)
	require.NoError(t, <-second, "the second ran once a place was free")

	// A creation that cannot get a place within OperationTimeout fails with a capacity error.
	n2 := newNode(t, nodeOpts{cfg: func(c *catalog.Config) {
		c.MaxConcurrentActivations = 1
		c.OperationTimeout = 300 * time.Millisecond
	}})
	n2.f.release = make(chan struct{})
	n2.f.set(n2.f.building, "hog")
	hog := make(chan error, 1)
	go func() { _, err := n2.call("hog", "Join", "x"); hog <- err }()
	<-n2.f.blocked
	require.Error(t, <-hog, "the hog's creation timed out")
	// Its factory still runs, so it still holds the only place.
	_, err := n2.call("starved", "Join", "x")
	var ce *sdk.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, sdk.CapacityScheduler, ce.Where)
	close(n2.f.release)
}

// A request counts among its Spot's callers from its delivery until it returns, whether it ran
// inline, waited for the turn or its caller gave up; while another is there, a request that
// runs inline on the Spot has company and yields its processor now and then, unless it comes
// from a turn.
func TestRequestsInASpotsDeliveryAreCompanyUntilTheyReturn(t *testing.T) {
	n := newNode(t, nodeOpts{})
	busy := room("busy")
	for _, id := range []string{"busy", "prober"} {
		_, err := n.call(id, "Join", "x")
		require.NoError(t, err)
	}
	assert.Zero(t, n.cat.Callers(busy))
	assert.False(t, n.cat.Company(ctx, busy), "nobody calls")

	call := func(ctx context.Context, m string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := n.cat.Call(ctx, busy, m, str(""))
			done <- err
		}()
		return done
	}
	running := call(ctx, "Block")
	assert.Equal(t, "busy", <-n.f.blocked)
	assert.Equal(t, int32(1), n.cat.Callers(busy), "the request that runs inline")
	assert.True(t, n.cat.Company(ctx, busy), "a caller runs")
	giveUp, cancel := context.WithCancel(ctx)
	defer cancel()
	abandoned := call(giveUp, "Join")
	waiting := call(ctx, "Join")
	require.Eventually(t, func() bool { return n.cat.Callers(busy) == 3 }, 10*time.Second, time.Millisecond)

	// From a turn, never: a request's, whether its caller's context is bare or not, and a
	// one-way message's.
	n.f.probe = func(ctx context.Context) string { return fmt.Sprint(n.cat.Company(ctx, busy)) }
	got, err := n.call("prober", "Probe", "")
	require.NoError(t, err)
	assert.Equal(t, "false", got, "a request's turn has company")
	bounded, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	reply, err := n.cat.Call(bounded, room("prober"), "Probe", str(""))
	require.NoError(t, err)
	assert.Equal(t, "false", reply.(*wrapperspb.StringValue).GetValue(), "the turn of a request with a deadline has company")
	require.NoError(t, n.cat.Send(ctx, room("prober"), "ProbeSend", str("")))
	require.Eventually(t, func() bool { return n.f.said1("prober:probe:false") || n.f.said1("prober:probe:true") }, 10*time.Second, time.Millisecond)
	assert.True(t, n.f.said1("prober:probe:false"), "a one-way turn has company")

	cancel()
	require.ErrorIs(t, <-abandoned, context.Canceled)
	require.Eventually(t, func() bool { return n.cat.Callers(busy) == 2 }, 10*time.Second, time.Millisecond,
		"a caller that gave up is gone")
	close(n.f.release)
	require.NoError(t, <-running)
	require.NoError(t, <-waiting)
	assert.Zero(t, n.cat.Callers(busy))
	assert.False(t, n.cat.Company(ctx, busy))
}

// A one-way handler that sends with its own context passes its sender's values on, not its
// context: a chain of such sends does not nest one Spot context in the next, each keeping its
// sender's record alive. The values still arrive.
func TestAOneWaySentFromAOneWayTurnCarriesTheValuesNotTheTurn(t *testing.T) {
	n := newNode(t, nodeOpts{})
	n.f.probe = func(ctx context.Context) string {
		v, _ := ctx.Value(senderKey{}).(string)
		return fmt.Sprintf("nested=%v,value=%s", catalog.NestsASpotContext(ctx), v)
	}
	for _, id := range []string{"relay", "end"} {
		_, err := n.call(id, "Join", "x")
		require.NoError(t, err)
	}
	require.NoError(t, n.cat.Send(context.WithValue(ctx, senderKey{}, "first"), room("relay"), "Relay", str("end")))
	require.Eventually(t, func() bool {
		n.f.mu.Lock()
		defer n.f.mu.Unlock()
		return slices.ContainsFunc(n.f.said, func(s string) bool { return strings.HasPrefix(s, "end:probe:") })
	}, 10*time.Second, time.Millisecond)
	assert.True(t, n.f.said1("end:probe:nested=false,value=first"), "%v", n.f.said)
}

// One-way turns of one run share a turn context while their senders' context is the same: a
// turn still sees its own sender's values when senders alternate, and a handler that keeps its
// turn's context keeps the values it ran with, whatever runs after it.
func TestOneWayTurnsSeeTheirOwnSendersValuesWhenSendersAlternate(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var kept []context.Context
	a, b := context.WithValue(ctx, senderKey{}, "a"), context.WithValue(ctx, senderKey{}, "b")
	order := []context.Context{a, a, b, a, b, b, a}
	said := sendInOneRun(t, n, "mixed", order, func(ctx context.Context) {
		kept = append(kept, ctx) // turns of one Spot run one at a time
	})
	var want []string
	for _, sender := range order {
		want = append(want, "mixed:probe:"+sender.Value(senderKey{}).(string))
	}
	assert.Equal(t, want, said)
	require.Len(t, kept, len(order))
	assert.Same(t, kept[0], kept[1], "the second message of the same sender shares the first's turn context")
	assert.NotSame(t, kept[1], kept[2], "another sender's message gets a turn context of its own")
	for i, sender := range order {
		assert.Equal(t, sender.Value(senderKey{}), kept[i].Value(senderKey{}), "turn %d's kept context", i)
		assert.NoError(t, kept[i].Err(), "turn %d's kept context ends with the Spot, not with its turn", i)
	}
}

// sendInOneRun sends the Spot id one ProbeSend from each of senders, queued behind a blocked
// turn so that all of them run in one run of the Spot, and returns what the turns said once
// all have run: each its sender's value. turn, if not nil, sees each turn's context.
func sendInOneRun(t *testing.T, n *node, id string, senders []context.Context, turn func(context.Context)) []string {
	t.Helper()
	n.f.probe = func(ctx context.Context) string {
		if turn != nil {
			turn(ctx)
		}
		v, _ := ctx.Value(senderKey{}).(string)
		return v
	}
	_, err := n.call(id, "Join", "x")
	require.NoError(t, err)
	// A blocked turn holds the run, so that the sends below queue behind it and run in one run.
	require.NoError(t, n.cat.Send(ctx, room(id), "BlockSend", str("")))
	require.Equal(t, id, <-n.f.blocked)
	for _, sender := range senders {
		require.NoError(t, n.cat.Send(sender, room(id), "ProbeSend", str("")))
	}
	close(n.f.release)
	require.Eventually(t, func() bool {
		n.f.mu.Lock()
		defer n.f.mu.Unlock()
		return len(n.f.said) >= len(senders)
	}, 10*time.Second, time.Millisecond)
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	return slices.Clone(n.f.said)
}

// bulky stands for what a sender's context may hold: a request's values.
type bulky struct{ _ [1 << 16]byte }

// A Spot whose run has ended keeps none of its senders' contexts: the last sender's values are
// collected once nothing else holds them.
func TestAnIdleSpotKeepsNoSendersContext(t *testing.T) {
	n := newNode(t, nodeOpts{})
	n.f.probe = func(context.Context) string { return "ran" }
	_, err := n.call("idle", "Join", "x")
	require.NoError(t, err)
	held := sendWithBulkyValue(t, n, "idle")
	require.Eventually(t, func() bool { return n.f.said1("idle:probe:ran") }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		runtime.GC()
		return held.Value() == nil
	}, 10*time.Second, 10*time.Millisecond, "the Spot still holds its last sender's context")
}

// sendWithBulkyValue sends a one-way message to the Spot id with a context that holds a value
// of its own, and returns a weak pointer to that value.
func sendWithBulkyValue(t *testing.T, n *node, id string) weak.Pointer[bulky] {
	v := new(bulky)
	require.NoError(t, n.cat.Send(context.WithValue(ctx, senderKey{}, v), room(id), "ProbeSend", str("")))
	return weak.Make(v)
}

// taggedCtx is a sender's context of a value type that == cannot compare: it holds a slice.
type taggedCtx struct {
	context.Context
	tags []string
}

// A sender's context of a value type that cannot be compared runs its one-way messages as any
// other: two of them in one run do not make the second's turn fail.
func TestOneWayTurnsRunForSendersContextsThatCannotBeCompared(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var senders []context.Context
	for _, v := range []string{"one", "two", "two"} {
		senders = append(senders, taggedCtx{context.WithValue(ctx, senderKey{}, v), []string{v}})
	}
	said := sendInOneRun(t, n, "tagged", senders, nil)
	assert.Equal(t, []string{"tagged:probe:one", "tagged:probe:two", "tagged:probe:two"}, said)
}
