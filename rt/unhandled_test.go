package rt_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// The unhandled-message policy (I1), exercised where a message meets a node that knows no
// handler for it. Node b runs version 1 of test.Counter (Add only); node a runs version 2, which
// adds the request Get and the one-way Reset. A Counter created on b and addressed with the
// version 2 descriptor is unhandled on b for Get and Reset: locally when b calls it, remotely
// when a does.

var counterV2Desc = &sdk.SpotDesc{Name: counterDesc.Name, Kind: sdk.KindInstance, Methods: append(slices.Clone(counterDesc.Methods),
	sdk.MethodDesc{
		Name:       "Get",
		NewRequest: func() proto.Message { return new(emptypb.Empty) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			return wrapperspb.Int64(impl.(*counter).n), nil
		},
	},
	sdk.MethodDesc{
		Name:       "Reset",
		OneWay:     true,
		NewRequest: func() proto.Message { return new(emptypb.Empty) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			impl.(*counter).n = 0
			return nil, nil
		},
	},
)}

// captured is one log record with its attributes, those of the logger's With included.
type captured struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logSink collects the records of one node's logger.
type logSink struct {
	mu   sync.Mutex
	recs []captured
}

type sinkHandler struct {
	sink  *logSink
	attrs []slog.Attr
}

func (h sinkHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h sinkHandler) Handle(_ context.Context, r slog.Record) error {
	c := captured{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		c.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		c.attrs[a.Key] = a.Value.String()
		return true
	})
	h.sink.mu.Lock()
	h.sink.recs = append(h.sink.recs, c)
	h.sink.mu.Unlock()
	return nil
}

func (h sinkHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sinkHandler{sink: h.sink, attrs: append(slices.Clone(h.attrs), attrs...)}
}

func (h sinkHandler) WithGroup(string) slog.Handler { return h }

// find returns the records whose message is msg.
func (s *logSink) find(msg string) []captured {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []captured
	for _, r := range s.recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// unhandled returns the records about unhandled messages.
func (s *logSink) unhandled() []captured {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []captured
	for _, r := range s.recs {
		if r.msg == "unhandled message dropped" || r.msg == "unhandled message refused" {
			out = append(out, r)
		}
	}
	return out
}

// policyNodes is a two-node mesh with one unhandled-message policy: a (index 0) hosts version 2
// of test.Counter, b (index 1) version 1, and the Counter id lives on b.
type policyNodes struct {
	a, b        *rt.Host
	logA, logB  *logSink
	built       atomic.Int64
	id          string
	v2, v2Plain sdk.Target // the Counter with the version 2 descriptor, and without any
}

func newPolicyNodes(t *testing.T, policy sdk.UnhandledDispatchOptions, mutate func(cfg *rt.Config)) *policyNodes {
	t.Helper()
	p := &policyNodes{logA: &logSink{}, logB: &logSink{}, id: "c1"}
	c := newCluster(t, 2, func(i int, cfg *rt.Config) {
		cfg.Unhandled = policy
		desc, sink := counterV2Desc, p.logA
		if i == 1 {
			desc, sink = counterDesc, p.logB
		}
		cfg.Logger = slog.New(sinkHandler{sink: sink})
		cfg.Register = func(r sdk.Registrar) error {
			return r.RegisterSpot(desc, func(sdk.SpotContext) (any, error) {
				p.built.Add(1)
				return &counter{built: &p.built}, nil
			})
		}
		if mutate != nil {
			mutate(cfg)
		}
	})
	p.a, p.b = c.hosts[0], c.hosts[1]
	_, err := p.a.Call(ctx, sdk.InstanceIntent(counterDesc.Name, p.id), "Add", wrapperspb.Int64(5), sdk.OnNode(p.b.LocalNode()))
	require.NoError(t, err)
	require.Equal(t, int64(1), p.built.Load(), "the Counter lives on b")
	p.v2 = sdk.InstanceTarget(counterDesc.Name, p.id).WithDesc(counterV2Desc)
	p.v2Plain = sdk.InstanceTarget(counterDesc.Name, p.id)
	return p
}

// stillServes checks that the Counter kept its state and serves on.
func (p *policyNodes) stillServes(t *testing.T) {
	t.Helper()
	out, err := p.a.Call(ctx, p.v2, "Add", wrapperspb.Int64(1))
	require.NoError(t, err)
	assert.Equal(t, int64(6), out.(*wrapperspb.Int64Value).GetValue(), "nothing unhandled ran; the Counter serves on")
	assert.Equal(t, int64(1), p.built.Load(), "nothing unhandled created a Spot")
}

func within(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func assertLogged(t *testing.T, rec captured, level slog.Level, family, node, from string) {
	t.Helper()
	assert.Equal(t, level, rec.level)
	assert.Equal(t, family, rec.attrs["family"])
	assert.Equal(t, counterDesc.Name, rec.attrs["spot"])
	assert.Equal(t, "c1", rec.attrs["id"])
	assert.Contains(t, []string{"Get", "Reset"}, rec.attrs["method"])
	assert.Equal(t, node, rec.attrs["node"])
	if from == "" {
		assert.NotContains(t, rec.attrs, "from")
	} else {
		assert.Equal(t, from, rec.attrs["from"])
	}
}

func TestI1_ReplyErrorRequest(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{}, nil)
	t.Run("local", func(t *testing.T) {
		_, err := p.b.Call(ctx, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Contains(t, err.Error(), `has no method "Get"`)
		assert.Equal(t, int64(1), p.b.UnhandledStats().Requests)
	})
	t.Run("remote", func(t *testing.T) {
		c, cancel := within(10 * time.Second)
		defer cancel()
		start := time.Now()
		_, err := p.a.Call(c, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "the receiver's refusal reaches the caller")
		assert.Less(t, time.Since(start), 5*time.Second, "at once, not at a deadline")
		assert.Equal(t, int64(2), p.b.UnhandledStats().Requests)
		assert.Zero(t, p.a.UnhandledStats().Requests, "the caller does not judge the receiver's answer again")
		// A type the receiver does not register at all: placed there explicitly.
		_, err = p.a.Call(c, sdk.InstanceIntent("test.OnlyOnA", "x"), "Get", &emptypb.Empty{}, sdk.OnNode(p.b.LocalNode()))
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Contains(t, err.Error(), "not registered on node node-b")
		assert.Equal(t, int64(3), p.b.UnhandledStats().Requests)
	})
	assert.Empty(t, p.logA.unhandled())
	assert.Empty(t, p.logB.unhandled(), "ReplyError logs nothing: the caller has the error")
	assert.Zero(t, p.b.UnhandledStats().Dropped)
	p.stillServes(t)
}

func TestI1_LogAndDropRequest(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{Request: sdk.UnhandledDispatchActionLogAndDrop}, nil)
	const wait = 300 * time.Millisecond
	t.Run("local", func(t *testing.T) {
		c, cancel := within(wait)
		defer cancel()
		start := time.Now()
		_, err := p.b.Call(c, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, context.DeadlineExceeded, "no reply: the call ends at its deadline")
		assert.NotErrorIs(t, err, sdk.ErrUnhandled)
		assert.GreaterOrEqual(t, time.Since(start), wait-10*time.Millisecond)
		recs := p.logB.unhandled()
		require.Len(t, recs, 1)
		assertLogged(t, recs[0], slog.LevelWarn, "Request", "node-b", "")
	})
	t.Run("remote", func(t *testing.T) {
		c, cancel := within(wait)
		defer cancel()
		start := time.Now()
		_, err := p.a.Call(c, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, sdk.ErrUnhandled)
		assert.GreaterOrEqual(t, time.Since(start), wait-10*time.Millisecond)
		recs := p.logB.unhandled()
		require.Len(t, recs, 2)
		assertLogged(t, recs[1], slog.LevelWarn, "Request", "node-b", "node-a")
		assert.Empty(t, p.logA.unhandled(), "the caller's node logs nothing")
	})
	st := p.b.UnhandledStats()
	assert.Equal(t, int64(2), st.Requests)
	assert.Equal(t, int64(2), st.Dropped)
	p.stillServes(t)
}

func TestI1_DropRequest(t *testing.T) {
	const hold = 1500 * time.Millisecond
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{Request: sdk.UnhandledDispatchActionDrop}, func(cfg *rt.Config) {
		cfg.OperationTimeout = hold
	})
	// Callers without a deadline: the receiver's OperationTimeout bounds their wait.
	t.Run("local", func(t *testing.T) {
		start := time.Now()
		_, err := p.b.Call(ctx, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, sdk.ErrUnhandled)
		assert.GreaterOrEqual(t, time.Since(start), hold-10*time.Millisecond)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("remote", func(t *testing.T) {
		start := time.Now()
		_, err := p.a.Call(ctx, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, sdk.ErrUnhandled)
		assert.GreaterOrEqual(t, time.Since(start), hold-10*time.Millisecond)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("remote cancelled", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := p.a.Call(c, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, context.Canceled)
		assert.Less(t, time.Since(start), hold, "a cancelled caller stops waiting at once")
	})
	assert.Empty(t, p.logA.unhandled())
	assert.Empty(t, p.logB.unhandled(), "Drop logs nothing")
	st := p.b.UnhandledStats()
	assert.Equal(t, int64(3), st.Requests)
	assert.Equal(t, int64(3), st.Dropped)
	p.stillServes(t)
}

func TestI1_ThrowRequest(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{Request: sdk.UnhandledDispatchActionThrow}, nil)
	t.Run("local", func(t *testing.T) {
		// The descriptor has Get, so the caller cannot know: b's dispatch refuses it and logs.
		_, err := p.b.Call(ctx, p.v2, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Equal(t, int64(1), p.b.UnhandledStats().Requests)
		recs := p.logB.unhandled()
		require.Len(t, recs, 1)
		assertLogged(t, recs[0], slog.LevelError, "Request", "node-b", "")
		// A descriptor without the method: refused before anything is sent, even a creation.
		v1 := sdk.InstanceIntent(counterDesc.Name, "fresh").WithDesc(counterDesc)
		_, err = p.b.Call(ctx, v1, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Contains(t, err.Error(), "not sent")
		assert.Equal(t, int64(1), p.b.UnhandledStats().NotSent)
		assert.Equal(t, int64(1), p.b.UnhandledStats().Requests, "it reached no dispatcher")
		assert.Equal(t, int64(1), p.built.Load(), "and created nothing")
	})
	t.Run("remote", func(t *testing.T) {
		_, err := p.a.Call(ctx, p.v2Plain, "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "without a descriptor the sender cannot know: the receiver refuses it")
		assert.Equal(t, int64(2), p.b.UnhandledStats().Requests)
		recs := p.logB.unhandled()
		require.Len(t, recs, 2)
		assertLogged(t, recs[1], slog.LevelError, "Request", "node-b", "node-a")
		// No node of the mesh hosts the type: the sender knows, where other actions answer
		// not found.
		_, err = p.a.Call(ctx, sdk.InstanceTarget("test.Nowhere", "x"), "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.NotErrorIs(t, err, sdk.ErrNotFound)
		assert.Equal(t, int64(1), p.a.UnhandledStats().NotSent)
		// An Entry target on a node that hosts no such Entry type.
		_, err = p.a.Call(ctx, sdk.EntryTarget("test.NoEntry", p.b.LocalNode()), "Get", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Equal(t, int64(2), p.a.UnhandledStats().NotSent)
		assert.Equal(t, int64(2), p.b.UnhandledStats().Requests, "b never saw them")
	})
	assert.Zero(t, p.b.UnhandledStats().Dropped)
	p.stillServes(t)
}

func TestI1_ReplyErrorSend(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{}, nil)
	t.Run("local", func(t *testing.T) {
		err := p.b.Send(ctx, p.v2, "Reset", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "a one-way message is acknowledged at admission, so Send gets the refusal")
		assert.Equal(t, int64(1), p.b.UnhandledStats().Sends)
	})
	t.Run("remote", func(t *testing.T) {
		err := p.a.Send(ctx, p.v2, "Reset", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled)
		assert.Equal(t, int64(2), p.b.UnhandledStats().Sends)
		assert.Zero(t, p.a.UnhandledStats().Sends)
	})
	assert.Empty(t, p.logA.unhandled())
	assert.Empty(t, p.logB.unhandled())
	assert.Zero(t, p.b.UnhandledStats().Dropped)
	p.stillServes(t)
}

func TestI1_LogAndDropSend(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{Send: sdk.UnhandledDispatchActionLogAndDrop}, nil)
	t.Run("local", func(t *testing.T) {
		require.NoError(t, p.b.Send(ctx, p.v2, "Reset", &emptypb.Empty{}), "dropped counts as delivered")
		recs := p.logB.unhandled()
		require.Len(t, recs, 1)
		assertLogged(t, recs[0], slog.LevelWarn, "Send", "node-b", "")
	})
	t.Run("remote", func(t *testing.T) {
		require.NoError(t, p.a.Send(ctx, p.v2, "Reset", &emptypb.Empty{}))
		recs := p.logB.unhandled()
		require.Len(t, recs, 2)
		assertLogged(t, recs[1], slog.LevelWarn, "Send", "node-b", "node-a")
		assert.Empty(t, p.logA.unhandled())
	})
	st := p.b.UnhandledStats()
	assert.Equal(t, int64(2), st.Sends)
	assert.Equal(t, int64(2), st.Dropped)
	// The Request family keeps its own action.
	_, err := p.a.Call(ctx, p.v2, "Get", &emptypb.Empty{})
	require.ErrorIs(t, err, sdk.ErrUnhandled)
	p.stillServes(t)
}

func TestI1_DropSend(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{Send: sdk.UnhandledDispatchActionDrop}, nil)
	t.Run("local", func(t *testing.T) {
		require.NoError(t, p.b.Send(ctx, p.v2, "Reset", &emptypb.Empty{}))
	})
	t.Run("remote", func(t *testing.T) {
		require.NoError(t, p.a.Send(ctx, p.v2, "Reset", &emptypb.Empty{}))
	})
	assert.Empty(t, p.logA.unhandled())
	assert.Empty(t, p.logB.unhandled(), "Drop logs nothing")
	st := p.b.UnhandledStats()
	assert.Equal(t, int64(2), st.Sends)
	assert.Equal(t, int64(2), st.Dropped)
	p.stillServes(t)
}

func TestI1_ThrowSend(t *testing.T) {
	p := newPolicyNodes(t, sdk.UnhandledDispatchOptions{Send: sdk.UnhandledDispatchActionThrow}, nil)
	t.Run("local", func(t *testing.T) {
		v1 := sdk.InstanceTarget(counterDesc.Name, p.id).WithDesc(counterDesc)
		err := p.b.Send(ctx, v1, "Reset", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "the descriptor shows no handler: refused before sending")
		assert.Contains(t, err.Error(), "not sent")
		assert.Equal(t, int64(1), p.b.UnhandledStats().NotSent)
		assert.Zero(t, p.b.UnhandledStats().Sends)
		err = p.b.Send(ctx, p.v2Plain, "Reset", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "found unhandled at dispatch")
		recs := p.logB.unhandled()
		require.Len(t, recs, 1)
		assertLogged(t, recs[0], slog.LevelError, "Send", "node-b", "")
	})
	t.Run("remote", func(t *testing.T) {
		err := p.a.Send(ctx, p.v2, "Reset", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "the receiver refuses what the sender could not know")
		recs := p.logB.unhandled()
		require.Len(t, recs, 2)
		assertLogged(t, recs[1], slog.LevelError, "Send", "node-b", "node-a")
		err = p.a.Send(ctx, sdk.InstanceTarget("test.Nowhere", "x"), "Reset", &emptypb.Empty{})
		require.ErrorIs(t, err, sdk.ErrUnhandled, "no node hosts the type")
		assert.Equal(t, int64(1), p.a.UnhandledStats().NotSent)
	})
	assert.Equal(t, int64(2), p.b.UnhandledStats().Sends)
	p.stillServes(t)
}

func TestI1_UnknownActionIsAConfigError(t *testing.T) {
	for _, tc := range []struct {
		family string
		opts   sdk.UnhandledDispatchOptions
	}{
		{"Request", sdk.UnhandledDispatchOptions{Request: 4}},
		{"Send", sdk.UnhandledDispatchOptions{Send: 200}},
		{"Publish", sdk.UnhandledDispatchOptions{Publish: 4}},
	} {
		cfg := rt.DefaultConfig()
		cfg.Unhandled = tc.opts
		err := cfg.Validate()
		require.Error(t, err, tc.family)
		assert.ErrorIs(t, err, sdk.ErrConfig)
		assert.Contains(t, err.Error(), "Unhandled")
		assert.Contains(t, err.Error(), tc.family)
		_, err = rt.Start(ctx, cfg)
		require.ErrorIs(t, err, sdk.ErrConfig, "Start refuses it too")
	}
	cfg := rt.DefaultConfig()
	cfg.Unhandled = sdk.UnhandledDispatchOptions{Request: sdk.UnhandledDispatchActionThrow, Send: sdk.UnhandledDispatchActionDrop, Publish: sdk.UnhandledDispatchActionLogAndDrop}
	require.NoError(t, cfg.Validate())
}
