package rt_test

import (
	"context"
	"errors"
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
	"github.com/zlink-go/zlink/sdk"
)

// Objects on their way onto a node when its relocation begins (a creation, an arrival) are
// moved too, or keep the relocation from answering Relocated: a node that says Relocated holds
// nothing that its shutdown would lose (F7, F12).

const gatedType = "relocation.Gated"

// gated counts its Adds, and carries the count when it moves.
type gated struct{ n int64 }

func (g *gated) MarshalState(context.Context) ([]byte, error) {
	return []byte(strconv.FormatInt(g.n, 10)), nil
}

var gatedDesc = &sdk.SpotDesc{Name: gatedType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Add",
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
	Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
		g := impl.(*gated)
		g.n++
		return wrapperspb.Int64(g.n), nil
	},
}}}

// serversAndClient is two Object Servers and a client (hosts[2]); the servers register desc
// too, made by build with the index of their host. mutate, when set, changes every config.
func serversAndClient(t *testing.T, desc *sdk.SpotDesc, build func(i int, sc sdk.SpotContext) (any, error), mutate func(*rt.Config)) *cluster {
	return newCluster(t, 3, func(i int, cfg *rt.Config) {
		cfg.RelocationResendWindow = 200 * time.Millisecond
		if mutate != nil {
			mutate(cfg)
		}
		if i == 2 {
			cfg.Roles = rt.RoleObjectClient
			return
		}
		ledgers := cfg.Register
		cfg.Register = func(r sdk.Registrar) error {
			return errors.Join(ledgers(r), r.RegisterSpot(desc, func(sc sdk.SpotContext) (any, error) { return build(i, sc) }))
		}
	})
}

// gatedCluster is serversAndClient with gated Spots; gate runs in each gated factory first.
func gatedCluster(t *testing.T, gate func(i int, sc sdk.SpotContext)) *cluster {
	return serversAndClient(t, gatedDesc, func(i int, sc sdk.SpotContext) (any, error) {
		gate(i, sc)
		g := &gated{}
		if st := sc.RestoredState(); st != nil {
			n, err := strconv.ParseInt(string(st), 10, 64)
			if err != nil {
				return nil, err
			}
			g.n = n
		}
		return g, nil
	}, nil)
}

// maintain starts a PlannedMaintenance relocation of h with deadline within; its result comes
// on the channel.
func maintain(h *rt.Host, within time.Duration) <-chan sdk.RelocationResult {
	done := make(chan sdk.RelocationResult, 1)
	go func() {
		res, _ := h.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: within})
		done <- res
	}()
	return done
}

func addGated(t *testing.T, c sdk.Client, tg sdk.Target, opts ...sdk.CallOption) int64 {
	t.Helper()
	out, err := c.Call(ctx, tg, "Add", wrapperspb.String("x"), opts...)
	require.NoError(t, err)
	return out.(*wrapperspb.Int64Value).GetValue()
}

// F7: a node whose relocation begins while a unit from another node arrives there does not
// answer Relocated while it holds the arrival: with no node to take it, its relocation is
// Blocked and the Spot serves on, its state kept.
func TestF7_ANodeDoesNotAnswerRelocatedWhileAnArrivalIsPending(t *testing.T) {
	arriving, release := make(chan struct{}, 1), make(chan struct{})
	c := gatedCluster(t, func(i int, sc sdk.SpotContext) {
		if i == 1 && sc.RestoredState() != nil {
			arriving <- struct{}{}
			<-release
		}
	})
	a, b, caller := c.hosts[0], c.hosts[1], c.hosts[2]
	intent := sdk.InstanceIntent(gatedType, "x").WithDesc(gatedDesc)
	for range 3 {
		addGated(t, caller, intent, sdk.OnNode(a.LocalNode()))
	}
	done := maintain(a, 20*time.Second)
	<-arriving
	resB := maintain(b, 2*time.Second)
	require.Eventually(t, func() bool { return b.Status().State == sdk.RuntimeStateRelocating }, 5*time.Second, 5*time.Millisecond)
	close(release)
	assert.Equal(t, sdk.RelocationOutcomeRelocated, (<-done).Outcome, "node-a's Spot moved")
	res := <-resB
	assert.Equal(t, sdk.RelocationOutcomeBlocked, res.Outcome, "node-b holds the arrival, and no node can take it")
	assert.Equal(t, sdk.RuntimeStateServing, b.Status().State)
	assert.EqualValues(t, 4, addGated(t, caller, intent.Plain()), "the Spot serves on node-b with its state")
}

// heldCreation is the first call of a gated Spot on node-a of a gated cluster, made from its
// client, whose creation waits at the gate until release is closed; the call's result comes on
// first.
type heldCreation struct {
	c       *cluster
	intent  sdk.Target
	release chan struct{}
	first   chan int64
}

// holdCreation starts the first call of the gated Spot id on node-a and returns once its
// creation waits at the gate.
func holdCreation(t *testing.T, id string) heldCreation {
	creating := make(chan struct{}, 1)
	h := heldCreation{release: make(chan struct{}), first: make(chan int64, 1)}
	h.c = gatedCluster(t, func(i int, sc sdk.SpotContext) {
		if i == 0 && sc.ID() == id && sc.RestoredState() == nil {
			creating <- struct{}{}
			<-h.release
		}
	})
	a, caller := h.c.hosts[0], h.c.hosts[2]
	h.intent = sdk.InstanceIntent(gatedType, id).WithDesc(gatedDesc)
	go func() { h.first <- addGated(t, caller, h.intent, sdk.OnNode(a.LocalNode())) }()
	<-creating
	return h
}

// movedWithState checks that node-a's relocation answered Relocated holding nothing, and that
// the Spot of h, called once before, serves on with its state.
func (h heldCreation) movedWithState(t *testing.T, res sdk.RelocationResult) {
	t.Helper()
	require.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome)
	assert.Zero(t, h.c.hosts[0].MeshStatus().Placement.ActiveSpotCount, "a Relocated node holds nothing")
	assert.EqualValues(t, 2, addGated(t, h.c.hosts[2], h.intent.Plain()), "the Spot moved with its state")
}

// F7: a creation under way when its node's relocation begins is a unit too: the relocation
// waits for it and moves it, with its state, and then answers Relocated holding nothing.
func TestF7_ARelocationMovesTheCreationUnderWayToo(t *testing.T) {
	h := holdCreation(t, "y")
	a := h.c.hosts[0]
	done := maintain(a, 20*time.Second)
	require.Eventually(t, func() bool { return a.Status().State == sdk.RuntimeStateRelocating }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // the relocation looks for its units meanwhile
	close(h.release)
	require.EqualValues(t, 1, <-h.first)
	h.movedWithState(t, <-done)
}

// F7: a creation that ends between a relocation round's two reads, after the round saw it
// under way and before it listed the objects here, is among the objects listed: the
// relocation moves it rather than answer Relocated holding it.
func TestF7_ACreationThatEndsBetweenARoundsTwoReadsIsMoved(t *testing.T) {
	h := holdCreation(t, "z")
	a := h.c.hosts[0]
	var once sync.Once
	a.BetweenRelocationReads(func() {
		once.Do(func() {
			// The round has read the creation as under way: it ends, its first call runs.
			close(h.release)
			select {
			case n := <-h.first:
				assert.EqualValues(t, 1, n)
			case <-time.After(10 * time.Second):
				t.Error("the first call did not complete") // the round goes on, and the test fails
			}
		})
	})
	h.movedWithState(t, <-maintain(a, 20*time.Second))
}

const closerType = "relocation.Closer"

var closerDesc = &sdk.SpotDesc{Name: closerType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Do",
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
	Invoke:     func(_ any, _ context.Context, req proto.Message) (proto.Message, error) { return req, nil },
}}}

// closer notes its closing callback's reason in closed, by its ID.
type closer struct {
	id     string
	closed *sync.Map
}

func (s *closer) MarshalState(context.Context) ([]byte, error) { return []byte("s"), nil }
func (s *closer) OnClose(_ context.Context, r sdk.CloseReason) { s.closed.Store(s.id, r) }

// F9, D9: a unit stuck at a target that stopped answering when the shutdown begins does not
// take the shutdown's whole deadline: the other Spots close meanwhile, every closing callback
// runs, and the node stops in time.
func TestF9_AStuckUnitLeavesTheOtherSpotsTheirClose(t *testing.T) {
	var closedOnA sync.Map
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := serversAndClient(t, closerDesc, func(i int, sc sdk.SpotContext) (any, error) {
		if i == 1 && sc.RestoredState() != nil && sc.ID() == "a-stuck" {
			once.Do(func() { close(entered) }) // the target stops answering
			<-release
		}
		return &closer{id: sc.ID(), closed: &closedOnA}, nil
	}, func(cfg *rt.Config) { cfg.RelocationParallelism = 1 })
	t.Cleanup(func() { close(release) })
	a, caller := c.hosts[0], c.hosts[2]
	ids := []string{"a-stuck", "b-1", "b-2", "b-3"} // in the order the units run
	for _, id := range ids {
		_, err := caller.Call(ctx, sdk.InstanceIntent(closerType, id).WithDesc(closerDesc), "Do", wrapperspb.String("x"), sdk.OnNode(a.LocalNode()))
		require.NoError(t, err)
	}
	go func() {
		_, _ = a.Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: time.Minute})
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the unit never reached the target")
	}
	tr, err := a.Shutdown(ctx, 3*time.Second)
	require.NoError(t, err)
	assert.Equal(t, sdk.TerminationOutcomeStopped, tr.Outcome, "every Spot closed within the deadline")
	for _, id := range ids {
		r, ok := closedOnA.Load(id)
		assert.True(t, ok, "%s ran its closing callback", id)
		assert.Equal(t, sdk.CloseShutdown, r, id)
	}
}

const relocatorType = "relocation.Relocator"

// relocatorDesc is a Spot type whose one-way Go relocates its own node from inside its handler
// and reports what Relocate returned on out.
func relocatorDesc(host *atomic.Pointer[rt.Host], out chan<- error) *sdk.SpotDesc {
	return &sdk.SpotDesc{Name: relocatorType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
		Name:       "Go",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(_ any, ctx context.Context, _ proto.Message) (proto.Message, error) {
			_, err := host.Load().Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 15 * time.Second})
			out <- err
			return nil, nil
		},
	}}}
}

// F7, F10: a Spot's handler that relocates its own node does not wait for the relocation,
// which waits for that handler's turn before the Spot can move: the relocation starts, the
// handler is told it cannot wait for it there, and once the handler returned every Spot moves,
// its own included, and the node is Relocated, rather than the Spot holding the relocation
// until its deadline.
func TestF7_RelocateFromAHandlerDoesNotWaitForItself(t *testing.T) {
	var host atomic.Pointer[rt.Host]
	out := make(chan error, 1)
	desc := relocatorDesc(&host, out)
	c := serversAndClient(t, desc, func(int, sdk.SpotContext) (any, error) { return &gated{}, nil }, nil)
	a, b, caller := c.hosts[0], c.hosts[1], c.hosts[2]
	host.Store(a)
	self := sdk.InstanceIntent(relocatorType, "self").WithDesc(desc)
	require.NoError(t, caller.Send(ctx, self, "Go", wrapperspb.String(""), sdk.OnNode(a.LocalNode())))
	var err error
	select {
	case err = <-out:
	case <-time.After(30 * time.Second):
		t.Fatal("Relocate did not return in the handler")
	}
	require.Error(t, err, "the handler cannot wait for the relocation")
	assert.Contains(t, err.Error(), "from a Spot's handler")
	require.Eventually(t, func() bool { return a.Status().RelocationResult != nil }, 10*time.Second, 5*time.Millisecond,
		"the relocation ended while its deadline was still far")
	res := *a.Status().RelocationResult
	assert.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	assert.Equal(t, sdk.RuntimeStateRelocated, a.Status().State)
	assert.Zero(t, a.MeshStatus().Placement.ActiveSpotCount, "the handler's own Spot moved too")
	assert.EqualValues(t, 1, b.MeshStatus().Placement.ActiveSpotCount)
}

// activatorDesc is a Spot type whose one method counts, served by activator.
var activatorDesc = &sdk.SpotDesc{Name: "relocation.Activator", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Add",
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
	Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
		g := &impl.(*activator).gated
		g.n++
		return wrapperspb.Int64(g.n), nil
	},
}}}

// activator is a gated Spot whose OnActivate runs onActivate, if set, with the context it got.
type activator struct {
	gated
	onActivate func(ctx context.Context)
}

func (a *activator) OnActivate(ctx context.Context) error {
	if a.onActivate != nil {
		a.onActivate(ctx)
	}
	return nil
}

// F7, F10, B7: a Spot's OnActivate that relocates its own node does not wait for the
// relocation, which waits for that creation to end before it can move the Spot: the relocation
// starts, OnActivate is told it cannot wait for it there, the creation ends, and the node is
// Relocated with the new Spot moved too, rather than the creation failing at its
// OperationTimeout.
func TestF7_RelocateFromOnActivateDoesNotWaitForItself(t *testing.T) {
	out := make(chan error, 1)
	var host atomic.Pointer[rt.Host]
	c := serversAndClient(t, activatorDesc, func(i int, sc sdk.SpotContext) (any, error) {
		act := &activator{}
		if i == 0 {
			act.onActivate = func(ctx context.Context) {
				_, err := host.Load().Relocate(ctx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, Deadline: 15 * time.Second})
				out <- err
			}
		}
		return act, nil
	}, func(cfg *rt.Config) { cfg.OperationTimeout = 5 * time.Second })
	a, b, caller := c.hosts[0], c.hosts[1], c.hosts[2]
	host.Store(a)
	called := make(chan error, 1)
	go func() {
		_, err := caller.Call(ctx, sdk.InstanceIntent(activatorDesc.Name, "self").WithDesc(activatorDesc), "Add", wrapperspb.String(""), sdk.OnNode(a.LocalNode()))
		called <- err
	}()
	var err error
	select {
	case err = <-out:
	case <-time.After(30 * time.Second):
		t.Fatal("Relocate did not return in OnActivate")
	}
	require.Error(t, err, "OnActivate cannot wait for the relocation")
	assert.Contains(t, err.Error(), "cannot be waited for here")
	select {
	case err = <-called:
	case <-time.After(30 * time.Second):
		t.Fatal("the call that created the Spot did not return")
	}
	require.NoError(t, err, "the creation ended well and the call reached the Spot")
	require.Eventually(t, func() bool { return a.Status().RelocationResult != nil }, 20*time.Second, 5*time.Millisecond,
		"the relocation ended while its deadline was still far")
	res := *a.Status().RelocationResult
	assert.Equal(t, sdk.RelocationOutcomeRelocated, res.Outcome, "%+v", res)
	assert.Zero(t, a.MeshStatus().Placement.ActiveSpotCount, "the new Spot moved too")
	assert.EqualValues(t, 1, b.MeshStatus().Placement.ActiveSpotCount)
}
