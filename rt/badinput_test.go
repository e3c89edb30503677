package rt_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/sdk"
)

// startWith starts a node of cfg, on etcd at endpoints when given, and closes it at the end
// of the test.
func startWith(t *testing.T, cfg rt.Config, endpoints []string) *rt.Host {
	t.Helper()
	cfg.EtcdEndpoints = endpoints
	h, err := rt.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func TestNilOptionsAreSkipped(t *testing.T) {
	var built atomic.Int64
	fired := make(chan struct{})
	cfg := config(t, &built)
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(counterDesc, func(sc sdk.SpotContext) (any, error) {
			sc.AfterFunc(time.Millisecond, func(context.Context) { close(fired) }, nil)
			return &counter{built: &built}, nil
		}, nil, sdk.WithIdleTimeout(time.Hour), nil)
	}
	h := startWith(t, cfg, nil)
	out, err := h.Call(ctx, sdk.InstanceIntent("test.Counter", "nil-options"), "Add", wrapperspb.Int64(2), nil)
	require.NoError(t, err)
	assert.Equal(t, int64(2), out.(*wrapperspb.Int64Value).GetValue())
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer made with a nil option never fired")
	}
}

func TestNilContextsAreRefusedByTheFunctionsThatStartThings(t *testing.T) {
	_, err := rt.ListNodes(nil, rt.DefaultConfig()) //lint:ignore SA1012 the input under test
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "ListNodes needs a context")
	_, err = devetcd.Start(nil) //lint:ignore SA1012 the input under test
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil context")
}

// A Dialer that returns neither a connection nor an error fails the connection, not the process.
func TestADialerThatReturnsNoConnectionFailsTheCallNotTheProcess(t *testing.T) {
	var built atomic.Int64
	a := startWith(t, config(t, &built), nil)
	cfg := config(t, &built)
	var dials atomic.Int64
	cfg.Dialer = func(context.Context, string) (net.Conn, error) {
		dials.Add(1)
		return nil, nil
	}
	b := startWith(t, cfg, a.EtcdEndpoints())
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := b.Call(c, sdk.InstanceIntent("test.Counter", "far"), "Add", wrapperspb.Int64(1), sdk.OnNode(a.LocalNode()))
	require.Error(t, err)
	assert.Positive(t, dials.Load(), "the call went through the configured Dialer")
	assert.Equal(t, int64(1), add(t, a, "near", 1), "node a still serves")
}

// A descriptor made by hand whose request/reply method has no NewReply is refused before the
// call is sent, since its reply could not be decoded after the server ran it.
func TestACallWithAChannelDescriptorWithoutNewReplyIsRefusedBeforeItIsSent(t *testing.T) {
	var built atomic.Int64
	h := startWith(t, config(t, &built), nil)
	desc := &sdk.ChannelDesc{Name: "test.NoReply", Kind: sdk.ChannelClientServer, Methods: []sdk.MethodDesc{{
		Name:       "Echo",
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	}}}
	_, err := h.CallChannel(ctx, desc, "Echo", wrapperspb.String("x"))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "NewReply")
}

// A request whose message is not the method's is refused on the calling node when it knows the
// type: the receiving node would decode its bytes into its own message and run the handler.
func TestARequestOfAnotherMessageTypeIsRefusedBeforeItIsSent(t *testing.T) {
	var built atomic.Int64
	a := startWith(t, config(t, &built), nil)
	b := startWith(t, config(t, &built), a.EtcdEndpoints())
	add(t, a, "typed", 1)
	for name, h := range map[string]*rt.Host{"local": a, "remote": b} {
		t.Run(name, func(t *testing.T) {
			_, err := h.Call(ctx, sdk.InstanceIntent("test.Counter", "typed"), "Add", wrapperspb.String("one"))
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "Int64Value")
		})
	}
	assert.Equal(t, int64(2), add(t, b, "typed", 1), "no wrong request ran")
}

var nilReplyDesc = &sdk.SpotDesc{Name: "test.NilReply", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{{
	Name:       "Get",
	NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
	NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
	Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
		return (*wrapperspb.Int64Value)(nil), nil
	},
}}}

// A handler that answers nil without an error gives its caller an empty reply, the same on its
// own node as on another.
func TestAHandlerThatAnswersNilGivesAnEmptyReplyLocallyAndRemotely(t *testing.T) {
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		return r.RegisterSpot(nilReplyDesc, func(sdk.SpotContext) (any, error) { return struct{}{}, nil })
	}
	a := startWith(t, cfg, nil)
	cfg.NodeID = a.LocalNode() + "-b"
	b := startWith(t, cfg, a.EtcdEndpoints())
	for name, h := range map[string]*rt.Host{"local": a, "remote": b} {
		t.Run(name, func(t *testing.T) {
			out, err := h.Call(ctx, sdk.InstanceIntent("test.NilReply", "x"), "Get", wrapperspb.Int64(1), sdk.OnNode(a.LocalNode()))
			require.NoError(t, err)
			reply, ok := out.(*wrapperspb.Int64Value)
			require.True(t, ok, "the reply is the method's message, got %T", out)
			require.NotNil(t, reply)
			assert.Zero(t, reply.GetValue())
		})
	}
}

func TestRegistrationRefusesIncompleteOrContradictoryDescriptors(t *testing.T) {
	factory := func(sdk.SpotContext) (any, error) { return &counter{}, nil }
	invoke := func(any, context.Context, proto.Message) (proto.Message, error) { return nil, nil }
	newMsg := func() proto.Message { return new(wrapperspb.Int64Value) }
	method := func(name string) sdk.MethodDesc {
		return sdk.MethodDesc{Name: name, NewRequest: newMsg, NewReply: newMsg, Invoke: invoke}
	}
	spotWith := func(r sdk.Registrar, m sdk.MethodDesc) error {
		return r.RegisterSpot(&sdk.SpotDesc{Name: "t.A", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{m}}, factory)
	}
	noReply := method("Add")
	noReply.NewReply = nil
	cases := map[string]struct {
		register func(sdk.Registrar) error
		want     string
	}{
		"a request/reply Spot method without NewReply": {func(r sdk.Registrar) error {
			return spotWith(r, noReply)
		}, "NewReply"},
		"a Spot method whose NewRequest returns nil": {func(r sdk.Registrar) error {
			m := method("Add")
			m.NewRequest = func() proto.Message { return nil }
			return spotWith(r, m)
		}, "NewRequest returned no message"},
		"a Spot method whose NewRequest returns a nil pointer": {func(r sdk.Registrar) error {
			m := method("Add")
			m.NewRequest = func() proto.Message { return (*wrapperspb.Int64Value)(nil) }
			return spotWith(r, m)
		}, "NewRequest returned no message"},
		"a Spot method whose NewReply panics": {func(r sdk.Registrar) error {
			m := method("Add")
			m.NewReply = func() proto.Message { panic("not ready") }
			return spotWith(r, m)
		}, "NewReply panicked: not ready"},
		"a channel method whose NewRequest panics": {func(r sdk.Registrar) error {
			m := method("M")
			m.NewRequest = func() proto.Message { panic("not ready") }
			return r.RegisterServer(&sdk.ChannelDesc{Name: "t.C", Kind: sdk.ChannelClientServer, Methods: []sdk.MethodDesc{m}}, struct{}{})
		}, "NewRequest panicked: not ready"},
		"a Spot method whose NewRequest panics": {func(r sdk.Registrar) error {
			m := method("Add")
			m.NewRequest = func() proto.Message { panic("not ready") }
			return spotWith(r, m)
		}, "NewRequest panicked: not ready"},
		"an unknown relocation policy": {func(r sdk.Registrar) error {
			return r.RegisterSpot(&sdk.SpotDesc{Name: "t.A", Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{method("Add")}},
				factory, sdk.WithRelocation(sdk.RelocationPolicy(42)))
		}, "unknown relocation policy 42"},
		"an idle timeout on a User type's descriptor": {func(r sdk.Registrar) error {
			return r.RegisterSpot(&sdk.SpotDesc{Name: "t.A", Kind: sdk.KindUser, Methods: []sdk.MethodDesc{method("Add")},
				IdleTimeout: -5 * time.Second}, factory)
		}, "only Instance Spots are idle-evicted"},
		"a channel method named twice": {func(r sdk.Registrar) error {
			return r.RegisterServer(&sdk.ChannelDesc{Name: "t.C", Kind: sdk.ChannelClientServer,
				Methods: []sdk.MethodDesc{method("M"), method("M")}}, struct{}{})
		}, `method "M" appears twice`},
		"a channel method without a name": {func(r sdk.Registrar) error {
			return r.RegisterServer(&sdk.ChannelDesc{Name: "t.C", Kind: sdk.ChannelClientServer,
				Methods: []sdk.MethodDesc{method("")}}, struct{}{})
		}, "a name of valid UTF-8"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := rt.DefaultConfig()
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Register = c.register
			h, err := rt.Start(ctx, cfg)
			if err == nil {
				_ = h.Close()
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, sdk.ErrInvalidArgument) || errors.Is(err, sdk.ErrConfig), "%v", err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestConfigValidateRefusesWhatItCannotServe(t *testing.T) {
	cases := map[string]struct {
		set  func(*rt.Config)
		want string
	}{
		"a negative lease TTL":               {func(c *rt.Config) { c.LeaseTTL = -time.Second }, "LeaseTTL must not be negative"},
		"a negative operation timeout":       {func(c *rt.Config) { c.OperationTimeout = -time.Second }, "OperationTimeout must not be negative"},
		"a negative stop timeout":            {func(c *rt.Config) { c.StopTimeout = -time.Second }, "StopTimeout must not be negative"},
		"a negative dial timeout":            {func(c *rt.Config) { c.EtcdDialTimeout = -time.Second }, "EtcdDialTimeout must not be negative"},
		"negative concurrent activations":    {func(c *rt.Config) { c.MaxConcurrentActivations = -1 }, "MaxConcurrentActivations must not be negative"},
		"a negative relocation parallelism":  {func(c *rt.Config) { c.RelocationParallelism = -1 }, "RelocationParallelism must not be negative"},
		"a negative relocation deadline":     {func(c *rt.Config) { c.RelocationDeadline = -time.Second }, "RelocationDeadline must not be negative"},
		"a negative re-send window":          {func(c *rt.Config) { c.RelocationResendWindow = -time.Second }, "RelocationResendWindow must not be negative"},
		"a message size gRPC cannot frame":   {func(c *rt.Config) { c.MaxMessageSize = math.MaxInt }, "MaxMessageSize must be 1.."},
		"a maintenance wave of invalid text": {func(c *rt.Config) { c.MaintenanceWave = "wave\xff" }, "MaintenanceWave must be valid UTF-8"},
		"a maintenance wave too long":        {func(c *rt.Config) { c.MaintenanceWave = strings.Repeat("w", 2<<20) }, "MaintenanceWave must be valid UTF-8 of at most 256 bytes"},
		"a listen address without a port":    {func(c *rt.Config) { c.ListenAddr = "127.0.0.1" }, `ListenAddr "127.0.0.1" is not host:port`},
		"a listen port out of range":         {func(c *rt.Config) { c.ListenAddr = "127.0.0.1:99999" }, `ListenAddr "127.0.0.1:99999" has port "99999", which is not a number in 0..65535`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := rt.DefaultConfig()
			c.set(&cfg)
			err := cfg.Validate()
			require.ErrorIs(t, err, sdk.ErrConfig)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	cfg := rt.DefaultConfig()
	cfg.InstanceSpotIdleTimeout = -1
	cfg.MaxMessageSize = rt.MaxMessageSizeLimit
	cfg.ListenAddr = "localhost:0"
	require.NoError(t, cfg.Validate(), "a negative idle timeout turns eviction off, and the largest message size is taken")
	cfg.MaxMessageSize = math.MaxInt32
	require.NoError(t, cfg.Validate(), "gRPC's customary unlimited size is taken")
}

// OnNode with a malformed node ID is refused as an invalid ID, not looked up as a node.
func TestOnNodeWithAnInvalidNodeIDIsRefused(t *testing.T) {
	var built atomic.Int64
	h := startWith(t, config(t, &built), nil)
	_, err := h.Call(ctx, sdk.InstanceIntent("test.Counter", "placed"), "Add", wrapperspb.Int64(1), sdk.OnNode("bad\x00node"))
	require.ErrorIs(t, err, sdk.ErrInvalidID)
	assert.Contains(t, err.Error(), "OnNode")
	assert.NotContains(t, err.Error(), "\x00")
	assert.Zero(t, built.Load(), "nothing was created")
}
