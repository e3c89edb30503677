package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// link is this node's stream to one peer: it connects, reconnects after failures with
// backoff, and carries this node's calls to the peer.
type link struct {
	t        *Transport
	peer     sdk.NodeID
	endpoint string
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	st      sdk.PeerState
	changed chan struct{} // closed and replaced at every state change
	out     *sender       // the current session's sender while Ready
	lim     limits        // the current session's payload limits while Ready
	lastErr error
	// pending holds the calls registered while Ready, by call ID. Registering (register) and
	// the session's end (end) each check or change the state in the same critical section as
	// pending, so a reply or the end of the session it was sent on ends every call.
	pending callTable[chan result]
	nextID  uint64
	// finishing is the session's sender once the peer said that it closes the session: it
	// half-closes the stream once pending is empty, and is woken when pending empties.
	finishing *sender
}

// removeLocked deletes call id from pending and returns its channel; l.mu is held.
func (l *link) removeLocked(id uint64) (chan result, bool) {
	ch, ok := l.pending.remove(id)
	if ok && l.pending.len() == 0 && l.finishing != nil {
		l.finishing.signal()
	}
	return ch, ok
}

func newLink(t *Transport, peer sdk.NodeID, endpoint string) *link {
	ctx, cancel := context.WithCancel(t.ctx)
	return &link{
		t: t, peer: peer, endpoint: endpoint, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		st: sdk.PeerStateConnecting, changed: make(chan struct{}),
	}
}

func (l *link) state() sdk.PeerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

func (l *link) setState(st sdk.PeerState, out *sender, lim limits, err error) {
	l.mu.Lock()
	l.setStateLocked(st, out, lim, err)
	l.mu.Unlock()
}

func (l *link) setStateLocked(st sdk.PeerState, out *sender, lim limits, err error) {
	l.st, l.out, l.lim, l.lastErr = st, out, lim, err
	close(l.changed)
	l.changed = make(chan struct{})
}

// end ends a session: the link is no longer Ready and every call registered on the session
// fails, in one critical section, so that no call registers on a session that is over.
func (l *link) end(err error) {
	failure := result{err: fmt.Errorf("%w: connection to node %s lost (%v); the request may or may not have run",
		sdk.ErrOwnerUnavailable, l.peer, err)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setStateLocked(sdk.PeerStateNotConnected, nil, limits{}, err)
	l.pending.each(func(_ uint64, ch chan result) {
		ch <- failure // never blocks: each channel has room for its one result
	})
	l.pending, l.finishing = callTable[chan result]{}, nil
}

// failUnsent fails the calls whose requests, by call ID, the session's end dropped unsent.
func (l *link) failUnsent(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	failure := result{err: fmt.Errorf("%w: the connection to node %s ended before the request was sent (%w)",
		sdk.ErrOwnerUnavailable, l.peer, ErrNotSent)}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if ch, ok := l.removeLocked(id); ok {
			ch <- failure // never blocks: each channel has room for its one result
		}
	}
}

func (l *link) close() {
	l.cancel()
	<-l.done
}

// run keeps a session up until the link closes.
func (l *link) run() {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	for l.ctx.Err() == nil {
		began := time.Now()
		err := l.session()
		l.end(err)
		if time.Since(began) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		if l.ctx.Err() == nil {
			l.setState(sdk.PeerStateConnecting, nil, limits{}, err)
		}
	}
}

// session connects, opens the stream and receives replies until the stream fails.
func (l *link) session() error {
	conn, err := grpc.NewClient(l.endpoint, l.t.dialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(l.ctx,
		nodeHeader, string(l.t.cfg.Node), maxMessageHeader, l.t.maxMessage, maxBatchHeader, maxBatch))
	defer cancel()
	// One attempt, the server's headers included, is bounded: a server that accepts the stream
	// and never answers it would hold the link Connecting for good.
	establish := time.AfterFunc(l.t.cfg.DialTimeout, cancel)
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{StreamName: streamName, ServerStreams: true, ClientStreams: true}, fullMethod, grpc.WaitForReady(true))
	var hdr metadata.MD
	if err == nil {
		// The stream is usable once the server has answered its headers, which carry its
		// limit. A stream the server refuses ends without headers: its status says why.
		hdr, err = stream.Header()
	}
	if !establish.Stop() {
		return fmt.Errorf("no connection and answer within %v", l.t.cfg.DialTimeout)
	}
	if err != nil {
		return err
	}
	if hdr == nil {
		return fmt.Errorf("stream refused: %w", stream.RecvMsg(&wire.Batch{}))
	}
	// Under TLS the server must be the node this link is for, as its certificate says: another
	// node of the same CA at that endpoint is not it.
	if tls, certified, err := peerIdentity(stream.Context()); err != nil {
		return err
	} else if tls && certified != l.peer {
		return fmt.Errorf("the server at %s is not node %s: its certificate names node %q", l.endpoint, l.peer, certified)
	}
	peerMax, err := peerLimit(hdr)
	if err != nil {
		return err
	}
	peerBatch, err := peerBatchLimit(hdr)
	if err != nil {
		return err
	}
	readingEvery, err := peerReadingEvery(hdr)
	if err != nil {
		// A newer or foreign peer's word: its stream is used unwatched rather than refused.
		l.t.log.Warn("a peer's stream is not watched for a reader that stops", "peer", l.peer, "err", err)
	}
	lim := limits{own: l.t.cfg.MaxMessageSize, peer: peerMax}
	out := newSender(l.t.counted(func(b *wire.Batch) error { return stream.SendMsg(b) }), lim.max(), l.t.cfg.Meter, false)
	if h := l.t.hooks.hold; h > 0 {
		out.hold = h
	}
	// Once both of the session's goroutines have ended: the requests still queued were never
	// sent, and their calls may go elsewhere.
	defer func() { l.failUnsent(out.close()) }()
	defer l.t.cfg.Meter.StreamOpened(false)()
	sendErr := make(chan error, 1)
	go func() { sendErr <- out.run(sctx) }()
	l.setState(sdk.PeerStateReady, out, lim, nil)
	watch := newReadWatch(max(l.t.cfg.StallTimeout, 4*readingEvery))
	recvErr := make(chan error, 1)
	go func() {
		b := inBatch{max: peerBatch}
		var answered []answer // reused from batch to batch
		for {
			if err := stream.RecvMsg(&b); err != nil {
				recvErr <- err
				return
			}
			watch.heard()
			for _, env := range b.envelopes() {
				if r := env.Reply; r != nil && r.CallId == closingNotice {
					// The replies before the notice reach their calls first, as they came.
					answered = l.complete(answered, out)
					l.peerClosing(out, r, func() { _ = stream.CloseSend() })
				} else if r != nil {
					answered = append(answered, answer{reply: r})
				}
			}
			answered = l.complete(answered, out)
			b.reset()
		}
	}()
	// A peer that answers probes (readingHeader) is watched while calls are open on the
	// stream: one that has said nothing for the watch's stall, not even that it reads, has
	// stopped reading though its connection and keepalive live, and the session ends, with
	// the calls on it, rather than hold them for good.
	var check <-chan time.Time
	if readingEvery > 0 {
		tick := time.NewTicker(watch.tick())
		defer tick.Stop()
		check = tick.C
	}
	for {
		select {
		case err = <-recvErr:
			cancel()
			<-sendErr
			return err
		case err = <-sendErr:
			cancel()
			<-recvErr
			return err
		case <-check:
			if watch.check(!l.noneOpen(), func() { out.push(queuedProbe()) }) {
				cancel()
				<-sendErr
				<-recvErr
				return fmt.Errorf("node %s has said nothing for %v while calls were open on the stream, not even that it reads it", l.peer, watch.stall)
			}
		}
	}
}

// readWatch tells a peer that has stopped reading a stream, while its connection lives, from
// one that is slow to answer or waits for room: a peer that reads answers a probe (wire.Probe)
// as it reads it, and says that it reads while it waits for room (wire.Reading).
type readWatch struct {
	began time.Time
	stall time.Duration // the longest silence while calls are open
	// last is when anything last came from the peer, as time since began.
	last atomic.Int64
	// Only check touches these, as times since began: quietFrom is when the watch last found
	// no call open, firstProbe and probed when it sent the first and the last probe.
	quietFrom, firstProbe, probed time.Duration
	// stopped is the finding that the peer stopped, reported once it held about a tick.
	stopped confirmed
}

func newReadWatch(stall time.Duration) *readWatch {
	return &readWatch{began: time.Now(), stall: stall}
}

// heard notes that something came from the peer.
func (w *readWatch) heard() { w.last.Store(int64(time.Since(w.began))) }

// check is the watch's periodic look: open says whether calls are open on the stream. The
// silence counts from the later of anything heard from the peer and the last check with no
// call open; what this side sent is no sign, since the connection takes it in whether or not
// the peer's reader reads. While calls are open and the silence passes a quarter of the stall,
// it probes the peer (once a quarter), and it reports the peer as stopped once the silence has
// passed the stall, a quarter of it has passed since the silence's first probe, and both have
// held since a check about a tick before (confirmed): after a pause of this process the first
// check comes at once, before anything the peer sent meanwhile has been read or the peer has
// had time to answer the probe it then gets.
func (w *readWatch) check(open bool, probe func()) (stopped bool) {
	now := time.Since(w.began)
	if !open {
		w.quietFrom, w.stopped = now, confirmed{}
		return false
	}
	from := max(w.quietFrom, time.Duration(w.last.Load()))
	quiet, every := now-from, w.stall/4
	if quiet <= every {
		w.stopped = confirmed{}
		return false
	}
	switch {
	case w.firstProbe <= from:
		probe()
		w.firstProbe, w.probed = now, now
	case now-w.probed >= every:
		probe()
		w.probed = now
	}
	return w.stopped.look(quiet > w.stall && now-w.firstProbe >= every, now, w.tick())
}

// tick is how often the watch checks the peer.
func (w *readWatch) tick() time.Duration { return min(w.stall/4, time.Second) }

// confirmed is a finding of a periodic check that counts only once it has held at two looks
// about a tick apart: after a pause of this process the first look comes at once, before the
// other side has had a chance to act, and a ticker held up by the pause ticks again soon after.
type confirmed struct {
	since time.Duration // when the finding was first made, if found
	found bool
}

// look notes whether the finding holds at now, a reading of one clock, and reports whether it
// has held since a look at least half a tick before (half: the ticks of a ticker drift).
func (c *confirmed) look(holds bool, now, tick time.Duration) bool {
	switch {
	case !holds:
		*c = confirmed{}
		return false
	case !c.found:
		c.since, c.found = now, true
		return false
	}
	return now-c.since >= tick/2
}

// peerClosing takes the peer's notice r that it closes the session whose sender is out: new
// calls fail at once as not sent; what out holds is still sent, and so are the cancels of the
// calls still open, whose answers come on the session. Once none is open and the queue is
// empty, the session's stream is half-closed (closeSend), which tells the peer that nothing
// more comes.
func (l *link) peerClosing(out *sender, r *wire.Reply, closeSend func()) {
	err := wire.DecodeError(r.Error)
	if err == nil {
		err = fmt.Errorf("%w: node %s is closing its connections", sdk.ErrNotServing, l.peer)
	}
	wire.RecycleInboundReply(r)
	l.mu.Lock()
	if l.out != out {
		l.mu.Unlock()
		return
	}
	l.setStateLocked(sdk.PeerStateNotConnected, nil, limits{}, err)
	l.finishing = out
	l.mu.Unlock()
	out.finish(closeSend, l.noneOpen)
}

// noneOpen reports whether no call waits for its answer. Once the link is no longer Ready no
// call registers, so the answer stays true.
func (l *link) noneOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending.len() == 0
}

// result is the end of one call: the peer's reply, or the link's failure. woke is the sender
// that counted the call among the callers its reply woke (sender.wokeCallers), whom the call
// tells once it has the result.
type result struct {
	reply *wire.Reply
	err   error
	woke  *sender
}

// answer is a reply read from the peer and the channel of the call it answers, nil once its
// call has given up on it.
type answer struct {
	reply *wire.Reply
	ch    chan result
}

// complete hands the replies of batch to their calls, taking the link's lock once for them
// all, and returns batch emptied for reuse. out, the session's sender, holds its next batch
// until the callers it wakes have taken their replies.
func (l *link) complete(batch []answer, out *sender) []answer {
	if len(batch) == 0 {
		return batch
	}
	woken := 0
	l.mu.Lock()
	for i := range batch {
		if batch[i].ch, _ = l.removeLocked(batch[i].reply.CallId); batch[i].ch != nil {
			woken++
		}
	}
	l.mu.Unlock()
	out.wokeCallers(woken)
	for _, a := range batch {
		if a.ch != nil {
			a.ch <- result{reply: a.reply, woke: out}
		} else {
			wire.RecycleInboundReply(a.reply) // its call gave up on it: no one else has it, nor its payload
		}
	}
	clear(batch)
	if cap(batch) > keptEnvelopes {
		return nil // a burst's array goes to the collector
	}
	return batch[:0]
}

// forget removes call id from pending and reports whether it was still there.
func (l *link) forget(id uint64) bool {
	l.mu.Lock()
	_, ok := l.removeLocked(id)
	l.mu.Unlock()
	return ok
}

// cancelCall removes call id from pending and, if it was still there, queues its cancel on out
// first: a finishing session half-closes once pending is empty, after what is queued then. It
// reports whether the call was still pending.
func (l *link) cancelCall(out *sender, id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending.get(id); !ok {
		return false
	}
	out.push(queuedCancel(&wire.Cancel{CallId: id}))
	l.removeLocked(id)
	return true
}

// giveUp ends call id, whose caller's context has ended, and gives its channel ch back. A call
// still pending leaves pending and its cancel is queued on out. Otherwise whoever took it from
// pending is about to send its result: the call takes it, so that the sender that counted it
// among the callers a batch woke is told and holds no batch for it, and lets go of its reply,
// which no one else holds.
func (l *link) giveUp(out *sender, id uint64, ch chan result) {
	if !l.cancelCall(out, id) {
		r := <-ch // never long: results are sent right after their calls leave pending
		if r.woke != nil {
			r.woke.tookReply()
		}
		if r.err == nil {
			wire.RecycleInboundReply(r.reply)
		}
	}
	resultChans.Put(ch) // out of pending and empty: no one sends on it any more
}

// register waits until the link is Ready and, in the critical section that sees it Ready,
// refuses a payload of size bytes over the session's limit or enters ch in pending under a
// new call ID. It returns the session's sender and the ID.
func (l *link) register(ctx context.Context, size int, ch chan result) (*sender, uint64, error) {
	for {
		l.mu.Lock()
		switch {
		case l.st == sdk.PeerStateReady:
			if lim := l.lim; size > lim.max() {
				l.mu.Unlock()
				return nil, 0, fmt.Errorf("%w: %d bytes to %s, over the limit of %d (%s accepts %d, %s accepts %d)",
					sdk.ErrMessageTooLarge, size, l.peer, lim.max(), l.t.cfg.Node, lim.own, l.peer, lim.peer)
			}
			l.nextID++
			id, out := l.nextID, l.out
			l.pending.put(id, ch) // a new ID: never in
			l.mu.Unlock()
			return out, id, nil
		case l.st == sdk.PeerStateNotConnected, l.lastErr != nil:
			// Down, or reconnecting after a failure: fail at once rather than hold the caller
			// for a peer that may be gone. Only a link's first connection is waited for.
			lastErr := l.lastErr
			l.mu.Unlock()
			return nil, 0, fmt.Errorf("%w: not connected to node %s: %v (%w)", sdk.ErrOwnerUnavailable, l.peer, lastErr, ErrNotSent)
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-l.ctx.Done():
			return nil, 0, fmt.Errorf("%w: connection to node %s closed (%w)", sdk.ErrOwnerUnavailable, l.peer, ErrNotSent)
		}
	}
}

func (l *link) call(ctx context.Context, req *wire.Request, once bool) (*wire.Reply, error) {
	// Refused here, where it fails this call alone: in a batch it would fail the stream.
	if n := requestTextBytes(req); n > maxTextBytes {
		return nil, fmt.Errorf("%w: the request's names and trace context are %d bytes, over the limit of %d",
			sdk.ErrMessageTooLarge, n, maxTextBytes)
	}
	if err := requestUTF8(req); err != nil {
		return nil, fmt.Errorf("%w: %v", sdk.ErrInvalidArgument, err)
	}
	ch := resultChans.Get().(chan result)
	out, id, err := l.register(ctx, len(req.Payload), ch)
	if err != nil {
		resultChans.Put(ch) // never entered in pending: nothing sends on it
		return nil, err
	}
	if h := l.t.hooks.registered; h != nil {
		h()
	}
	req.CallId = id
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			l.forget(id)
			return nil, context.DeadlineExceeded
		}
		// Both: the receiver measures the timeout on its own clock from when the request
		// arrives, and drops a request that arrives after the absolute deadline.
		req.TimeoutNanos, req.DeadlineUnixNanos = int64(left), dl.UnixNano()
	}
	q := queuedRequest(req)
	q.once = once
	if ok, err := out.pushWait(ctx, q); !ok {
		l.forget(id)
		if err != nil {
			// Not sent, yet not ErrNotSent: the caller's context has ended, so nothing is to
			// be sent elsewhere.
			return nil, fmt.Errorf("the queue of requests to node %s stayed full until the caller's context ended: %w (%w)",
				l.peer, &sdk.CapacityError{Where: sdk.CapacitySendQueue}, err)
		}
		return nil, fmt.Errorf("%w: connection to node %s lost (%w)", sdk.ErrOwnerUnavailable, l.peer, ErrNotSent)
	}
	select {
	case r := <-ch:
		if r.woke != nil {
			r.woke.tookReply()
		}
		// Its one result is taken and it is out of pending: it is empty for good.
		resultChans.Put(ch)
		if r.err == nil && r.reply.Error != nil {
			if err := ended(ctx); err != nil {
				// The receiver's context ends at this call's deadline too, so its failure may
				// be that deadline, arriving before this side's timer fired: the caller sees
				// its own deadline either way.
				return nil, err
			}
		}
		return r.reply, r.err
	case <-ctx.Done():
		l.giveUp(out, id, ch)
		return nil, ctx.Err()
	}
}

// resultChans holds empty result channels of room 1. A call's channel goes back only when no
// one can send on it any more: it is out of pending and its result, if one was sent, taken.
var resultChans = sync.Pool{New: func() any { return make(chan result, 1) }}

// ended is ctx's error, or DeadlineExceeded once its deadline has passed even if its timer
// has not fired yet.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
