package channel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu    sync.Mutex
	got   []string
	block chan struct{}
}

var feed = sdk.ChannelDesc{Name: "feed", Kind: sdk.ChannelFanout, Methods: []sdk.MethodDesc{{
	Name: "Post", OneWay: true,
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
		r := impl.(*recorder)
		if r.block != nil {
			select {
			case <-r.block:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		r.mu.Lock()
		r.got = append(r.got, req.(*wrapperspb.StringValue).GetValue())
		r.mu.Unlock()
		if req.(*wrapperspb.StringValue).GetValue() == "panic" {
			panic("boom")
		}
		return nil, nil
	},
}}}

// K12-like bounds of a subscriber's queue: whichever of count and bytes is reached first
// refuses, the first message whatever its size is taken, and the bytes come back when run.
func TestSubscriberQueueIsBoundedOnCountAndBytes(t *testing.T) {
	var r Registry
	rec := &recorder{block: make(chan struct{})}
	require.NoError(t, r.Subscribe(&feed, rec, sdk.ChannelQueue(3, 1000)))
	sub := r.Subscriber("feed")
	md := &feed.Methods[0]
	msg := wrapperspb.String("x")
	require.NoError(t, sub.Deliver("p", md, msg, 2000, nil), "the first message is taken whatever its size")
	err := sub.Deliver("p", md, msg, 10, nil)
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.AxisBytes, qf.Axis)
	assert.Contains(t, qf.Error(), "feed.Post")
	close(rec.block)
	require.Eventually(t, func() bool { n, b := sub.Held(); return n == 0 && b == 0 }, time.Second, time.Millisecond)

	rec.block = make(chan struct{})
	for range 3 {
		require.NoError(t, sub.Deliver("p", md, msg, 0, nil))
	}
	err = sub.Deliver("p", md, msg, 0, nil)
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.AxisCount, qf.Axis)
	assert.True(t, errors.Is(err, sdk.ErrQueueFull))
	close(rec.block)
	require.NoError(t, r.Close(context.Background()))
}

// A subscriber's handler runs one publication at a time, in the order delivered; a panic is
// logged and the next one runs; Close drops what is queued, runs their completions and waits
// for the handler.
func TestSubscriberRunsInOrderAndCloses(t *testing.T) {
	var r Registry
	rec := &recorder{}
	require.NoError(t, r.Subscribe(&feed, rec))
	sub := r.Subscriber("feed")
	md := &feed.Methods[0]
	var done sync.WaitGroup
	want := []string{}
	for i := range 200 {
		v := string(rune('a' + i%26))
		if i == 50 {
			v = "panic"
		}
		want = append(want, v)
		done.Add(1)
		require.NoError(t, sub.Deliver("p", md, wrapperspb.String(v), 1, done.Done))
	}
	done.Wait()
	assert.Equal(t, want, rec.got)
	assert.EqualValues(t, 200, sub.Handled())

	rec.block = make(chan struct{})
	var dropped atomic.Int64
	for range 5 {
		require.NoError(t, sub.Deliver("p", md, wrapperspb.String("late"), 1, func() { dropped.Add(1) }))
	}
	require.NoError(t, r.Close(context.Background())) // the running handler sees its context end
	assert.EqualValues(t, 5, dropped.Load(), "each completion runs once, run or dropped")
	require.ErrorIs(t, sub.Deliver("p", md, wrapperspb.String("after"), 1, nil), sdk.ErrClosed)
}

func TestRegistrationIsRefusedAfterFreeze(t *testing.T) {
	var r Registry
	r.Freeze()
	require.ErrorIs(t, r.Subscribe(&feed, &recorder{}), sdk.ErrConfig)
}

// Close waits for the work under way until its context ends, and no work starts after it.
func TestCloseWaitsForHandlersUntilItsDeadline(t *testing.T) {
	var r Registry
	release := make(chan struct{})
	require.True(t, r.Go(func() { <-release }))
	cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := r.Close(cctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a handler that outlives the deadline is left behind")
	assert.False(t, r.Go(func() {}), "nothing starts after Close")
	close(release)
	require.NoError(t, r.Close(context.Background()))
}

// Channel work that waits on the store, not on a handler, ends as Close begins: Close does not
// wait for it to its deadline.
func TestCloseEndsTheWorksContextFirst(t *testing.T) {
	var r Registry
	require.NoError(t, r.Context().Err())
	require.True(t, r.Go(func() { <-r.Context().Done() }))
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Close(cctx), "the work ended with the context, well before the deadline")
	require.ErrorIs(t, r.Context().Err(), context.Canceled)
}

// A channel name has one kind on a node.
func TestAChannelNameHasOneKind(t *testing.T) {
	var r Registry
	require.NoError(t, r.Subscribe(&feed, &recorder{}))
	srv := feed
	srv.Kind = sdk.ChannelClientServer
	srv.Methods = []sdk.MethodDesc{{Name: "Get", NewRequest: feed.Methods[0].NewRequest, NewReply: feed.Methods[0].NewRequest,
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) { return nil, nil }}}
	err := r.RegisterServer(&srv, &recorder{})
	require.ErrorIs(t, err, sdk.ErrConfig)
	assert.Contains(t, err.Error(), "one kind")
}

// An explicit ChannelQueue must bound both count and bytes: ChannelQueue(0, 0) is refused
// rather than taken for the defaults, the largest queue, while no ChannelQueue at all still
// means the defaults.
func TestG6_AChannelQueueOfZeroIsRefused(t *testing.T) {
	var r Registry
	require.ErrorIs(t, r.Subscribe(&feed, &recorder{}, sdk.ChannelQueue(0, 0)), sdk.ErrConfig)
	require.ErrorIs(t, r.Subscribe(&feed, &recorder{}, sdk.ChannelQueue(0, 1000)), sdk.ErrConfig)
	require.NoError(t, r.Subscribe(&feed, &recorder{}))
	n, bytes := r.Subscriber(feed.Name).gate.max, r.Subscriber(feed.Name).gate.maxBytes
	assert.EqualValues(t, DefaultMaxQueued, n)
	assert.EqualValues(t, DefaultMaxQueuedBytes, bytes)
}

// F8: Close waits for work that runs on its caller's goroutine once Enter counted it, as for
// the work Go runs, and Enter refuses once Close began.
func TestF8_CloseWaitsForEnteredChannelWork(t *testing.T) {
	var r Registry
	require.True(t, r.Enter())
	cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Close(cctx), context.DeadlineExceeded, "the entered work holds Close to its deadline")
	assert.False(t, r.Enter(), "nothing enters after Close")
	r.Leave()
	require.NoError(t, r.Close(context.Background()))
}

// F8: a Close whose deadline has passed (the rest of the node's shutdown used it up) reports
// no channel handler as still running when none is: its error names only what did not stop.
func TestF8_CloseAfterItsDeadlineWithNoWorkLeftIsNotAnError(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		var r Registry
		require.True(t, r.Enter())
		r.Leave() // the work ended
		require.NoError(t, r.Close(expired))
	}
}
