package rt_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		proctest.Cleanup()
		os.Exit(code) // the leak check's verdict: goleak leaves the exit to its cleanup
	}))
}

var ctx = context.Background()

// counter is an Instance Spot that counts.
type counter struct {
	n     int64
	built *atomic.Int64
}

var counterDesc = &sdk.SpotDesc{Name: "test.Counter", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Add",
	NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
	NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
	Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
		c := impl.(*counter)
		c.n += req.(*wrapperspb.Int64Value).GetValue()
		return wrapperspb.Int64(c.n), nil
	},
}}}

func config(t *testing.T, built *atomic.Int64) rt.Config {
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.StopTimeout = 20 * time.Second
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(counterDesc, func(sdk.SpotContext) (any, error) {
			built.Add(1)
			return &counter{built: built}, nil
		})
	}
	return cfg
}

func add(t *testing.T, c sdk.Client, id string, n int64) int64 {
	t.Helper()
	out, err := c.Call(ctx, sdk.InstanceIntent("test.Counter", id), "Add", wrapperspb.Int64(n))
	require.NoError(t, err)
	return out.(*wrapperspb.Int64Value).GetValue()
}

func TestStartOnTheEmbeddedDefault(t *testing.T) {
	var built atomic.Int64
	h, err := rt.Start(ctx, config(t, &built))
	require.NoError(t, err)
	defer h.Close()
	require.NotEmpty(t, h.EtcdEndpoints(), "no endpoints configured: the node runs its own etcd")
	assert.Equal(t, int64(2), add(t, h, "c1", 2))
	assert.Equal(t, int64(5), add(t, h, "c1", 3))
	assert.Equal(t, int64(1), built.Load())
	_, err = h.Call(ctx, sdk.InstanceTarget("test.Counter", "missing"), "Add", wrapperspb.Int64(1))
	require.ErrorIs(t, err, sdk.ErrNotFound)
}

func TestSecondNodeJoinsTheEmbeddedEtcd(t *testing.T) {
	var built atomic.Int64
	a, err := rt.Start(ctx, config(t, &built))
	require.NoError(t, err)
	defer a.Close()
	cfg := config(t, &built)
	cfg.EtcdEndpoints = a.EtcdEndpoints()
	b, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer b.Close()
	assert.NotEqual(t, a.LocalNode(), b.LocalNode())
	_, err = a.Call(ctx, sdk.InstanceIntent("test.Counter", "shared"), "Add", wrapperspb.Int64(1), sdk.OnNode(a.LocalNode()))
	require.NoError(t, err)
	assert.Equal(t, int64(2), add(t, b, "shared", 1), "node b reaches node a's object")
	assert.Equal(t, int64(1), built.Load(), "node b did not create a second activation")
}

func TestCloseStopsEverythingAndReleasesLocations(t *testing.T) {
	var built atomic.Int64
	a, err := rt.Start(ctx, config(t, &built))
	require.NoError(t, err)
	defer a.Close()
	cfg := config(t, &built)
	cfg.EtcdEndpoints = a.EtcdEndpoints()
	b, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	for _, id := range []string{"x", "y", "z"} {
		_, err := b.Call(ctx, sdk.InstanceIntent("test.Counter", id), "Add", wrapperspb.Int64(1), sdk.OnNode(b.LocalNode()))
		require.NoError(t, err)
	}
	start := time.Now()
	require.NoError(t, b.Close())
	assert.Less(t, time.Since(start), 20*time.Second)
	require.NoError(t, b.Close(), "Close twice is safe")
	// b's Spots were released at its close, so a can create them afresh.
	assert.Equal(t, int64(1), add(t, a, "x", 1))
	assert.Equal(t, int64(4), built.Load())
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg := rt.DefaultConfig()
	require.NoError(t, cfg.Validate())
	cfg.NodeID = "bad\x00id"
	cfg.MaxActiveObjects = -1
	cfg.Exec.Application.Count = 0
	cfg.LeaseTTL = time.Second
	err := cfg.Validate()
	require.Error(t, err)
	for _, want := range []string{"NUL", "MaxActiveObjects", "application lane count", "LeaseTTL"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.ErrorIs(t, err, sdk.ErrConfig)
	assert.ErrorIs(t, err, sdk.ErrInvalidID)
	_, err = rt.Start(ctx, cfg)
	require.Error(t, err, "Start refuses an invalid configuration")
}

func TestStartReportsRegistrationErrorsAndCleansUp(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		f := func(sdk.SpotContext) (any, error) { return &counter{}, nil }
		return errors.Join(r.RegisterSpot(counterDesc, f), r.RegisterSpot(counterDesc, f))
	}
	_, err := rt.Start(ctx, cfg)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "registered twice")
}

func TestStartWithUnreachableEtcdFailsInTime(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.EtcdEndpoints = []string{"127.0.0.1:1"}
	cfg.EtcdDialTimeout = 200 * time.Millisecond
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := rt.Start(c, cfg)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
}

// stuckOnClose is an Entry Spot whose closing callback returns only once release is closed.
type stuckOnClose struct{ entered, release chan struct{} }

func (s *stuckOnClose) OnClose(context.Context, sdk.CloseReason) {
	close(s.entered)
	<-s.release
}

// A start that fails after it made Entry Spots stops them within StopTimeout: one whose closing
// callback never returns does not hold Start.
func TestAFailedStartStopsWithinStopTimeout(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.StopTimeout = time.Second
	cfg.Register = func(r sdk.Registrar) error {
		return errors.Join(
			r.RegisterSpot(spotDesc("start.AStuck", sdk.KindEntry), func(sdk.SpotContext) (any, error) {
				return &stuckOnClose{entered: entered, release: release}, nil
			}),
			r.RegisterSpot(spotDesc("start.BBroken", sdk.KindEntry), func(sdk.SpotContext) (any, error) {
				return nil, errors.New("it cannot start")
			}))
	}
	done := make(chan error, 1)
	go func() {
		_, err := rt.Start(ctx, cfg)
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "it cannot start")
		select {
		case <-entered:
		default:
			t.Fatal("the stuck Spot's closing callback never ran")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start did not return after it failed")
	}
}

// nilCtx is the context a caller forgot to give.
var nilCtx context.Context

// assertNilContextRefused checks that err refuses a nil context as an invalid argument,
// naming what was called.
func assertNilContextRefused(t *testing.T, call string, err error) {
	t.Helper()
	if assert.ErrorIs(t, err, sdk.ErrInvalidArgument, call) {
		assert.Contains(t, err.Error(), call+" needs a context, got nil", call)
	}
}

// Bad input gets a clear error, never a panic, and starts nothing (F4's rule for a
// relocation's arguments, held for every operation): each method of a Host and of a Spot's
// SpotContext that takes a context, and Start, refuses a nil one before doing anything. A
// nil context made Shutdown and Relocate start the operation and then panic in the caller.
func TestNilContextGetsAClearErrorAndStartsNothing(t *testing.T) {
	var built atomic.Int64
	var spot atomic.Pointer[sdk.SpotContext]
	holderDesc := &sdk.SpotDesc{Name: "test.Holder", Kind: sdk.KindUser, Methods: []sdk.MethodDesc{{
		Name:       "Ping",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke:     func(any, context.Context, proto.Message) (proto.Message, error) { return wrapperspb.String(""), nil },
	}}}
	actorDesc := &sdk.SpotDesc{Name: "test.Held", Kind: sdk.KindActor, Methods: holderDesc.Methods}
	cfg := config(t, &built)
	counters := cfg.Register
	cfg.Register = func(r sdk.Registrar) error {
		return errors.Join(counters(r),
			r.RegisterSpot(holderDesc, func(sc sdk.SpotContext) (any, error) {
				spot.Store(&sc)
				return struct{}{}, nil
			}),
			r.RegisterActor(actorDesc, func(sdk.ActorContext) (any, error) { return struct{}{}, nil }))
	}
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	defer h.Close()
	holder := sdk.UserTarget(holderDesc.Name, "h").WithDesc(holderDesc)
	require.NoError(t, h.Create(ctx, holder))
	sc := *spot.Load()
	counter := sdk.InstanceIntent("test.Counter", "c")
	actor := sdk.ActorTarget(actorDesc.Name, "a").WithDesc(actorDesc)
	msg := wrapperspb.Int64(1)

	for _, c := range []struct {
		name   string
		client sdk.Client
	}{{"Host", h}, {"SpotContext.Client", sc.Client()}} {
		t.Run(c.name, func(t *testing.T) {
			assert.NotPanics(t, func() {
				_, err := c.client.Call(nilCtx, counter, "Add", msg)
				assertNilContextRefused(t, "Call", err)
				assertNilContextRefused(t, "Send", c.client.Send(nilCtx, counter, "Add", msg))
				assertNilContextRefused(t, "Create", c.client.Create(nilCtx, sdk.UserTarget(holderDesc.Name, "other").WithDesc(holderDesc)))
				assertNilContextRefused(t, "CloseSpot", c.client.CloseSpot(nilCtx, holder))
				assertNilContextRefused(t, "MoveActor", c.client.MoveActor(nilCtx, actor, holder))
				_, err = c.client.CallChannel(nilCtx, &rttest.WhoDesc, rttest.WhoWho, wrapperspb.String(""))
				assertNilContextRefused(t, "CallChannel", err)
				assertNilContextRefused(t, "SendChannel", c.client.SendChannel(nilCtx, &rttest.WhoDesc, rttest.WhoWho, wrapperspb.String("")))
				assertNilContextRefused(t, "Publish", c.client.Publish(nilCtx, &rttest.FeedDesc, rttest.FeedPost, wrapperspb.String("")))
			})
		})
	}
	assert.NotPanics(t, func() {
		assertNilContextRefused(t, "Spawn", sc.Spawn(nilCtx, actorDesc, "a"))
		assertNilContextRefused(t, "CloseSpot", sc.Client().CloseSpot(nilCtx, holder))
	})
	assert.NotPanics(t, func() {
		_, err := h.ObserveMesh(nilCtx, "default")
		assertNilContextRefused(t, "ObserveMesh", err)
		_, err = h.ObserveClientServer(nilCtx, rttest.WhoChannel)
		assertNilContextRefused(t, "ObserveClientServer", err)
		_, err = h.ObserveFanout(nilCtx, rttest.FeedChannel)
		assertNilContextRefused(t, "ObserveFanout", err)
		for range h.ObserveRuntime(nilCtx) {
			t.Error("a stream with a nil context delivered a status")
		}
		for range h.ObserveCapacity(nilCtx) {
			t.Error("a stream with a nil context delivered figures")
		}
	})
	assert.NotPanics(t, func() {
		_, err := h.Relocate(nilCtx, sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance})
		assertNilContextRefused(t, "Relocate", err)
		_, err = h.Shutdown(nilCtx, time.Minute)
		assertNilContextRefused(t, "Shutdown", err)
	})
	st := h.Status()
	assert.Equal(t, sdk.RuntimeStateServing, st.State, "no relocation or shutdown started")
	assert.Nil(t, st.Deadline)
	assert.Nil(t, st.RelocationResult)
	assert.Zero(t, built.Load(), "no Counter was created")
	assert.Equal(t, 1, h.MeshStatus().Placement.ActiveSpotCount, "only the holder is active")
	assert.Zero(t, h.MeshStatus().Placement.ActiveActorCount, "no Actor was spawned")

	assert.NotPanics(t, func() {
		other := config(t, &built)
		other.EtcdEndpoints = h.EtcdEndpoints()
		other.NodeID = "never-started"
		_, err := rt.Start(nilCtx, other)
		assertNilContextRefused(t, "Start", err)
	})
}
