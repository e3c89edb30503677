package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/wire"
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
	out     *sender       // the current stream's sender while Ready
	lastErr error
	pending map[uint64]chan result
	nextID  uint64
}

func newLink(t *Transport, peer sdk.NodeID, endpoint string) *link {
	ctx, cancel := context.WithCancel(t.ctx)
	return &link{
		t: t, peer: peer, endpoint: endpoint, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		st: sdk.PeerStateConnecting, changed: make(chan struct{}), pending: make(map[uint64]chan result),
	}
}

func (l *link) state() sdk.PeerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

func (l *link) setState(st sdk.PeerState, out *sender, err error) {
	l.mu.Lock()
	l.st, l.out, l.lastErr = st, out, err
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
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
		l.setState(sdk.PeerStateNotConnected, nil, err)
		l.failPending(fmt.Errorf("%w: connection to node %s lost (%v); the request may or may not have run",
			sdk.ErrOwnerUnavailable, l.peer, err))
		if time.Since(began) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		if l.ctx.Err() == nil {
			l.setState(sdk.PeerStateConnecting, nil, err)
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
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(l.ctx, nodeHeader, string(l.t.cfg.Node)))
	defer cancel()
	establish := time.AfterFunc(l.t.cfg.DialTimeout, cancel)
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{StreamName: streamName, ServerStreams: true, ClientStreams: true}, fullMethod, grpc.WaitForReady(true))
	if !establish.Stop() {
		return fmt.Errorf("no connection within %v", l.t.cfg.DialTimeout)
	}
	if err != nil {
		return err
	}
	out := newSender(l.t.counted(func(b *wire.Batch) error { return stream.SendMsg(b) }), l.t.cfg.MaxMessageSize)
	sendErr := make(chan error, 1)
	go func() { sendErr <- out.run(sctx) }()
	// The stream is usable once the server has answered its headers: a refused handshake or a
	// stream the server rejects fails here instead.
	if _, err := stream.Header(); err != nil {
		cancel()
		<-sendErr
		return err
	}
	l.setState(sdk.PeerStateReady, out, nil)
	recvErr := make(chan error, 1)
	go func() {
		for {
			var b wire.Batch
			if err := stream.RecvMsg(&b); err != nil {
				recvErr <- err
				return
			}
			for _, env := range b.Envelopes {
				if r := env.GetReply(); r != nil {
					l.complete(r)
				}
			}
		}
	}()
	select {
	case err = <-recvErr:
		cancel()
		<-sendErr
	case err = <-sendErr:
		cancel()
		<-recvErr
	}
	return err
}

// result is the end of one call: the peer's reply, or the link's failure.
type result struct {
	reply *wire.Reply
	err   error
}

func (l *link) complete(r *wire.Reply) {
	l.mu.Lock()
	ch, ok := l.pending[r.CallId]
	delete(l.pending, r.CallId)
	l.mu.Unlock()
	if ok {
		ch <- result{reply: r}
	}
}

func (l *link) failPending(err error) {
	l.mu.Lock()
	pending := l.pending
	l.pending = make(map[uint64]chan result)
	l.mu.Unlock()
	for _, ch := range pending {
		ch <- result{err: err}
	}
}

// sender waits until the link is Ready and returns its stream's sender.
func (l *link) sender(ctx context.Context) (*sender, error) {
	for {
		l.mu.Lock()
		st, out, lastErr, changed := l.st, l.out, l.lastErr, l.changed
		l.mu.Unlock()
		switch {
		case st == sdk.PeerStateReady:
			return out, nil
		case st == sdk.PeerStateNotConnected, lastErr != nil:
			// Down, or reconnecting after a failure: fail at once rather than hold the caller
			// for a peer that may be gone. Only a link's first connection is waited for.
			return nil, fmt.Errorf("%w: not connected to node %s: %v", sdk.ErrOwnerUnavailable, l.peer, lastErr)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.ctx.Done():
			return nil, fmt.Errorf("%w: connection to node %s closed", sdk.ErrOwnerUnavailable, l.peer)
		}
	}
}

func (l *link) call(ctx context.Context, req *wire.Request) (*wire.Reply, error) {
	out, err := l.sender(ctx)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, context.DeadlineExceeded
		}
		req.TimeoutNanos = int64(left)
	}
	ch := make(chan result, 1)
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	l.pending[id] = ch
	l.mu.Unlock()
	req.CallId = id
	out.push(&wire.Envelope{Body: &wire.Envelope_Request{Request: req}})
	select {
	case r := <-ch:
		return r.reply, r.err
	case <-ctx.Done():
		l.mu.Lock()
		_, stillPending := l.pending[id]
		delete(l.pending, id)
		l.mu.Unlock()
		if stillPending {
			out.push(&wire.Envelope{Body: &wire.Envelope_Cancel{Cancel: &wire.Cancel{CallId: id}}})
		}
		return nil, ctx.Err()
	}
}
