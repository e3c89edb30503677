package transport

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// The replies of one batch reach their calls in one pass over the pending calls: each waiting
// call gets its own reply once; a reply for a call that is no longer pending (it gave up, or a
// peer answered it twice) reaches no one; the call not answered stays pending; and the batch
// comes back emptied for reuse. The session's sender counts the callers woken, and each of
// them learns which sender to tell once it has its reply.
func TestABatchsRepliesReachTheirCallsOnce(t *testing.T) {
	l := &link{}
	calls := map[uint64]chan result{}
	for id := uint64(1); id <= 3; id++ {
		calls[id] = make(chan result, 2) // room for a second result, were one wrongly sent
		require.True(t, l.pending.put(id, calls[id]))
	}
	batch := []answer{
		{reply: &wire.Reply{CallId: 2}},
		{reply: &wire.Reply{CallId: 9}}, // no such call
		{reply: &wire.Reply{CallId: 1}},
		{reply: &wire.Reply{CallId: 2}}, // answered twice
	}
	out := newSender(nil, 1<<20, nil, false)
	rest := l.complete(batch, out)
	assert.Empty(t, rest)
	assert.Equal(t, cap(batch), cap(rest), "the batch's array is kept for the next batch")
	assert.Equal(t, make([]answer, len(batch)), batch, "the batch holds no reply once completed")
	for _, id := range []uint64{1, 2} {
		require.Len(t, calls[id], 1, "call %d gets one result", id)
		r := <-calls[id]
		require.NoError(t, r.err)
		assert.Equal(t, id, r.reply.GetCallId(), "call %d gets its own reply", id)
		assert.Same(t, out, r.woke, "call %d tells the sender that counted it", id)
	}
	assert.Equal(t, int64(2), out.woken.Load(), "two callers were woken")
	assert.Empty(t, calls[3], "the call not answered gets nothing")
	assert.Equal(t, 1, l.pending.len(), "the call not answered is still pending")
	assert.Empty(t, l.complete(nil, out))
	assert.Equal(t, int64(2), out.woken.Load())
}

// TestACallThatGivesUpAsItsReplyComesTellsTheSender: a caller whose context ends just as a
// batch brings its reply finds its call no longer pending; it takes the reply all the same, so
// the sender that counted it among the callers the batch woke is told, and queues no cancel
// for a call already answered. A call that gives up while still pending leaves pending and
// queues its cancel, and tells no sender. A call given up after the session's end failed it
// takes the failure, which carries no reply to recycle.
func TestACallThatGivesUpAsItsReplyComesTellsTheSender(t *testing.T) {
	l := &link{}
	out := newSender(nil, 1<<20, nil, false)
	answered, waiting := make(chan result, 1), make(chan result, 1)
	require.True(t, l.pending.put(1, answered))
	require.True(t, l.pending.put(2, waiting))
	l.complete([]answer{{reply: &wire.Reply{CallId: 1}}}, out)
	require.Equal(t, int64(1), out.woken.Load())

	l.giveUp(out, 1, answered)
	assert.Zero(t, out.woken.Load(), "the caller told the sender that counted it")
	assert.Empty(t, answered, "its reply was taken")
	assert.Empty(t, out.queue, "no cancel for a call already answered")

	out.wokeCallers(1) // another caller of the same batch, still to take its reply
	l.giveUp(out, 2, waiting)
	assert.Zero(t, l.pending.len())
	require.Len(t, out.queue, 1)
	assert.Equal(t, uint64(2), out.queue[0].cancel.GetCallId(), "the pending call's cancel is queued")
	assert.Equal(t, int64(1), out.woken.Load(), "a call no batch answered tells no sender")

	failed := make(chan result, 1) // a call the session's end dropped unsent: a failure, no reply
	require.True(t, l.pending.put(3, failed))
	l.failUnsent([]uint64{3})
	l.giveUp(out, 3, failed)
	assert.Empty(t, failed, "its failure was taken")
	assert.Len(t, out.queue, 1, "no cancel for a call that already failed")
	assert.Equal(t, int64(1), out.woken.Load(), "a failure tells no sender")
}

// TestACallWhileAPeersLinkIsReplacedGoesToTheNewLink: once Connect has a peer's new endpoint,
// a call made while the old link closes waits for the new link and is answered there, instead
// of failing as never sent on the link being closed.
func TestACallWhileAPeersLinkIsReplacedGoesToTheNewLink(t *testing.T) {
	mk := func(node string) *Transport {
		tr, err := New(Config{Node: sdk.NodeID(node), Logger: slog.New(slog.DiscardHandler), DialTimeout: 2 * time.Second}, echoHandler{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	first, second, a := mk("b"), mk("b"), mk("a")
	a.Connect("b", first.Addr())
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := a.Call(ctx, "b", &wire.Request{Op: wire.Op_OP_CALL, Payload: []byte("x")})
		if err == nil && string(r.Payload) != "x" {
			err = fmt.Errorf("answered %q", r.Payload)
		}
		return err
	}
	require.NoError(t, call())
	var during error
	a.hooks.replacing = func() { during = call() }
	a.Connect("b", second.Addr())
	require.NoError(t, during, "a call made while the old link closes")
	l, ok := a.link("b")
	require.True(t, ok)
	assert.Equal(t, second.Addr(), l.endpoint)
	require.NoError(t, call())
}

// A server's readingHeader says how often its stream says that it reads: a caller reads it as
// a duration, none as a server that never says so, and one that is not a single positive count
// of nanoseconds of an hour at most as none too, with an error that names the header.
func TestAPeersReadingHeaderIsReadOrTakenForNone(t *testing.T) {
	every, err := peerReadingEvery(metadata.Pairs(readingHeader, "250000000"))
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, every)
	every, err = peerReadingEvery(metadata.MD{})
	require.NoError(t, err)
	assert.Zero(t, every, "a server that does not say so")
	for _, bad := range [][]string{{"0"}, {"-5"}, {"soon"}, {"7200000000000"}, {"1", "2"}} {
		md := metadata.MD{}
		md.Append(readingHeader, bad...)
		every, err := peerReadingEvery(md)
		assert.ErrorContains(t, err, readingHeader, "%q", bad)
		assert.Zero(t, every, "%q: the stream is not watched", bad)
	}
}

// A read watch gives up on a peer only while calls are open, after probing it, once its
// silence has passed the stall, a quarter of the stall has passed since the silence's first
// probe, and two checks in a row found both: a pause of this process that jumps the silence
// past the stall before any probe went does not end the stream at once. Anything heard from
// the peer ends the silence.
func TestAReadWatchProbesASilentPeerBeforeItGivesUpOnIt(t *testing.T) {
	w := newReadWatch(4 * time.Second) // probes after 1 s of silence
	probes := 0
	probe := func() { probes++ }
	pass := func(d time.Duration) { w.began = w.began.Add(-d) } // time passes for the watch

	pass(time.Minute)
	require.False(t, w.check(false, probe), "no call open: never")
	pass(500 * time.Millisecond)
	require.False(t, w.check(true, probe), "silent for less than a quarter of the stall")
	require.Zero(t, probes)

	pass(10 * time.Second) // this process paused
	require.False(t, w.check(true, probe), "the first probe of the silence has just gone")
	require.Equal(t, 1, probes)
	pass(500 * time.Millisecond)
	require.False(t, w.check(true, probe), "the peer has had less than a quarter of the stall to answer")
	pass(600 * time.Millisecond)
	require.False(t, w.check(true, probe), "the first check to find it so")
	require.Equal(t, 2, probes, "probed again a quarter of the stall after the first")
	w.heard()
	require.False(t, w.check(true, probe), "the peer answered")

	pass(1500 * time.Millisecond)
	require.False(t, w.check(true, probe))
	require.Equal(t, 3, probes, "a new silence, a new probe")
	pass(4 * time.Second)
	require.False(t, w.check(true, probe))
	pass(500 * time.Millisecond)
	assert.True(t, w.check(true, probe), "silent past the stall at two checks about a tick apart, probed long enough ago")

	w.heard()
	pass(1500 * time.Millisecond)
	require.False(t, w.check(true, probe), "a new silence, probed")
	pass(10 * time.Second) // this process paused, the probe out
	require.False(t, w.check(true, probe), "the first check after the pause")
	pass(time.Millisecond) // the ticker held up by the pause ticks again at once
	require.False(t, w.check(true, probe), "a check a millisecond later gives the peer no time to answer")
	pass(time.Second)
	assert.True(t, w.check(true, probe), "a tick later, still silent")
}
