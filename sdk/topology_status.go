package sdk

import (
	"fmt"
	"time"
)

// TopologyState is the availability of one topology, named by its MeshName or ChannelName (G1).
// It is separate from the host's RuntimeState: a host can be Serving while one of its topologies
// is Degraded.
type TopologyState uint8

const (
	// TopologyStateStarting: the topology is being set up (G1).
	TopologyStateStarting TopologyState = 0
	// TopologyStateReady: the topology can carry application traffic (G1).
	TopologyStateReady TopologyState = 1
	// TopologyStateDegraded: the topology works only in part, for instance it has no ready peer or
	// target (G1).
	TopologyStateDegraded TopologyState = 2
	// TopologyStateStopping: the topology is being shut down (G1).
	TopologyStateStopping TopologyState = 3
	// TopologyStateStopped: the topology has been shut down (G1).
	TopologyStateStopped TopologyState = 4
	// TopologyStateFailed: the topology failed; details are in the logs and traces (G1).
	TopologyStateFailed TopologyState = 5
)

var topologyStateNames = [...]string{"Starting", "Ready", "Degraded", "Stopping", "Stopped", "Failed"}

// String returns the state's name as the seed spells it, or TopologyState(n) (G1).
func (s TopologyState) String() string {
	if int(s) < len(topologyStateNames) {
		return topologyStateNames[s]
	}
	return fmt.Sprintf("TopologyState(%d)", uint8(s))
}

// TopologyReason is the closed set of reasons a topology, peer, target or placement is
// unavailable. It tells the application whether to check its configuration or observe again
// later; transport and Location Store details go to logs and traces, never here (G1).
type TopologyReason uint8

const (
	// TopologyReasonRuntimeNotReady: the host is not Serving (G1).
	TopologyReasonRuntimeNotReady TopologyReason = 0
	// TopologyReasonNoReadyPeer: no required peer is Ready (G1).
	TopologyReasonNoReadyPeer TopologyReason = 1
	// TopologyReasonNoReadyTarget: no server of the channel is a ready target (G1, G6).
	TopologyReasonNoReadyTarget TopologyReason = 2
	// TopologyReasonLocationUnavailable: the Location Store cannot be used (G1).
	TopologyReasonLocationUnavailable TopologyReason = 3
	// TopologyReasonCapacityExceeded: capacity or activation concurrency has no room (G1, G5).
	TopologyReasonCapacityExceeded TopologyReason = 4
	// TopologyReasonDraining: the node or peer is draining (G1).
	TopologyReasonDraining TopologyReason = 5
	// TopologyReasonInternalFailure: an internal failure; details are in the logs (G1).
	TopologyReasonInternalFailure TopologyReason = 6
)

var topologyReasonNames = [...]string{
	"RuntimeNotReady", "NoReadyPeer", "NoReadyTarget", "LocationUnavailable", "CapacityExceeded",
	"Draining", "InternalFailure",
}

// String returns the reason's name as the seed spells it, or TopologyReason(n) (G1).
func (r TopologyReason) String() string {
	if int(r) < len(topologyReasonNames) {
		return topologyReasonNames[r]
	}
	return fmt.Sprintf("TopologyReason(%d)", uint8(r))
}

// PeerState is the state of the connection to one peer node, publisher or server (G2).
type PeerState uint8

const (
	// PeerStateConnecting: the connection is being set up (G2).
	PeerStateConnecting PeerState = 0
	// PeerStateReady: the connection is ready (G2).
	PeerStateReady PeerState = 1
	// PeerStateDraining: the peer is draining (G2).
	PeerStateDraining PeerState = 2
	// PeerStateNotConnected: a connection is required but there is no ready one; it counts as a
	// failure (G4).
	PeerStateNotConnected PeerState = 3
	// PeerStateNotRequired: no connection is needed, as between two Object Clients of which
	// neither has a Channel Server membership. Not counted as ready, not probed, not reconnected,
	// not counted as a failure, and it never degrades the topology (G4).
	PeerStateNotRequired PeerState = 4
)

var peerStateNames = [...]string{"Connecting", "Ready", "Draining", "NotConnected", "NotRequired"}

// String returns the state's name as the seed spells it, or PeerState(n) (G2).
func (s PeerState) String() string {
	if int(s) < len(peerStateNames) {
		return peerStateNames[s]
	}
	return fmt.Sprintf("PeerState(%d)", uint8(s))
}

// PeerStatus is the state of one peer (G2). Endpoints and connection generations are internal
// and never in public status (F13, G2).
type PeerStatus struct {
	// NodeRid is the peer's transport identity (RID); there is no separate operator identity (G2).
	NodeRid NodeID
	// State is the connection's state (G2, G4).
	State PeerState
	// UnavailableReason tells why the peer is not Ready, or is nil (G2).
	UnavailableReason *TopologyReason
}

// ChannelStatus is the readiness of one channel of a RouteMesh (G3).
type ChannelStatus struct {
	ChannelName string
	// IsReady: the channel can carry application traffic (G3).
	IsReady bool
	// ReadyTargetCount is the number of ready targets of the channel (G3).
	ReadyTargetCount int
}

// PlacementStatus says whether this node can take new objects (G3, G5). Reservations, current
// activation concurrency, activation barriers and per-type counts are internal (G5).
type PlacementStatus struct {
	// IsAvailable: this node is an Object Server and can take new Actors and Spots, with room in
	// both capacity and activation concurrency (G5).
	IsAvailable bool
	// ActiveActorCount and ActiveSpotCount count only the objects active in this process (G3).
	ActiveActorCount int
	ActiveSpotCount  int
	// UnavailableReason tells why placement is not available, or is nil (G3).
	UnavailableReason *TopologyReason
}

// RouteMeshStatus is a complete, immutable snapshot of one RouteMesh: its peer connections,
// channel readiness and placement (G3). Its slices are shared among observers and must not be
// modified (H1). Descriptor revisions, generations and endpoints are never in it (F13).
type RouteMeshStatus struct {
	MeshName string
	// State is the mesh's availability (G1).
	State TopologyState
	// IsReady: the host is Serving and the mesh can carry application traffic. Zero peers alone
	// does not make a mesh unavailable, since its local channels still work (G3).
	IsReady bool
	// ReadyPeerCount is the number of Ready remote mesh nodes; NotRequired peers are not counted
	// (G3, G4).
	ReadyPeerCount int
	// Channels is the readiness of each of the mesh's channels (G3).
	Channels []ChannelStatus
	// Peers lists the mesh's remote nodes, NotRequired ones included (G3, G4).
	Peers []PeerStatus
	// Placement says whether this node can take new objects (G5).
	Placement PlacementStatus
	// Sequence orders the statuses of this runtime instance (H3).
	Sequence uint64
	// ObservedAt is when the snapshot was taken (G3).
	ObservedAt time.Time
}

// ClientServerRole is this process's role on a ClientServer channel (G6).
type ClientServerRole uint8

const (
	// ClientServerRoleClient: this process only calls the channel's servers (G6).
	ClientServerRoleClient ClientServerRole = 1
	// ClientServerRoleServer: this process only serves the channel (G6).
	ClientServerRoleServer ClientServerRole = 2
	// ClientServerRoleClientAndServer: this process calls and serves; its own server is a normal
	// target under the same weight rules (G6).
	ClientServerRoleClientAndServer ClientServerRole = 3
)

var clientServerRoleNames = [...]string{"", "Client", "Server", "ClientAndServer"}

// String returns the role's name as the seed spells it, or ClientServerRole(n); 0 is not a
// role (G6).
func (r ClientServerRole) String() string {
	if r != 0 && int(r) < len(clientServerRoleNames) {
		return clientServerRoleNames[r]
	}
	return fmt.Sprintf("ClientServerRole(%d)", uint8(r))
}

// ClientServerTargetStatus is the state of one server of a ClientServer channel, local or remote
// (G6). It is read-only diagnostics: targets cannot be selected or re-weighted through it.
type ClientServerTargetStatus struct {
	// NodeRid is the server's transport identity (G2).
	NodeRid NodeID
	// Weight is the server's configured weight; only a positive weight makes it a ready target (G6).
	Weight int
	// State is the connection's state; a server in this process is Ready while it serves (G6).
	State PeerState
	// UnavailableReason tells why the server is not Ready, or is nil (G6).
	UnavailableReason *TopologyReason
}

// ClientServerStatus is a complete, immutable snapshot of one ClientServer channel (G6). Its
// slices are shared among observers and must not be modified (H1). Endpoints and discovery
// revisions are never in it (F13, G6).
type ClientServerStatus struct {
	ChannelName string
	// LocalRole is this process's role on the channel (G6).
	LocalRole ClientServerRole
	// State is the channel's availability (G1).
	State TopologyState
	// IsReady: the host is Serving and the channel can carry calls (G6).
	IsReady bool
	// ReadyTargetCount counts the Ready servers, local or remote, that have a positive weight and
	// are not draining (G6).
	ReadyTargetCount int
	// Targets lists the channel's servers, for diagnostics only (G6).
	Targets []ClientServerTargetStatus
	// Sequence orders the statuses of this runtime instance (H3).
	Sequence uint64
	// ObservedAt is when the snapshot was taken (G6).
	ObservedAt time.Time
}

// FanoutStatus is a complete, immutable snapshot of the publisher connections an automatic
// subscriber of one Fanout channel can use (G7). Asking it of a manual subscriber's channel is an
// ErrConfig error. Publisher endpoints, discovery sources and generations are internal (F13, G7).
type FanoutStatus struct {
	ChannelName string
	// State is the channel's availability (G1).
	State TopologyState
	// IsReady: the host is Serving and the channel can deliver publications (G7).
	IsReady bool
	// ReadyPublisherCount is the number of Ready publishers (G7).
	ReadyPublisherCount int
	// Publishers lists the channel's publishers; the slice is shared and must not be modified (G7, H1).
	Publishers []PeerStatus
	// Sequence orders the statuses of this runtime instance (H3).
	Sequence uint64
	// ObservedAt is when the snapshot was taken (G7).
	ObservedAt time.Time
}
