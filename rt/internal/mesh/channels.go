package mesh

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/channel"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/telemetry"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// Channels (G1, G4, G6, G7, I1; DESIGN §6 Channels). Every node watches the channel
// memberships of the mesh — channels/<name>/{servers,subscribers,publishers}/<rid>, each on
// its node's owner lease — as it watches the nodes. A ClientServer call goes to one Ready
// server of positive weight, this node's own included: by smooth weighted round robin, or, with
// a key, by weighted rendezvous hashing on it. A publication goes to every subscriber node of
// the channel that is Serving and connected, this one included, and returns once each took it
// or refused it; none is sent again later (at most once). A subscriber takes a publisher's
// publications in the order that publisher's stream carried them, and its handler runs them
// in that order.

// channelMembers are the memberships of one channel.
type channelMembers struct {
	kind        sdk.ChannelKind
	servers     map[sdk.NodeID]store.ChannelMember
	subscribers map[sdk.NodeID]store.ChannelMember
	publishers  map[sdk.NodeID]store.ChannelMember
}

func (c *channelMembers) role(r store.ChannelRole) map[sdk.NodeID]store.ChannelMember {
	switch r {
	case store.ChannelServer:
		return c.servers
	case store.ChannelSubscriber:
		return c.subscribers
	}
	return c.publishers
}

func (c *channelMembers) empty() bool {
	return len(c.servers)+len(c.subscribers)+len(c.publishers) == 0
}

// channelTable is the mesh's channel memberships as the watch reported them, and this
// node's own part in each channel.
type channelTable struct {
	mu     sync.RWMutex
	byName map[string]*channelMembers
	// clients are the ClientServer channels this node called; publishing are the Fanout
	// channels it published on, each with its membership write's state.
	clients    sync.Map // name -> struct{}
	publishing sync.Map // name -> *publisherJoin
	pickers    sync.Map // name -> *picker
	sequences  sync.Map // name -> *sequencer of the channel's status
}

// publisherJoin is this node's publisher membership of one channel: written once, off the
// publishing goroutine; a failed write is tried again by a later publication, unless the
// registration has no room for it.
type publisherJoin struct {
	joined atomic.Bool
	// refused: the registration holds as many memberships as it may, and only grows, so no
	// later publication tries again. A refusal because joins under way hold the rest
	// (store.ErrMembershipsJoining) is not this: a join that fails frees its slot.
	refused atomic.Bool
	mu      sync.Mutex
	joining bool
}

// serverLike reports whether node holds a membership that needs connections (G4): a server
// of a ClientServer channel, weight 0 included, or a subscriber of a Fanout channel, which
// publishers send to.
func (c *channelTable) serverLike(node sdk.NodeID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, ch := range c.byName {
		if _, ok := ch.servers[node]; ok {
			return true
		}
		if _, ok := ch.subscribers[node]; ok {
			return true
		}
	}
	return false
}

// applyChannel takes one channel-membership report and returns the nodes it added a
// membership for.
func (m *Mesh) applyChannel(ev store.ChannelEvent) []sdk.NodeID {
	c := &m.channels
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = make(map[string]*channelMembers)
	}
	put := func(mb store.ChannelMember) {
		ch := c.byName[mb.Channel]
		if ch == nil {
			ch = &channelMembers{
				servers:     make(map[sdk.NodeID]store.ChannelMember),
				subscribers: make(map[sdk.NodeID]store.ChannelMember),
				publishers:  make(map[sdk.NodeID]store.ChannelMember),
			}
			c.byName[mb.Channel] = ch
		}
		ch.kind = mb.Kind
		ch.role(mb.Role)[mb.Node] = mb
	}
	switch {
	case ev.Progress:
		return nil
	case ev.Resync:
		c.byName = make(map[string]*channelMembers)
		nodes := make([]sdk.NodeID, 0, len(ev.Snapshot))
		for _, mb := range ev.Snapshot {
			put(mb)
			nodes = append(nodes, mb.Node)
		}
		return nodes
	case ev.Gone:
		if ch := c.byName[ev.Member.Channel]; ch != nil {
			delete(ch.role(ev.Member.Role), ev.Member.Node)
			if ch.empty() {
				delete(c.byName, ev.Member.Channel)
			}
		}
		return nil
	default:
		put(ev.Member)
		return []sdk.NodeID{ev.Member.Node}
	}
}

// joinChannels loads the channel memberships as of the returned revision.
func (m *Mesh) joinChannels(ctx context.Context) (int64, error) {
	members, rev, err := m.store.Channels(ctx)
	if err != nil {
		return 0, err
	}
	m.applyChannel(store.ChannelEvent{Resync: true, Snapshot: members, Revision: rev})
	return rev, nil
}

// watchChannels applies the channel-membership changes after rev until the mesh closes; a
// node that gained a membership that needs a connection is connected to.
func (m *Mesh) watchChannels(rev int64) {
	m.wg.Go(func() {
		_ = m.store.WatchChannels(m.ctx, rev, func(ev store.ChannelEvent) {
			for _, id := range m.applyChannel(ev) {
				m.connectIfNeeded(id)
			}
		})
	})
}

// connectIfNeeded connects to the member id when this node needs a connection to it.
func (m *Mesh) connectIfNeeded(id sdk.NodeID) {
	if id == m.cfg.Node {
		return
	}
	m.mu.RLock()
	n, ok := m.members[id]
	m.mu.RUnlock()
	if ok && m.needsConnection(n) && n.Desc.GetEndpoint() != "" {
		m.tr.Connect(n.ID, n.Desc.GetEndpoint())
	}
}

// localServerLike reports whether this node registered a server or a subscriber.
func (m *Mesh) localServerLike() bool {
	r := m.cfg.Channels
	return r != nil && r.Len() > 0
}

// Memberships returns this node's channel memberships to register with: its servers and its
// subscribers.
func Memberships(r *channel.Registry) []store.ChannelMembership {
	var out []store.ChannelMembership
	for _, s := range r.Servers() {
		out = append(out, store.ChannelMembership{Channel: s.Desc.Name, Role: store.ChannelServer, Kind: sdk.ChannelClientServer,
			Weight: int64(s.Weight), Methods: channel.MethodShapes(s.Desc)})
	}
	for _, s := range r.Subscribers() {
		mb := store.ChannelMembership{Channel: s.Desc.Name, Role: store.ChannelSubscriber, Kind: sdk.ChannelFanout, Methods: channel.MethodShapes(s.Desc)}
		for _, p := range s.Publishers {
			mb.Publishers = append(mb.Publishers, string(p))
		}
		out = append(out, mb)
	}
	return out
}

// checkChannel refuses a call on desc that does not fit its kind and method.
func checkChannel(desc *sdk.ChannelDesc, kind sdk.ChannelKind, method string, msg proto.Message, oneWay bool) (*sdk.MethodDesc, error) {
	if desc == nil {
		return nil, fmt.Errorf("%w: nil channel descriptor", sdk.ErrInvalidArgument)
	}
	if err := sdk.ValidateID("channel name", desc.Name); err != nil {
		return nil, err
	}
	if desc.Kind != kind {
		return nil, fmt.Errorf("%w: channel %s is a %s channel, not %s", sdk.ErrInvalidArgument, desc.Name, desc.Kind, kind)
	}
	md := desc.Method(method)
	if md == nil {
		return nil, fmt.Errorf("%w: channel %s has no method %q", sdk.ErrInvalidArgument, desc.Name, method)
	}
	if md.OneWay != oneWay {
		if oneWay {
			return nil, fmt.Errorf("%w: channel %s: method %s has a reply: call it", sdk.ErrInvalidArgument, desc.Name, method)
		}
		return nil, fmt.Errorf("%w: channel %s: method %s is one-way: send it", sdk.ErrInvalidArgument, desc.Name, method)
	}
	if !oneWay && md.NewReply == nil {
		// The server would run the call, and its reply could not be decoded here.
		return nil, fmt.Errorf("%w: channel %s: method %q has no NewReply", sdk.ErrInvalidArgument, desc.Name, method)
	}
	if msg == nil || !msg.ProtoReflect().IsValid() {
		return nil, fmt.Errorf("%w: channel %s.%s: nil message", sdk.ErrInvalidArgument, desc.Name, method)
	}
	return md, nil
}

// maxChannelAttempts bounds the servers one channel call tries: each attempt after the first
// follows a refusal that ran nothing (a server that stopped serving, a link that never sent).
const maxChannelAttempts = 8

// CallChannel sends a call (oneWay: a one-way message) to one Ready server of the
// ClientServer channel desc and returns its outcome. It goes to another server only when the
// chosen one certainly did not run it: the message never left, or that node is not serving.
func (m *Mesh) CallChannel(ctx context.Context, desc *sdk.ChannelDesc, method string, req proto.Message, oneWay bool, opts sdk.CallOptions) (proto.Message, error) {
	md, err := checkChannel(desc, sdk.ChannelClientServer, method, req, oneWay)
	if err != nil {
		return nil, err
	}
	if _, ok := m.channels.clients.Load(desc.Name); !ok {
		m.channels.clients.Store(desc.Name, struct{}{})
	}
	var payload []byte
	var tried []sdk.NodeID
	for range maxChannelAttempts {
		node, ok := m.pickServer(desc.Name, opts.Key, tried)
		if !ok {
			return nil, m.noServer(desc.Name, tried)
		}
		if node == m.cfg.Node {
			return m.callLocalServer(ctx, desc, md, req)
		}
		if payload == nil {
			if payload, err = proto.Marshal(req); err != nil {
				return nil, fmt.Errorf("%w: channel %s.%s: cannot encode the message: %v", sdk.ErrInvalidArgument, desc.Name, method, err)
			}
		}
		op := wire.Op_OP_CHANNEL_CALL
		if oneWay {
			op = wire.Op_OP_CHANNEL_SEND
		}
		r, err := m.call(ctx, node, channelRequest(ctx, op, desc.Name, method, payload))
		if err != nil {
			if errors.Is(err, transport.ErrNotSent) {
				tried = append(tried, node)
				continue
			}
			return nil, err
		}
		if r.Error != nil {
			err := wire.DecodeError(r.Error)
			if r.Refused && errors.Is(err, sdk.ErrNotServing) {
				tried = append(tried, node)
				continue
			}
			return nil, err
		}
		if r.Dropped && !oneWay {
			// I1: only a one-way message is ever acknowledged as dropped; a peer that says so of
			// a request is broken, and the request may have run there, so it is not sent again.
			return nil, fmt.Errorf("%w: channel %s.%s: node %s answered the request as a dropped one-way message", sdk.ErrInvalidArgument, desc.Name, method, node)
		}
		if oneWay {
			return nil, nil
		}
		reply := md.NewReply()
		if err := decodeNew(r.Payload, reply); err != nil {
			return nil, fmt.Errorf("%w: channel %s.%s: cannot decode the reply: %v", sdk.ErrInvalidArgument, desc.Name, method, err)
		}
		return reply, nil
	}
	return nil, m.noServer(desc.Name, tried)
}

func channelRequest(ctx context.Context, op wire.Op, name, method string, payload []byte) *wire.Request {
	r := &wire.Request{Op: op, Type: name, Method: method, Payload: payload}
	telemetry.Inject(ctx, r)
	return r
}

func (m *Mesh) noServer(name string, tried []sdk.NodeID) error {
	if len(tried) > 0 {
		return fmt.Errorf("%w: channel %s: no Ready server took the call (tried %v)", sdk.ErrNoReadyTarget, name, tried)
	}
	return fmt.Errorf("%w: channel %s has no Ready server of positive weight", sdk.ErrNoReadyTarget, name)
}

// callLocalServer runs a call on this node's server, on the caller's goroutine (a one-way
// message on a goroutine of the mesh's, after it was admitted). It runs the server's own method
// of md's name: one the server does not have is unhandled, and follows the node's policy (I1)
// as a peer's call does.
func (m *Mesh) callLocalServer(ctx context.Context, desc *sdk.ChannelDesc, md *sdk.MethodDesc, req proto.Message) (proto.Message, error) {
	srv := m.cfg.Channels.Server(desc.Name)
	if srv == nil {
		return nil, fmt.Errorf("%w: node %s no longer serves channel %s", sdk.ErrNotServing, m.cfg.Node, desc.Name)
	}
	smd := srv.Desc.Method(md.Name)
	if smd == nil {
		err := fmt.Errorf("%w: channel %s has no method %q on node %s", sdk.ErrUnhandled, desc.Name, md.Name, m.cfg.Node)
		what := func() []any { return []any{"channel", desc.Name, "method", md.Name} }
		switch {
		case !m.unhandledAs(familyOf(md.OneWay), what, "", err):
			return nil, err
		case md.OneWay:
			return nil, nil
		}
		return nil, m.withhold(ctx)
	}
	if smd.OneWay != md.OneWay {
		return nil, fmt.Errorf("%w: channel %s: method %s is called as one-way %v, declared %v", sdk.ErrInvalidArgument, desc.Name, md.Name, md.OneWay, smd.OneWay)
	}
	size := proto.Size(req)
	if err := srv.Admit(md.Name, size); err != nil {
		return nil, err
	}
	if md.OneWay {
		hctx, cancel := m.localOneWayContext(ctx)
		if !m.cfg.Channels.Go(func() {
			defer cancel()
			defer srv.Done(size)
			if _, err := srv.Invoke(hctx, m.log, smd, req); err != nil {
				m.log.Warn("a channel server's one-way handler failed", "channel", desc.Name, "method", md.Name, "err", err)
			}
		}) {
			cancel()
			srv.Done(size)
			return nil, fmt.Errorf("%w: node %s is closing", sdk.ErrNotServing, m.cfg.Node)
		}
		return nil, nil
	}
	// F8: the node's shutdown waits for this handler, within its deadline, as for a peer's call.
	if !m.cfg.Channels.Enter() {
		srv.Done(size)
		return nil, fmt.Errorf("%w: node %s is closing", sdk.ErrNotServing, m.cfg.Node)
	}
	defer m.cfg.Channels.Leave()
	defer srv.Done(size)
	out, err := srv.Invoke(ctx, m.log, smd, req)
	if err == nil && (out == nil || !out.ProtoReflect().IsValid()) {
		out = md.NewReply() // as a remote caller gets it: an empty reply
	}
	return out, err
}

// localOneWayContext is the context of the handler of a one-way message that this node sends
// to its own server (G6): like a peer's message, it carries the sender's trace and nothing
// else of the sender's context. Not its values: the sender's turn, if it sent from one, ended
// once the message was admitted, and a call the handler makes of the sender's Spot would be
// refused as that Spot's call to itself. Not its deadline or cancellation: the message runs on
// after its sender has gone. It ends when the mesh closes.
func (m *Mesh) localOneWayContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(telemetry.WithTraceOf(m.ctx, ctx))
}

// detached is the context of the handler of a peer's one-way message: it keeps the values of
// the peer's request (its trace, its charge) and ends when the mesh closes, not when the
// request is answered.
func (m *Mesh) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(m.ctx, cancel)
	return hctx, func() { stop(); cancel() }
}

// serverCandidate is a server of a channel that can take a call now.
type serverCandidate struct {
	node   sdk.NodeID
	weight int64
}

// chosable reports whether a server of weight w may be chosen: a weight of 0 keeps a member
// that is never chosen, and a peer's record out of range (one written before weights were
// bounded) is never chosen either.
func chosable(w int64) bool { return w > 0 && w <= sdk.MaxChannelWeight }

// readyServers lists the channel's Ready servers of positive weight (G6): this node's own
// while it serves, and each peer's that is Serving and connected. This node's own server is
// one even while its membership record is missing from the watched table (its owner lease
// ended and it registers again), as its ClientServer status shows it.
func (m *Mesh) readyServers(name string, dst []serverCandidate) []serverCandidate {
	own := false
	m.channels.mu.RLock()
	if ch := m.channels.byName[name]; ch != nil {
		for id, mb := range ch.servers {
			own = own || id == m.cfg.Node
			if chosable(mb.Weight) {
				dst = append(dst, serverCandidate{node: id, weight: mb.Weight})
			}
		}
	}
	m.channels.mu.RUnlock()
	if srv := m.cfg.Channels.Server(name); srv != nil && !own && srv.Weight > 0 {
		dst = append(dst, serverCandidate{node: m.cfg.Node, weight: int64(srv.Weight)})
	}
	ready := dst[:0]
	for _, c := range dst {
		if m.serverState(name, c.node) == sdk.PeerStateReady {
			ready = append(ready, c)
		}
	}
	return ready
}

// serverState is the state of node as a server of channel name, as this node sees it.
func (m *Mesh) serverState(name string, node sdk.NodeID) sdk.PeerState {
	if node == m.cfg.Node {
		if m.cfg.Channels.Server(name) != nil && m.state != nil && m.state() == sdk.RuntimeStateServing {
			return sdk.PeerStateReady
		}
		return sdk.PeerStateDraining
	}
	return m.peerState(node)
}

// peerState is the state of the member node as a channel peer: Draining when it does not
// serve, else its link's state.
func (m *Mesh) peerState(node sdk.NodeID) sdk.PeerState {
	m.mu.RLock()
	n, ok := m.members[node]
	m.mu.RUnlock()
	switch {
	case !ok:
		return sdk.PeerStateNotConnected
	case sdk.RuntimeState(n.Desc.GetState()) == sdk.RuntimeStatePreparing:
		return sdk.PeerStateConnecting
	case sdk.RuntimeState(n.Desc.GetState()) != sdk.RuntimeStateServing:
		return sdk.PeerStateDraining
	}
	return m.tr.PeerState(node)
}

// pickServer chooses the server of channel name for one call, leaving out the nodes tried:
// by rendezvous hashing on key when it is set, else by smooth weighted round robin.
func (m *Mesh) pickServer(name, key string, tried []sdk.NodeID) (sdk.NodeID, bool) {
	var buf [8]serverCandidate
	cands := m.readyServers(name, buf[:0])
	cands = slices.DeleteFunc(cands, func(c serverCandidate) bool { return slices.Contains(tried, c.node) })
	switch len(cands) {
	case 0:
		return "", false
	case 1:
		return cands[0].node, true
	}
	if key != "" {
		best, bestScore := cands[0].node, math.Inf(-1)
		for _, c := range cands {
			if s := score(name, key, c.node, uint32(c.weight)); s > bestScore {
				best, bestScore = c.node, s
			}
		}
		return best, true
	}
	p, _ := m.channels.pickers.Load(name)
	if p == nil {
		p, _ = m.channels.pickers.LoadOrStore(name, &picker{current: make(map[sdk.NodeID]int64)})
	}
	return p.(*picker).next(cands), true
}

// picker is smooth weighted round robin over a channel's candidates: every call adds each
// candidate's weight to its running score, the highest score wins and gives back the total.
// Over any run of calls the shares follow the weights exactly, interleaved.
type picker struct {
	mu      sync.Mutex
	current map[sdk.NodeID]int64
}

func (p *picker) next(cands []serverCandidate) sdk.NodeID {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.current) > 4*len(cands)+16 {
		clear(p.current) // servers that left
	}
	var total int64
	best := -1
	for i, c := range cands {
		total += c.weight
		p.current[c.node] += c.weight
		if best < 0 || p.current[c.node] > p.current[cands[best].node] ||
			(p.current[c.node] == p.current[cands[best].node] && c.node < cands[best].node) {
			best = i
		}
	}
	p.current[cands[best].node] -= total
	return cands[best].node
}

// handleChannel runs a peer's call to this node's server of a ClientServer channel.
func (m *Mesh) handleChannel(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
	oneWay := req.Op == wire.Op_OP_CHANNEL_SEND
	if s := m.state(); s != sdk.RuntimeStateServing {
		reply(refusedReply(fmt.Errorf("%w: node %s is %s", sdk.ErrNotServing, m.cfg.Node, s)))
		return
	}
	what := func() []any { return []any{"channel", req.Type, "method", req.Method} }
	var srv *channel.Server
	if m.cfg.Channels != nil {
		srv = m.cfg.Channels.Server(req.Type)
	}
	if srv == nil {
		err := fmt.Errorf("%w: node %s serves no channel %s", sdk.ErrUnhandled, m.cfg.Node, req.Type)
		m.answerUnhandled(ctx, m.unhandledAs(familyOf(oneWay), what, from, err), oneWay, err, reply)
		return
	}
	md := srv.Desc.Method(req.Method)
	if md == nil {
		err := fmt.Errorf("%w: channel %s has no method %q on node %s", sdk.ErrUnhandled, req.Type, req.Method, m.cfg.Node)
		m.answerUnhandled(ctx, m.unhandledAs(familyOf(oneWay), what, from, err), oneWay, err, reply)
		return
	}
	if md.OneWay != oneWay {
		reply(refusedReply(fmt.Errorf("%w: channel %s: method %s is called as one-way %v, declared %v", sdk.ErrInvalidArgument, req.Type, req.Method, oneWay, md.OneWay)))
		return
	}
	msg := md.NewRequest()
	if err := decodeNew(req.Payload, msg); err != nil {
		reply(refusedReply(fmt.Errorf("%w: channel %s.%s: cannot decode the request: %v", sdk.ErrInvalidArgument, req.Type, req.Method, err)))
		return
	}
	size := len(req.Payload)
	if err := srv.Admit(md.Name, size); err != nil {
		reply(refusedReply(err))
		return
	}
	if oneWay {
		// Acknowledged once admitted; its bytes stay charged to the peer's stream until the
		// handler returns.
		ch := capacity.ChargeOf(ctx)
		if ch != nil && !ch.Keep() {
			srv.Done(size)
			reply(refusedReply(errKeptShare(req.Type, md.Name, from, size)))
			return
		}
		hctx, cancel := m.detached(ctx)
		if !m.cfg.Channels.Go(func() {
			defer cancel()
			if _, err := srv.Invoke(hctx, m.log, md, msg); err != nil {
				m.log.Warn("a channel server's one-way handler failed", "channel", req.Type, "method", md.Name, "from", string(from), "err", err)
			}
			srv.Done(size)
			if ch != nil {
				ch.Release()
			}
		}) {
			cancel()
			srv.Done(size)
			if ch != nil {
				ch.Unkeep()
			}
			reply(refusedReply(fmt.Errorf("%w: node %s is closing", sdk.ErrNotServing, m.cfg.Node)))
			return
		}
		reply(&wire.Reply{})
		return
	}
	// Handlers run concurrently, bounded by the server's count and bytes; never on the
	// stream's goroutine.
	if !m.cfg.Channels.Go(func() {
		out, err := srv.Invoke(ctx, m.log, md, msg)
		srv.Done(size)
		reply(wire.MessageReply(out, err))
	}) {
		srv.Done(size)
		reply(refusedReply(fmt.Errorf("%w: node %s is closing", sdk.ErrNotServing, m.cfg.Node)))
	}
}

// PublishChannel delivers msg to the method of every subscriber of the Fanout channel desc: each
// subscriber node that is Serving and connected gets it once, this node's own subscriber on
// the caller's goroutine. It returns once every one took it or refused it; the error names
// those that refused. Under the Throw policy a channel with no subscriber is refused unsent.
func (m *Mesh) PublishChannel(ctx context.Context, desc *sdk.ChannelDesc, method string, msg proto.Message) error {
	md, err := checkChannel(desc, sdk.ChannelFanout, method, msg, true)
	if err != nil {
		return err
	}
	m.joinPublisher(desc)
	targets := m.subscriberNodes(desc.Name)
	if len(targets) == 0 {
		if m.unhandledAction(familyPublish) == sdk.UnhandledDispatchActionThrow && !m.subscribedAnywhere(desc.Name) {
			m.unhandledCount.notSent.Add(1)
			return fmt.Errorf("%w: channel %s has no subscriber; the publication was not sent", sdk.ErrUnhandled, desc.Name)
		}
		return nil
	}
	var payload []byte
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	fail := func(node sdk.NodeID, err error) {
		mu.Lock()
		errs = append(errs, fmt.Errorf("subscriber node %s: %w", node, err))
		mu.Unlock()
	}
	for i, node := range targets {
		if node == m.cfg.Node {
			continue
		}
		if payload == nil {
			if payload, err = proto.Marshal(msg); err != nil {
				return fmt.Errorf("%w: channel %s.%s: cannot encode the message: %v", sdk.ErrInvalidArgument, desc.Name, method, err)
			}
		}
		send := func() {
			r, err := m.tr.Call(ctx, node, channelRequest(ctx, wire.Op_OP_PUBLISH, desc.Name, method, payload))
			if err == nil && r.Error != nil {
				err = wire.DecodeError(r.Error)
			}
			if err != nil {
				fail(node, err)
			}
		}
		if i == len(targets)-1 {
			send() // the last one on the caller's goroutine
			continue
		}
		wg.Go(send)
	}
	if slices.Contains(targets, m.cfg.Node) {
		if err := m.publishLocal(ctx, desc, md, msg); err != nil {
			fail(m.cfg.Node, err)
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("channel %s: %d of %d subscriber nodes did not take the publication: %w", desc.Name, len(errs), len(targets), errors.Join(errs...))
	}
	return nil
}

// publishLocal delivers a publication to this node's own subscriber.
func (m *Mesh) publishLocal(ctx context.Context, desc *sdk.ChannelDesc, md *sdk.MethodDesc, msg proto.Message) error {
	sub := m.cfg.Channels.Subscriber(desc.Name)
	if sub == nil || !sub.Accepts(m.cfg.Node) {
		return nil // it left the list between the listing and now: at most once
	}
	smd := sub.Desc.Method(md.Name)
	if smd == nil {
		err := fmt.Errorf("%w: channel %s has no method %q on node %s", sdk.ErrUnhandled, desc.Name, md.Name, m.cfg.Node)
		what := func() []any { return []any{"channel", desc.Name, "method", md.Name} }
		if m.unhandledAs(familyPublish, what, "", err) {
			return nil
		}
		return err
	}
	return sub.Deliver(m.cfg.Node, smd, msg, proto.Size(msg), nil)
}

// subscribedAnywhere reports whether any node of the mesh subscribes to channel name taking
// this node's publications, Ready or not, as the membership shows.
func (m *Mesh) subscribedAnywhere(name string) bool {
	if sub := m.cfg.Channels.Subscriber(name); sub != nil && sub.Accepts(m.cfg.Node) {
		return true
	}
	m.channels.mu.RLock()
	defer m.channels.mu.RUnlock()
	if ch := m.channels.byName[name]; ch != nil {
		for _, mb := range ch.subscribers {
			if len(mb.Publishers) == 0 || slices.Contains(mb.Publishers, string(m.cfg.Node)) {
				return true
			}
		}
	}
	return false
}

// subscriberNodes lists, in node order, the subscriber nodes of channel name that take this
// node's publications now: this node when it subscribes, and each peer that is Serving and
// connected (a manual subscriber only when it names this node).
func (m *Mesh) subscriberNodes(name string) []sdk.NodeID {
	m.channels.mu.RLock()
	ch := m.channels.byName[name]
	var out []sdk.NodeID
	if ch != nil {
		for id, mb := range ch.subscribers {
			if len(mb.Publishers) > 0 && !slices.Contains(mb.Publishers, string(m.cfg.Node)) {
				continue
			}
			out = append(out, id)
		}
	}
	m.channels.mu.RUnlock()
	if sub := m.cfg.Channels.Subscriber(name); sub != nil && sub.Accepts(m.cfg.Node) && !slices.Contains(out, m.cfg.Node) {
		out = append(out, m.cfg.Node)
	}
	out = slices.DeleteFunc(out, func(id sdk.NodeID) bool {
		return id != m.cfg.Node && m.peerState(id) != sdk.PeerStateReady
	})
	slices.Sort(out)
	return out
}

// joinPublisher makes this node a publisher member of desc's channel, once, off the caller's
// goroutine, so that the channel's subscribers list it among their publishers (G7).
func (m *Mesh) joinPublisher(desc *sdk.ChannelDesc) {
	v, ok := m.channels.publishing.Load(desc.Name)
	if !ok {
		v, _ = m.channels.publishing.LoadOrStore(desc.Name, &publisherJoin{})
	}
	j := v.(*publisherJoin)
	if j.joined.Load() || j.refused.Load() {
		return
	}
	j.mu.Lock()
	if j.joined.Load() || j.refused.Load() || j.joining {
		j.mu.Unlock()
		return
	}
	j.joining = true
	j.mu.Unlock()
	started := m.cfg.Channels.Go(func() {
		// The write ends with the mesh, or as the node's channel work closes before it.
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		defer context.AfterFunc(m.cfg.Channels.Context(), cancel)()
		reg := m.reg.Load()
		err := reg.JoinChannel(ctx, store.ChannelMembership{Channel: desc.Name, Role: store.ChannelPublisher, Kind: sdk.ChannelFanout})
		j.mu.Lock()
		j.joining = false
		// A membership written on a registration that has been replaced since is not this
		// node's any more: the next publication writes it again (rejoinPublishers).
		j.joined.Store(err == nil && m.reg.Load() == reg)
		// Only a bound reached by the memberships held is final; ErrMembershipsJoining is
		// tried again, as any failed write.
		full := errors.Is(err, store.ErrTooManyMemberships)
		if full {
			j.refused.Store(true)
		}
		j.mu.Unlock()
		switch {
		case full:
			m.log.Warn("could not register the node as a publisher of a channel, and does not try again: the node holds the most channel memberships a registration writes",
				"channel", desc.Name, "err", err)
		case err != nil && m.ctx.Err() == nil:
			m.log.Warn("could not register the node as a publisher of a channel; a later publication tries again", "channel", desc.Name, "err", err)
		}
	})
	if !started {
		j.mu.Lock()
		j.joining = false
		j.mu.Unlock()
	}
}

// rejoinPublishers makes every publisher membership of this node be written again, by the
// next publication on each channel: a new registration may lack one that an earlier
// registration's write did not report before its lease ended.
func (m *Mesh) rejoinPublishers() {
	m.channels.publishing.Range(func(_, v any) bool {
		// Under the join's lock: a join that ends now sees the new registration, or is undone.
		j := v.(*publisherJoin)
		j.mu.Lock()
		j.joined.Store(false)
		j.mu.Unlock()
		return true
	})
}

// handlePublish takes a peer's publication for this node's subscriber. It is queued on the
// stream's goroutine, so a publisher's publications keep their order; its bytes stay charged
// to the stream until the handler is done with it.
func (m *Mesh) handlePublish(ctx context.Context, from sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
	what := func() []any { return []any{"channel", req.Type, "method", req.Method} }
	var sub *channel.Subscriber
	if m.cfg.Channels != nil {
		sub = m.cfg.Channels.Subscriber(req.Type)
	}
	if sub == nil || !sub.Accepts(from) {
		err := fmt.Errorf("%w: node %s has no subscriber of channel %s taking node %s's publications", sdk.ErrUnhandled, m.cfg.Node, req.Type, from)
		m.answerUnhandled(ctx, m.unhandledAs(familyPublish, what, from, err), true, err, reply)
		return
	}
	md := sub.Desc.Method(req.Method)
	if md == nil {
		err := fmt.Errorf("%w: channel %s has no method %q on node %s", sdk.ErrUnhandled, req.Type, req.Method, m.cfg.Node)
		m.answerUnhandled(ctx, m.unhandledAs(familyPublish, what, from, err), true, err, reply)
		return
	}
	if s := m.state(); s != sdk.RuntimeStateServing {
		reply(refusedReply(fmt.Errorf("%w: node %s is %s", sdk.ErrNotServing, m.cfg.Node, s)))
		return
	}
	msg := md.NewRequest()
	if err := decodeNew(req.Payload, msg); err != nil {
		reply(refusedReply(fmt.Errorf("%w: channel %s.%s: cannot decode the publication: %v", sdk.ErrInvalidArgument, req.Type, req.Method, err)))
		return
	}
	ch := capacity.ChargeOf(ctx)
	var done func()
	if ch != nil {
		if !ch.Keep() {
			reply(refusedReply(errKeptShare(req.Type, md.Name, from, len(req.Payload))))
			return
		}
		done = ch.Release
	}
	if err := sub.Deliver(from, md, msg, len(req.Payload), done); err != nil {
		if ch != nil {
			ch.Unkeep()
		}
		reply(refusedReply(err))
		return
	}
	reply(&wire.Reply{})
}

// errKeptShare refuses a peer's one-way channel message that its stream cannot keep: that
// peer's messages queued on this node hold half its stream's share of the Core HWM (E6).
func errKeptShare(channel, method string, from sdk.NodeID, size int) error {
	return fmt.Errorf("%w: channel %s.%s: the message of %d bytes from %s was not queued: that peer's messages queued on this node hold half its share of the inbound budget",
		sdk.ErrInboundBudget, channel, method, size, from)
}

// channelNames lists the channels this node knows of, by name: those with a membership in the
// mesh and those it registered or used.
func (m *Mesh) channelNames() []string {
	set := make(map[string]struct{})
	m.channels.mu.RLock()
	for name := range m.channels.byName {
		set[name] = struct{}{}
	}
	m.channels.mu.RUnlock()
	if r := m.cfg.Channels; r != nil {
		for _, s := range r.Servers() {
			set[s.Desc.Name] = struct{}{}
		}
		for _, s := range r.Subscribers() {
			set[s.Desc.Name] = struct{}{}
		}
	}
	m.channels.clients.Range(func(k, _ any) bool { set[k.(string)] = struct{}{}; return true })
	m.channels.publishing.Range(func(k, _ any) bool { set[k.(string)] = struct{}{}; return true })
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	slices.SortFunc(out, strings.Compare)
	return out
}
