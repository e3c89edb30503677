package rt_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// relocationCluster starts n nodes that serve Ledgers and the Actor fixture's types; versions
// gives each node's application version (default 1).
func relocationCluster(t *testing.T, n int, fx *actorFixture, versions ...int64) *cluster {
	return newCluster(t, n, func(i int, cfg *rt.Config) {
		ledgers := cfg.Register
		cfg.Register = func(r sdk.Registrar) error { return errors.Join(ledgers(r), fx.register(true)(r)) }
		cfg.ApplicationVersion = 1
		if i < len(versions) {
			cfg.ApplicationVersion = versions[i]
		}
		cfg.RelocationResendWindow = 200 * time.Millisecond
		if os.Getenv("RELOCATION_DEBUG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("host", cfg.NodeID)
		}
	})
}

func count(t *testing.T, c sdk.Client, id string) int64 {
	t.Helper()
	out, err := c.Call(ctx, ledger(id), rttest.LedgerCount, wrapperspb.Int64(0))
	require.NoError(t, err)
	return out.(*wrapperspb.Int64Value).GetValue()
}

func version(v int64) *int64 { return &v }

// F4: a mode with a target version it does not take is an argument error, and nothing starts.
func TestF4_RelocationArgumentErrorsChangeNothing(t *testing.T) {
	c := relocationCluster(t, 1, &actorFixture{})
	h := c.hosts[0]
	for _, opts := range []sdk.RelocationOptions{
		{Mode: sdk.RelocationModePlannedMaintenance, TargetApplicationVersion: version(1)},
		{Mode: sdk.RelocationModeRollingUpdate},
		{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(1)},
		{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(0)},
		{Mode: sdk.RelocationMode(7)},
	} {
		_, err := h.Relocate(ctx, opts)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, "%+v", opts)
		assert.Equal(t, sdk.RuntimeStateServing, h.Status().State)
	}
	assert.Nil(t, h.Status().RelocationResult)
	assert.True(t, h.Status().SafeToShutdown, "no relocation started")
}

// F2, F7, F12, A2: a planned maintenance moves every User and Instance Spot with its state to
// the other nodes while callers keep calling: every call that succeeded ran exactly once, and
// every counter equals its successful calls; the source ends Relocated, its Spots' OnClose saw
// CloseRelocated, and it reports SafeToShutdown once the re-send window has passed.
func TestF2_PlannedMaintenanceMovesEverySpotWithItsState(t *testing.T) {
	fx := &actorFixture{}
	c := relocationCluster(t, 3, fx)
	a := c.hosts[0]
	const spots = 40
	for i := range spots {
		_, err := record(a, openLedger(fmt.Sprint("s", i)), fmt.Sprint("s", i, "-0"), sdk.OnNode(a.LocalNode()))
		require.NoError(t, err)
	}
	var ok [spots]atomic.Int64
	for i := range spots {
		ok[i].Store(1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range 4 {
		caller := c.hosts[1+w%2]
		wg.Go(func() {
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (n*7 + w) % spots
				msg := fmt.Sprintf("s%d-w%d-%d", i, w, n)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := caller.Call(cctx, ledger(fmt.Sprint("s", i)), rttest.LedgerRecord, wrapperspb.String(msg))
				cancel()
				if err == nil {
					ok[i].Add(1)
				} else {
					failures.Add(1)
					t.Logf("call %s: %v", msg, err)
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: time.Minute})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.Equal(t, sdk.RelocationResult{Mode: sdk.RelocationModePlannedMaintenance, TargetApplicationVersion: 1}, res)
	st := a.Status()
	assert.Equal(t, sdk.RuntimeStateRelocated, st.State)
	assert.False(t, st.AcceptingWork)
	require.NotNil(t, st.RelocationResult)
	assert.Equal(t, res, *st.RelocationResult)
	assert.Zero(t, failures.Load(), "every call ended with its reply")
	assert.Empty(t, c.runs.Twice(), "no message ran twice")
	assert.Equal(t, 1, a.MeshStatus().Placement.ActiveSpotCount, "nothing but its Entry Spot is left on the source")
	for i := range spots {
		id := fmt.Sprint("s", i)
		assert.Equal(t, ok[i].Load(), count(t, c.hosts[1], id), "%s: its counter moved with it and counts every successful call", id)
	}
	assert.Equal(t, spots, c.runs.Count("closed:Relocated"), "each source activation saw CloseRelocated")
	require.Eventually(t, func() bool { return a.Status().SafeToShutdown }, 5*time.Second, 10*time.Millisecond)
	again, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	assert.Equal(t, res, again, "the same operation again shares its terminal result (F10)")
	tr, err := a.Shutdown(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, tr.Outcome)
}

// F5 (1), F6: a rolling update moves objects only to nodes of exactly the requested version;
// without one, it waits until its deadline and ends Blocked with TargetUnavailable, and the
// source serves its objects again.
func TestF5_RollingUpdateMovesOnlyToTheExactVersion(t *testing.T) {
	c := relocationCluster(t, 3, &actorFixture{}, 1, 2, 3)
	a, b := c.hosts[0], c.hosts[1]
	for i := range 10 {
		_, err := record(a, openLedger(fmt.Sprint("v", i)), "first", sdk.OnNode(a.LocalNode()))
		require.NoError(t, err)
	}
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(4), Deadline: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome)
	assert.Equal(t, sdk.RelocationReasonTargetUnavailable, res.Reason)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "Blocked with objects left: Serving again (F7)")
	assert.Equal(t, int64(1), count(t, a, "v0"), "still served where it was")

	res, err = a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(2)})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	// Each node counts its Entry Spot too.
	assert.Equal(t, 11, b.MeshStatus().Placement.ActiveSpotCount, "everything landed on the version-2 node")
	assert.Equal(t, 1, c.hosts[2].MeshStatus().Placement.ActiveSpotCount, "nothing on version 3")
	assert.Equal(t, int64(1), count(t, c.hosts[2], "v3"))
}

// K1, A4: an Entry Spot is not relocated; its Actors are, to the Entry Spot of the same type on
// the target, with their state; a User or Instance Spot's Actors move with it.
func TestK1_EntrySpotIsNotRelocatedItsActorsAre(t *testing.T) {
	fx := &actorFixture{}
	c := relocationCluster(t, 2, fx)
	a, b := c.hosts[0], c.hosts[1]
	lobbyA := sdk.EntryTarget(lobbyType, a.LocalNode())
	require.Equal(t, "ok", do(t, a, lobbyA, "spawn e1"))
	room := sdk.InstanceIntent(roomType, "with-actor")
	require.Equal(t, "ok", do(t, a, room, "spawn m1", sdk.OnNode(a.LocalNode())))
	for i := 1; i <= 5; i++ {
		require.NoError(t, a.Send(ctx, tallyOf("e1"), "Add", wrapperspb.String(fmt.Sprint("x:", i))))
		require.NoError(t, a.Send(ctx, tallyOf("m1"), "Add", wrapperspb.String(fmt.Sprint("x:", i))))
	}
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	for _, id := range []string{"e1", "m1"} {
		st, err := getTally(b, id)
		require.NoError(t, err)
		assert.Equal(t, string(b.LocalNode()), st.Node, id)
		assert.EqualValues(t, 5, st.Total, "%s kept its state", id)
		assert.Zero(t, st.Disorder, id)
	}
	st, _ := getTally(b, "e1")
	assert.Equal(t, sdk.EntryTarget(lobbyType, b.LocalNode()).String(), st.Host, "into the target's Entry Spot of the same type")
	assert.Contains(t, do(t, b, lobbyA, "spawn e2"), "relocating",
		"the source's Entry Spot stays where it is, and its Relocated node takes no new Actor")
}

// F10: while a relocation runs, a call with another mode or version gets Blocked with
// OperationInProgress and changes nothing.
func TestF10_AnotherRelocationWhileOneRunsIsOperationInProgress(t *testing.T) {
	c := relocationCluster(t, 2, &actorFixture{}, 1, 3)
	a := c.hosts[0]
	first := relocateWaiting(t, a, "busy", time.Second)
	require.NotNil(t, a.Status().Deadline, "a relocation in progress carries its deadline")
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationReasonOperationInProgress, res.Reason)
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome)
	joined, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(2), Deadline: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationReasonTargetUnavailable, joined.Reason, "the same operation is joined, its deadline unchanged")
	assert.Equal(t, joined, <-first)
}

// F9: a shutdown during a relocation lets it start no further unit; the relocation's waiter
// gets Blocked with ShutdownRequested, and the shutdown ends Stopped.
func TestF9_ShutdownDuringRelocationBlocksIt(t *testing.T) {
	c := relocationCluster(t, 2, &actorFixture{}, 1, 3)
	a := c.hosts[0]
	first := relocateWaiting(t, a, "stay", time.Minute)
	tr, err := a.Shutdown(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, tr.Outcome)
	res := <-first
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome)
	assert.Equal(t, sdk.RelocationReasonShutdownRequested, res.Reason)
}

// F9: a shutdown during a relocation lets the unit under way finish: the object moves with its
// state before the node's Spots close, and the relocation still ends ShutdownRequested.
func TestF9_ShutdownLetsTheUnitUnderWayFinish(t *testing.T) {
	marshalling := make(chan struct{}, 1)
	c := statefulCluster(t, []*statefulCtl{{marshalDelay: 500 * time.Millisecond, marshalling: marshalling}, {}}, nil, nil)
	a, caller := c.hosts[0], c.hosts[2]
	intent := sdk.InstanceIntent(statefulType, "under-way").WithDesc(statefulDesc(false))
	require.EqualValues(t, 1, addOne(t, caller, intent, sdk.OnNode(a.LocalNode())))
	done := maintain(a, 0) // the default deadline
	select {
	case <-marshalling:
	case <-time.After(10 * time.Second):
		t.Fatal("the unit never began")
	}
	tr, err := a.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, tr.Outcome)
	res := <-done
	assert.Equal(t, sdk.RelocationReasonShutdownRequested, res.Reason)
	assert.EqualValues(t, 2, addOne(t, caller, intent), "the object moved with its state")
}

// F7, G1: a node that fails while it relocates stays in Error when the relocation ends: it
// neither reports itself Ready nor takes application work again.
func TestF7_ANodeThatFailsWhileItRelocatesStaysInError(t *testing.T) {
	c := relocationCluster(t, 2, &actorFixture{}, 1, 3)
	a := c.hosts[0]
	done := relocateWaiting(t, a, "busy", time.Second)
	a.Fail(errors.New("its listener broke"))
	require.Equal(t, sdk.RuntimeStateError, a.Status().State)
	res := <-done
	require.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome, "no target of version 2")
	st := a.Status()
	assert.Equal(t, sdk.RuntimeStateError, st.State)
	assert.False(t, st.IsReady)
	_, err := record(a, openLedger("busy"), "again")
	assert.ErrorIs(t, err, sdk.ErrNotServing, "a failed node takes no application work")
}

// A type registered with RelocationPin and no state to carry blocks the relocation with
// StateIncompatible while one is active, and nothing moves.
func TestF3_PinnedTypeBlocksWithStateIncompatible(t *testing.T) {
	fx := &actorFixture{}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		ledgers := cfg.Register
		cfg.Register = func(r sdk.Registrar) error {
			return errors.Join(ledgers(r), fx.register(true, sdk.WithRelocation(sdk.RelocationPin))(r))
		}
	})
	a := c.hosts[0]
	require.Equal(t, "ok", do(t, a, sdk.InstanceIntent(roomType, "pinned"), "spawn p1", sdk.OnNode(a.LocalNode())))
	_, err := record(a, openLedger("movable"), "m", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationReasonStateIncompatible, res.Reason)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State)
	assert.Equal(t, 3, a.MeshStatus().Placement.ActiveSpotCount, "nothing moved (its Entry Spot and two more)")
}

// selfCaller is an Instance Spot whose MarshalState calls its own Spot, and whose arrival arms a
// one-shot timer in OnActivate.
type selfCaller struct {
	sc  sdk.SpotContext
	log func(string)
}

var selfCallerDesc = &sdk.SpotDesc{Name: "test.SelfCaller", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Ping",
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
	Invoke: func(_ any, _ context.Context, req proto.Message) (proto.Message, error) {
		return req, nil
	},
}}}

func (s *selfCaller) MarshalState(ctx context.Context) ([]byte, error) {
	self := sdk.InstanceTarget(selfCallerDesc.Name, s.sc.ID()).WithDesc(selfCallerDesc)
	_, err := s.sc.Client().Call(ctx, self, "Ping", wrapperspb.String("from MarshalState"))
	s.log(fmt.Sprintf("call:%v", errors.Is(err, sdk.ErrInvalidArgument)))
	return []byte("state"), nil
}

func (s *selfCaller) OnActivate(context.Context) error {
	if s.sc.RestoredState() != nil {
		s.sc.AfterFunc(time.Millisecond, func(context.Context) { s.log("timer:" + string(s.sc.Node())) })
	}
	return nil
}

// MarshalState that calls its own Spot is refused at once (it would wait for the very turn it
// runs in) and the unit goes on; a one-shot timer that the arrival's OnActivate arms runs once
// the unit has committed, on the target.
func TestF14_MarshalStateCallingItsOwnSpotAndArrivalTimers(t *testing.T) {
	var mu sync.Mutex
	var events []string
	logf := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	c := newCluster(t, 2, func(_ int, cfg *rt.Config) {
		ledgers := cfg.Register
		cfg.Register = func(r sdk.Registrar) error {
			return errors.Join(ledgers(r), r.RegisterSpot(selfCallerDesc, func(sc sdk.SpotContext) (any, error) {
				return &selfCaller{sc: sc, log: logf}, nil
			}))
		}
	})
	a, b := c.hosts[0], c.hosts[1]
	_, err := a.Call(ctx, sdk.InstanceIntent(selfCallerDesc.Name, "me").WithDesc(selfCallerDesc), "Ping", wrapperspb.String("x"), sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := a.Relocate(rctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, "timer:"+string(b.LocalNode()))
	}, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "call:true", events[0], "the self-request was refused as such")
}

// stateful is an Instance Spot that counts its Adds and carries the count across a
// relocation; ctl makes its MarshalState slow or failing, or its arrival fail.
type stateful struct {
	sc  sdk.SpotContext
	ctl *statefulCtl
	n   int64
}

type statefulCtl struct {
	marshalDelay time.Duration
	marshalErr   error
	failArrival  bool
	// marshalling, when set, gets a value as each MarshalState begins.
	marshalling chan struct{}
}

const statefulType = "test.Stateful"

// statefulDesc describes the type; with intAdd its Add takes an Int64Value, which a node with the
// StringValue shape does not serve alike.
func statefulDesc(intAdd bool) *sdk.SpotDesc {
	newReq := func() proto.Message { return new(wrapperspb.StringValue) }
	if intAdd {
		newReq = func() proto.Message { return new(wrapperspb.Int64Value) }
	}
	return &sdk.SpotDesc{Name: statefulType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "Add",
		NewRequest: newReq,
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			s := impl.(*stateful)
			s.n++
			return wrapperspb.Int64(s.n), nil
		},
	}}}
}

func (s *stateful) MarshalState(context.Context) ([]byte, error) {
	if s.ctl.marshalling != nil {
		select {
		case s.ctl.marshalling <- struct{}{}:
		default:
		}
	}
	time.Sleep(s.ctl.marshalDelay)
	if s.ctl.marshalErr != nil {
		return nil, s.ctl.marshalErr
	}
	return []byte(strconv.FormatInt(s.n, 10)), nil
}

func registerStateful(ctl *statefulCtl, intAdd bool) func(sdk.Registrar) error {
	return func(r sdk.Registrar) error {
		return r.RegisterSpot(statefulDesc(intAdd), func(sc sdk.SpotContext) (any, error) {
			s := &stateful{sc: sc, ctl: ctl}
			if st := sc.RestoredState(); st != nil {
				if ctl.failArrival {
					return nil, errors.New("this node cannot take it")
				}
				n, err := strconv.ParseInt(string(st), 10, 64)
				if err != nil {
					return nil, err
				}
				s.n = n
			}
			return s, nil
		})
	}
}

func statefulOf(id string) sdk.Target {
	return sdk.InstanceTarget(statefulType, id).WithDesc(statefulDesc(false))
}

func addOne(t *testing.T, c sdk.Client, tg sdk.Target, opts ...sdk.CallOption) int64 {
	t.Helper()
	out, err := c.Call(ctx, tg, "Add", wrapperspb.String("x"), opts...)
	require.NoError(t, err)
	return out.(*wrapperspb.Int64Value).GetValue()
}

// statefulCluster starts n nodes with Ledgers and the Stateful type; node i uses ctls[i] and,
// when intAdd[i], the other shape of Add. The last node calls only (it hosts nothing).
func statefulCluster(t *testing.T, ctls []*statefulCtl, intAdd []bool, mutate func(i int, cfg *rt.Config)) *cluster {
	return newCluster(t, len(ctls)+1, func(i int, cfg *rt.Config) {
		cfg.RelocationResendWindow = 200 * time.Millisecond
		if i == len(ctls) {
			cfg.Roles = rt.RoleObjectClient
			return
		}
		ledgers := cfg.Register
		cfg.Register = func(r sdk.Registrar) error {
			return errors.Join(ledgers(r), registerStateful(ctls[i], i < len(intAdd) && intAdd[i])(r))
		}
		if mutate != nil {
			mutate(i, cfg)
		}
	})
}

// E5: the relocation hold has no count or byte limit of its own: while a unit takes a slow
// state, far more requests than the Spot's lane holds wait for it, and every one runs once,
// after it, on the target.
func TestE5_TheHoldHasNoLimitOfItsOwn(t *testing.T) {
	marshalling := make(chan struct{}, 1)
	ctls := []*statefulCtl{{marshalDelay: 500 * time.Millisecond, marshalling: marshalling}, {}}
	c := statefulCluster(t, ctls, nil, func(_ int, cfg *rt.Config) { cfg.Exec.Application.Count = 4 })
	a, caller := c.hosts[0], c.hosts[2]
	tg := statefulOf("held")
	require.EqualValues(t, 1, addOne(t, caller, sdk.InstanceIntent(statefulType, "held").WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode())))
	done := maintain(a, 0) // the default deadline
	<-marshalling          // the unit is taking the state: admission is closed
	const held = 64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range held {
		wg.Go(func() {
			if _, err := caller.Call(ctx, tg, "Add", wrapperspb.String("x")); err != nil {
				failed.Add(1)
				t.Log(err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, sdk.RelocationOutcomeRelocated, (<-done).Outcome)
	assert.Zero(t, failed.Load(), "no request was refused for want of room")
	assert.EqualValues(t, held+2, addOne(t, caller, tg), "each ran once, and the count arrived")
}

// F7 and the reasons a unit's own failure gives: a MarshalState that fails, or a target whose
// factory refuses the state, end the relocation Blocked with RelocationFailed, and the object
// serves where it was with its state; a target that does not serve the type alike is not a
// candidate, and without another the answer is StateIncompatible.
func TestF7_AFailedUnitRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		source statefulCtl
		target statefulCtl
		intAdd bool
		reason sdk.RelocationReason
	}{
		{name: "MarshalState fails", source: statefulCtl{marshalErr: errors.New("no state today")}, reason: sdk.RelocationReasonRelocationFailed},
		{name: "the target's factory fails", target: statefulCtl{failArrival: true}, reason: sdk.RelocationReasonRelocationFailed},
		{name: "the target serves another shape", intAdd: true, reason: sdk.RelocationReasonStateIncompatible},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statefulCluster(t, []*statefulCtl{&tc.source, &tc.target}, []bool{false, tc.intAdd}, nil)
			a, caller := c.hosts[0], c.hosts[2]
			tg := statefulOf("stays")
			addOne(t, caller, sdk.InstanceIntent(statefulType, "stays").WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode()))
			res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 5 * time.Second})
			require.NoError(t, err)
			assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome)
			assert.Equal(t, tc.reason, res.Reason)
			assert.Equal(t, sdk.RuntimeStateServing, a.Status().State)
			assert.EqualValues(t, 2, addOne(t, caller, tg), "it serves where it was, its state intact")
			assert.Equal(t, 1, a.MeshStatus().Placement.ActiveSpotCount)
			assert.Equal(t, 0, c.hosts[1].MeshStatus().Placement.ActiveSpotCount, "nothing arrived")
		})
	}
}

// F3 RelocationDisabled: a node that hosts nothing has nothing to relocate.
func TestF3_AClientOnlyNodeHasRelocationDisabled(t *testing.T) {
	c := statefulCluster(t, []*statefulCtl{{}}, nil, nil)
	res, err := c.hosts[1].Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationReasonRelocationDisabled, res.Reason)
	assert.Equal(t, sdk.RuntimeStateServing, c.hosts[1].Status().State)
}

// F12, F11: the observed statuses of a relocation: Relocating with its deadline and not safe,
// Relocated with the result, and SafeToShutdown only once the re-send window after the last
// commit has passed.
func TestF12_SafeToShutdownOnlyAfterTheResendWindow(t *testing.T) {
	c := statefulCluster(t, []*statefulCtl{{}, {}}, nil, func(_ int, cfg *rt.Config) {
		cfg.RelocationResendWindow = 500 * time.Millisecond
	})
	a, caller := c.hosts[0], c.hosts[2]
	addOne(t, caller, sdk.InstanceIntent(statefulType, "w").WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode()))
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	var seen []sdk.RuntimeStatus
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for o := range a.ObserveRuntime(octx) {
			seen = append(seen, o.Status)
			if o.Status.SafeToShutdown && o.Status.State == sdk.RuntimeStateRelocated {
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateServing }, time.Second, time.Millisecond)
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	ended := time.Now()
	assert.False(t, a.Status().SafeToShutdown, "the re-send window has not passed")
	select {
	case <-observed:
	case <-time.After(10 * time.Second):
		t.Fatal("SafeToShutdown was never observed")
	}
	assert.GreaterOrEqual(t, time.Since(ended), 400*time.Millisecond, "not before the window")
	var states []sdk.RuntimeState
	for _, s := range seen {
		if len(states) == 0 || states[len(states)-1] != s.State {
			states = append(states, s.State)
		}
		if s.State == sdk.RuntimeStateRelocating {
			assert.NotNil(t, s.Deadline, "Relocating carries its deadline")
			assert.False(t, s.SafeToShutdown)
		}
	}
	require.GreaterOrEqual(t, len(states), 2)
	assert.Equal(t, []sdk.RuntimeState{sdk.RuntimeStateRelocating, sdk.RuntimeStateRelocated}, states[len(states)-2:])
	last := seen[len(seen)-1]
	require.NotNil(t, last.RelocationResult)
	assert.Equal(t, res, *last.RelocationResult)
}

// F3 RuntimeNotReady: a node that is not Serving (here: in Error) does not relocate.
func TestF3_ANodeInErrorIsRuntimeNotReady(t *testing.T) {
	c := statefulCluster(t, []*statefulCtl{{}}, nil, nil)
	a := c.hosts[0]
	a.Fail(errors.New("its listener broke"))
	require.Equal(t, sdk.RuntimeStateError, a.Status().State)
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationReasonRuntimeNotReady, res.Reason)
	assert.Equal(t, sdk.RuntimeStateError, a.Status().State, "nothing changed")
}

// F5 steps (3), (4) and (6): a node of the source's maintenance wave and a node that does not
// register the type are never targets; among the rest, shares follow the weights.
func TestF5_EachNarrowingStep(t *testing.T) {
	ctls := []*statefulCtl{{}, {}, {}, {}, {}}
	c := statefulCluster(t, ctls, nil, func(i int, cfg *rt.Config) {
		switch i {
		case 0, 1:
			cfg.MaintenanceWave = "rack-1"
		case 2:
			cfg.Register = func(r sdk.Registrar) error { return rttest.RegisterLedger(r, func(string, string) {}, nil) }
		case 3:
			cfg.MaintenanceWave, cfg.Weight = "rack-2", 1
		case 4:
			cfg.MaintenanceWave, cfg.Weight = "rack-2", 3
		}
	})
	a, caller := c.hosts[0], c.hosts[len(ctls)]
	const spots = 60
	for i := range spots {
		addOne(t, caller, sdk.InstanceIntent(statefulType, fmt.Sprint("n", i)).WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode()))
	}
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
	require.NoError(t, err)
	require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	on := func(i int) int { return c.hosts[i].MeshStatus().Placement.ActiveSpotCount }
	assert.Zero(t, on(1), "the source's maintenance wave")
	assert.Zero(t, on(2), "does not register the type")
	assert.Equal(t, spots, on(3)+on(4))
	assert.Greater(t, on(4), on(3), "weight 3 takes more than weight 1")
}

// F10: a relocation that ended Relocated gives its result to a later call of the same
// operation, also once the node failed after it.
func TestF10_ARelocatedResultIsSharedAfterTheNodeFailed(t *testing.T) {
	marshalling := make(chan struct{}, 1)
	c := statefulCluster(t, []*statefulCtl{{marshalDelay: 500 * time.Millisecond, marshalling: marshalling}, {}}, nil, nil)
	a, caller := c.hosts[0], c.hosts[2]
	require.EqualValues(t, 1, addOne(t, caller, sdk.InstanceIntent(statefulType, "f10").WithDesc(statefulDesc(false)), sdk.OnNode(a.LocalNode())))
	opts := sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance}
	done := make(chan sdk.RelocationResult, 1)
	go func() {
		res, _ := a.Relocate(ctx, opts)
		done <- res
	}()
	<-marshalling
	a.Fail(errors.New("its listener broke"))
	first := <-done
	require.Equal(t, sdk.RelocationOutcomeRelocated, first.Outcome)
	again, err := a.Relocate(ctx, opts)
	require.NoError(t, err)
	assert.Equal(t, first, again)
}

// H1, H5: a node in Error publishes Error again as its relocation ends and as it turns safe to
// shut down; an observer that reads the newest Error missed no terminal status.
func TestH5_AnErrorReplacedByAnErrorLosesNothing(t *testing.T) {
	c := relocationCluster(t, 2, &actorFixture{}, 1, 3)
	a := c.hosts[0]
	next, stop := iter.Pull(a.ObserveRuntime(ctx))
	defer stop()
	first, ok := next()
	require.True(t, ok)
	require.Equal(t, sdk.RuntimeStateServing, first.Status.State)
	done := relocateWaiting(t, a, "busy", time.Second)
	a.Fail(errors.New("its listener broke"))
	<-done
	require.Eventually(t, func() bool { return a.Status().SafeToShutdown }, 5*time.Second, 5*time.Millisecond)
	o, ok := next()
	require.True(t, ok)
	require.Equal(t, sdk.RuntimeStateError, o.Status.State)
	assert.NotNil(t, o.Status.RelocationResult, "the newest Error, with the relocation's result")
	assert.NotZero(t, o.Loss.CoalescedCount)
	assert.Zero(t, o.Loss.DiscardedTerminalCount, "it reads the Error it would have missed")
}

// relocateWaiting makes the Ledger id active on a, then starts a's rolling update to version 2,
// which no node has: the relocation waits for a target until its deadline (within). It returns
// once a is Relocating; the relocation's result comes on the channel.
func relocateWaiting(t *testing.T, a *rt.Host, id string, within time.Duration) <-chan sdk.RelocationResult {
	t.Helper()
	_, err := record(a, openLedger(id), "m", sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	done := make(chan sdk.RelocationResult, 1)
	go func() {
		res, _ := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(2), Deadline: within})
		done <- res
	}()
	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateRelocating }, 5*time.Second, 5*time.Millisecond)
	return done
}

// F6: a relocation with nothing to move still needs a target of its version: with none it
// waits until its deadline and answers Blocked/TargetUnavailable, Serving again; once one
// serves, it answers Relocated. A rolling update thus never takes an empty node out before a
// node of the new version serves.
func TestF6_ARelocationWithNothingToMoveWaitsForATarget(t *testing.T) {
	c := relocationCluster(t, 2, &actorFixture{}, 1, 2)
	a, b := c.hosts[0], c.hosts[1]
	res, err := a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(3), Deadline: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationResult{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: 3, Outcome: sdk.RelocationOutcomeBlocked, Reason: sdk.RelocationReasonTargetUnavailable}, res)
	assert.Equal(t, sdk.RuntimeStateServing, a.Status().State, "Blocked: Serving again (F7)")
	require.Eventually(t, func() bool { return a.ServingMembers() == 2 }, 10*time.Second, 5*time.Millisecond, "node-a sees itself Serving again")

	// The only node of version 2 is not a target while it relocates itself (it is not
	// Serving), for a second and a half, and is one again once that ends Blocked.
	type ended struct {
		res sdk.RelocationResult
		at  time.Time
	}
	bDone := make(chan ended, 1)
	go func() {
		res, _ := b.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(9), Deadline: 1500 * time.Millisecond})
		bDone <- ended{res, time.Now()}
	}()
	require.Eventually(t, func() bool { return a.ServingMembers() == 1 }, 10*time.Second, 5*time.Millisecond, "node-a sees node-b relocating")
	res, err = a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: version(2), Deadline: 20 * time.Second})
	aEnded := time.Now()
	require.NoError(t, err)
	assert.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	assert.Equal(t, sdk.RuntimeStateRelocated, a.Status().State)
	bEnd := <-bDone
	assert.Equal(t, sdk.RelocationReasonTargetUnavailable, bEnd.res.Reason, "%+v", bEnd.res)
	assert.False(t, aEnded.Before(bEnd.at), "node-a relocated only once node-b could take its work")
}

// F6: two empty nodes that relocate at once, each the other's only target, do not both answer
// Relocated: each confirms its target in etcd after writing its own Relocating state there.
func TestF6_TwoEmptyNodesRelocatingAtOnceDoNotBothLeave(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			c := relocationCluster(t, 2, &actorFixture{}, 1, 1)
			results := make(chan sdk.RelocationResult, 2)
			begin := make(chan struct{})
			for _, h := range c.hosts {
				go func() {
					<-begin
					res, _ := h.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: time.Second})
					results <- res
				}()
			}
			close(begin)
			relocated := 0
			for range 2 {
				res := <-results
				if res.Outcome == sdk.RelocationOutcomeRelocated {
					relocated++
				} else {
					assert.Equal(t, sdk.RelocationReasonTargetUnavailable, res.Reason, "%+v", res)
				}
			}
			assert.LessOrEqual(t, relocated, 1, "both nodes left, each for the other")
		})
	}
}
