package mesh

import (
	"reflect"
	"sync"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// statusTracker numbers the statuses: Sequence grows when the status changes (H3).
type statusTracker struct {
	mu   sync.Mutex
	seq  uint64
	last sdk.RouteMeshStatus
}

// Status returns the RouteMesh status (G3): peers and their states, placement, readiness.
func (m *Mesh) Status(meshName string) sdk.RouteMeshStatus {
	// Computed and numbered under one lock: of two statuses computed at once, the newer one
	// gets the larger Sequence (H3).
	m.status.mu.Lock()
	defer m.status.mu.Unlock()
	state := sdk.RuntimeStatePreparing
	if m.state != nil {
		state = m.state()
	}
	members := m.sortedMembers()

	st := sdk.RouteMeshStatus{MeshName: meshName, Channels: []sdk.ChannelStatus{}, Peers: []sdk.PeerStatus{}}
	degraded := false
	for _, n := range members {
		if n.ID == m.cfg.Node {
			continue
		}
		p := sdk.PeerStatus{NodeRid: n.ID}
		switch {
		case !m.needsConnection(n):
			// Two Object Clients: no connection, not counted, not a failure (G4).
			p.State = sdk.PeerStateNotRequired
		case sdk.RuntimeState(n.Desc.GetState()) == sdk.RuntimeStateDraining:
			p.State, p.UnavailableReason = sdk.PeerStateDraining, reason(sdk.TopologyReasonDraining)
		default:
			p.State = m.tr.PeerState(n.ID)
			if p.State != sdk.PeerStateReady {
				p.UnavailableReason = reason(sdk.TopologyReasonNoReadyPeer)
				degraded = true
			}
		}
		if p.State == sdk.PeerStateReady {
			st.ReadyPeerCount++
		}
		st.Peers = append(st.Peers, p)
	}

	st.Placement = sdk.PlacementStatus{ActiveSpotCount: m.cat.ActiveSpots(), ActiveActorCount: int(m.cat.ActiveActors())}
	switch {
	case !m.cfg.ObjectServer:
		st.Placement.UnavailableReason = reason(sdk.TopologyReasonRuntimeNotReady)
	case state == sdk.RuntimeStateDraining:
		st.Placement.UnavailableReason = reason(sdk.TopologyReasonDraining)
	case state == sdk.RuntimeStateError:
		st.Placement.UnavailableReason = reason(sdk.TopologyReasonInternalFailure)
	case state != sdk.RuntimeStateServing:
		st.Placement.UnavailableReason = reason(sdk.TopologyReasonRuntimeNotReady)
	case !m.ownerLeaseValid():
		// The owner lease ended and the node has not registered again yet: it owns nothing
		// and creates nothing, though it still calls other nodes' objects.
		st.Placement.UnavailableReason = reason(sdk.TopologyReasonLocationUnavailable)
		degraded = true
	case !m.cat.HasRoom():
		st.Placement.UnavailableReason = reason(sdk.TopologyReasonCapacityExceeded)
	default:
		st.Placement.IsAvailable = true
	}

	switch state {
	case sdk.RuntimeStatePreparing:
		st.State = sdk.TopologyStateStarting
	case sdk.RuntimeStateStopped:
		st.State = sdk.TopologyStateStopped
	case sdk.RuntimeStateDraining:
		st.State = sdk.TopologyStateStopping
	case sdk.RuntimeStateError:
		st.State = sdk.TopologyStateFailed
	default:
		st.State = sdk.TopologyStateReady
		if degraded {
			st.State = sdk.TopologyStateDegraded
		}
	}
	// Zero peers alone does not make the mesh unavailable: local traffic still flows (G3).
	st.IsReady = state == sdk.RuntimeStateServing && st.State != sdk.TopologyStateFailed
	st.Channels = m.channelSummaries(state == sdk.RuntimeStateServing)

	prev := m.status.last
	prev.Sequence, prev.ObservedAt = 0, time.Time{}
	if m.status.seq == 0 || !reflect.DeepEqual(prev, st) {
		m.status.seq++
	}
	st.Sequence, st.ObservedAt = m.status.seq, time.Now()
	m.status.last = st
	return st
}

func reason(r sdk.TopologyReason) *sdk.TopologyReason { return &r }

// ownerLeaseValid reports whether the node's current owner lease is certainly valid.
func (m *Mesh) ownerLeaseValid() bool {
	reg := m.reg.Load()
	return reg != nil && reg.Guard().Valid()
}
