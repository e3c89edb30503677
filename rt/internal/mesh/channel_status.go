package mesh

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// sequencer numbers the statuses of one channel: Sequence grows when the status changes (H3).
// A status is computed, numbered and timed under mu, so that of two computed at once the newer
// one also gets the larger Sequence.
type sequencer[T any] struct {
	mu   sync.Mutex
	seq  uint64
	last T
}

// stamp numbers st, which has no Sequence or ObservedAt yet, and returns its Sequence; s.mu is
// held.
func (s *sequencer[T]) stamp(st T) uint64 {
	if s.seq == 0 || !reflect.DeepEqual(s.last, st) {
		s.seq++
	}
	s.last = st
	return s.seq
}

func sequencerOf[T any](m *sync.Map, name string) *sequencer[T] {
	v, ok := m.Load(name)
	if !ok {
		v, _ = m.LoadOrStore(name, &sequencer[T]{})
	}
	return v.(*sequencer[T])
}

// ChannelKind returns the kind of channel name as this node knows it: from its membership in
// the mesh, or from this node's own part in it. ok is false for a channel it knows nothing of.
func (m *Mesh) ChannelKind(name string) (kind sdk.ChannelKind, ok bool) {
	if r := m.cfg.Channels; r.Server(name) != nil {
		return sdk.ChannelClientServer, true
	} else if r.Subscriber(name) != nil {
		return sdk.ChannelFanout, true
	}
	if _, used := m.channels.clients.Load(name); used {
		return sdk.ChannelClientServer, true
	}
	if _, used := m.channels.publishing.Load(name); used {
		return sdk.ChannelFanout, true
	}
	m.channels.mu.RLock()
	defer m.channels.mu.RUnlock()
	if ch := m.channels.byName[name]; ch != nil {
		return ch.kind, true
	}
	return 0, false
}

// topologyState maps the host's runtime state onto a topology's; ok says the host is serving
// (Serving, or Relocating or Relocated, which keep infrastructure and connections), so that
// the topology's own readiness decides.
func (m *Mesh) topologyState() (state sdk.TopologyState, serving bool) {
	s := sdk.RuntimeStatePreparing
	if m.state != nil {
		s = m.state()
	}
	switch s {
	case sdk.RuntimeStatePreparing:
		return sdk.TopologyStateStarting, false
	case sdk.RuntimeStateStopped:
		return sdk.TopologyStateStopped, false
	case sdk.RuntimeStateDraining:
		return sdk.TopologyStateStopping, false
	case sdk.RuntimeStateError:
		return sdk.TopologyStateFailed, false
	}
	return sdk.TopologyStateReady, s == sdk.RuntimeStateServing
}

// peerReason is why a peer in state s is not Ready, or nil.
func peerReason(s sdk.PeerState) *sdk.TopologyReason {
	switch s {
	case sdk.PeerStateReady, sdk.PeerStateNotRequired:
		return nil
	case sdk.PeerStateDraining:
		return reason(sdk.TopologyReasonDraining)
	}
	return reason(sdk.TopologyReasonNoReadyPeer)
}

// ClientServerStatus returns the status of the ClientServer channel name (G6): this node's
// role, each server with its weight and state, and how many are Ready targets. A channel this
// node knows nothing of is sdk.ErrNotFound; a Fanout channel is sdk.ErrInvalidArgument.
func (m *Mesh) ClientServerStatus(name string) (sdk.ClientServerStatus, error) {
	kind, ok := m.ChannelKind(name)
	switch {
	case !ok:
		return sdk.ClientServerStatus{}, fmt.Errorf("%w: node %s knows no channel %q", sdk.ErrNotFound, m.cfg.Node, name)
	case kind != sdk.ChannelClientServer:
		return sdk.ClientServerStatus{}, fmt.Errorf("%w: channel %q is a %s channel; ask for its Fanout status", sdk.ErrInvalidArgument, name, kind)
	}
	seq := sequencerOf[sdk.ClientServerStatus](&m.channels.sequences, "cs/"+name)
	seq.mu.Lock()
	defer seq.mu.Unlock()
	st := sdk.ClientServerStatus{ChannelName: name, LocalRole: sdk.ClientServerRoleClient, Targets: []sdk.ClientServerTargetStatus{}}
	if m.cfg.Channels.Server(name) != nil {
		st.LocalRole = sdk.ClientServerRoleServer
		if _, used := m.channels.clients.Load(name); used {
			st.LocalRole = sdk.ClientServerRoleClientAndServer
		}
	}
	m.channels.mu.RLock()
	if ch := m.channels.byName[name]; ch != nil {
		for id, mb := range ch.servers {
			st.Targets = append(st.Targets, sdk.ClientServerTargetStatus{NodeRid: id, Weight: int(mb.Weight)})
		}
	}
	m.channels.mu.RUnlock()
	if srv := m.cfg.Channels.Server(name); srv != nil && !slices.ContainsFunc(st.Targets, func(t sdk.ClientServerTargetStatus) bool { return t.NodeRid == m.cfg.Node }) {
		st.Targets = append(st.Targets, sdk.ClientServerTargetStatus{NodeRid: m.cfg.Node, Weight: srv.Weight})
	}
	slices.SortFunc(st.Targets, func(a, b sdk.ClientServerTargetStatus) int {
		return strings.Compare(string(a.NodeRid), string(b.NodeRid))
	})
	for i := range st.Targets {
		t := &st.Targets[i]
		t.State = m.serverState(name, t.NodeRid)
		t.UnavailableReason = peerReason(t.State)
		switch {
		case t.State != sdk.PeerStateReady:
		case !chosable(int64(t.Weight)):
			t.UnavailableReason = reason(sdk.TopologyReasonNoReadyTarget) // a member that is never chosen
		default:
			st.ReadyTargetCount++
		}
	}
	var serving bool
	st.State, serving = m.topologyState()
	switch {
	case st.State != sdk.TopologyStateReady:
		st.UnavailableReason = reason(sdk.TopologyReasonRuntimeNotReady)
	case !serving:
		// Relocating or Relocated: the node takes no new application work, calls included.
		st.State, st.UnavailableReason = sdk.TopologyStateDegraded, reason(sdk.TopologyReasonRuntimeNotReady)
	case st.ReadyTargetCount == 0:
		st.State, st.UnavailableReason = sdk.TopologyStateDegraded, reason(sdk.TopologyReasonNoReadyTarget)
	}
	st.IsReady = serving && st.ReadyTargetCount > 0
	st.Sequence = seq.stamp(st)
	st.ObservedAt = time.Now()
	return st, nil
}

// FanoutStatus returns the status of this node's automatic subscriber of the Fanout channel
// name (G7): the channel's publishers and how many are Ready. A manual subscriber's channel is
// sdk.ErrConfig (its connections are its own); a channel this node does not subscribe to is
// sdk.ErrNotFound.
func (m *Mesh) FanoutStatus(name string) (sdk.FanoutStatus, error) {
	sub := m.cfg.Channels.Subscriber(name)
	switch {
	case sub == nil:
		if kind, ok := m.ChannelKind(name); ok && kind != sdk.ChannelFanout {
			return sdk.FanoutStatus{}, fmt.Errorf("%w: channel %q is a %s channel; ask for its ClientServer status", sdk.ErrInvalidArgument, name, kind)
		}
		return sdk.FanoutStatus{}, fmt.Errorf("%w: node %s does not subscribe to channel %q: a Fanout status is an automatic subscriber's", sdk.ErrNotFound, m.cfg.Node, name)
	case sub.Manual:
		return sdk.FanoutStatus{}, fmt.Errorf("%w: node %s subscribes to channel %q manually: its publisher connections are its own, and it has no Fanout status", sdk.ErrConfig, m.cfg.Node, name)
	}
	seq := sequencerOf[sdk.FanoutStatus](&m.channels.sequences, "fanout/"+name)
	seq.mu.Lock()
	defer seq.mu.Unlock()
	st := sdk.FanoutStatus{ChannelName: name, Publishers: []sdk.PeerStatus{}}
	m.channels.mu.RLock()
	if ch := m.channels.byName[name]; ch != nil {
		for id := range ch.publishers {
			st.Publishers = append(st.Publishers, sdk.PeerStatus{NodeRid: id})
		}
	}
	m.channels.mu.RUnlock()
	slices.SortFunc(st.Publishers, func(a, b sdk.PeerStatus) int { return strings.Compare(string(a.NodeRid), string(b.NodeRid)) })
	var state sdk.TopologyState
	var serving bool
	state, serving = m.topologyState()
	notConnected := false
	for i := range st.Publishers {
		p := &st.Publishers[i]
		if p.NodeRid == m.cfg.Node {
			p.State = sdk.PeerStateReady
			if !serving {
				p.State = sdk.PeerStateDraining
			}
		} else {
			p.State = m.peerState(p.NodeRid)
		}
		p.UnavailableReason = peerReason(p.State)
		switch p.State {
		case sdk.PeerStateReady:
			st.ReadyPublisherCount++
		case sdk.PeerStateNotConnected, sdk.PeerStateConnecting:
			notConnected = true
		}
	}
	st.State = state
	switch {
	case state != sdk.TopologyStateReady:
		st.UnavailableReason = reason(sdk.TopologyReasonRuntimeNotReady)
	case !serving:
		st.State, st.UnavailableReason = sdk.TopologyStateDegraded, reason(sdk.TopologyReasonRuntimeNotReady)
	case notConnected:
		// A publisher it must be connected to is not: that counts as a failure (G4).
		st.State, st.UnavailableReason = sdk.TopologyStateDegraded, reason(sdk.TopologyReasonNoReadyPeer)
	}
	st.IsReady = serving && st.State == sdk.TopologyStateReady
	st.Sequence = seq.stamp(st)
	st.ObservedAt = time.Now()
	return st, nil
}

// channelSummaries are the channels of the RouteMesh status (G3): each channel this node
// knows, Ready with the number of its Ready targets — a ClientServer channel's Ready servers,
// a Fanout channel's subscriber nodes that this node's publications reach now.
func (m *Mesh) channelSummaries(serving bool) []sdk.ChannelStatus {
	names := m.channelNames()
	out := make([]sdk.ChannelStatus, 0, len(names))
	var buf [8]serverCandidate
	for _, name := range names {
		kind, _ := m.ChannelKind(name)
		c := sdk.ChannelStatus{ChannelName: name}
		if kind == sdk.ChannelFanout {
			c.ReadyTargetCount = len(m.subscriberNodes(name))
			c.IsReady = serving
		} else {
			c.ReadyTargetCount = len(m.readyServers(name, buf[:0]))
			c.IsReady = serving && c.ReadyTargetCount > 0
		}
		out = append(out, c)
	}
	return out
}
