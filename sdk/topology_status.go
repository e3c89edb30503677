package sdk

import (
	"fmt"
	"time"
)

// TopologyState is the availability of one topology, named by its MeshName or ChannelName.
// It is separate from the host's RuntimeState: a host can be Serving while one of its topologies
// is Degraded.
type TopologyState uint8

const (
	// TopologyStateStarting: the topology is being set up.
	TopologyStateStarting TopologyState = 0
	// TopologyStateReady: the topology can carry application traffic.
	TopologyStateReady TopologyState = 1
	// TopologyStateDegraded: the topology works only in part, for instance it has no ready peer or
	// target.
	TopologyStateDegraded TopologyState = 2
	// TopologyStateStopping: the topology is being shut down.
	TopologyStateStopping TopologyState = 3
	// TopologyStateStopped: the topology has been shut down.
	TopologyStateStopped TopologyState = 4
	// TopologyStateFailed: the topology failed; details are in the logs and traces.
	TopologyStateFailed TopologyState = 5
)

var topologyStateNames = [...]string{"Starting", "Ready", "Degraded", "Stopping", "Stopped", "Failed"}

// String returns the state's name as the seed spells it, or TopologyState(n).
func (s TopologyState) String() string {
	if int(s) < len(topologyStateNames) {
		return topologyStateNames[s]
	}
	return fmt.Sprintf("TopologyState(%d)", uint8(s))
}

// TopologyReason is the closed set of reasons a topology, peer, target or placement is
// unavailable. It tells the application whether to check its configuration or observe again
// later; transport and Location Store details go to logs and traces, never here.
type TopologyReason uint8

const (
	// TopologyReasonRuntimeNotReady: the host is not Serving.
	TopologyReasonRuntimeNotReady TopologyReason = 0
	// TopologyReasonNoReadyPeer: no required peer is Ready.
	TopologyReasonNoReadyPeer TopologyReason = 1
	// TopologyReasonNoReadyTarget: no server of the channel is a ready target.
	TopologyReasonNoReadyTarget TopologyReason = 2
	// TopologyReasonLocationUnavailable: the Location Store cannot be used.
	TopologyReasonLocationUnavailable TopologyReason = 3
	// TopologyReasonCapacityExceeded: capacity or activation concurrency has no room.
	TopologyReasonCapacityExceeded TopologyReason = 4
	// TopologyReasonDraining: the node or peer is draining.
	TopologyReasonDraining TopologyReason = 5
	// TopologyReasonInternalFailure: an internal failure; details are in the logs.
	TopologyReasonInternalFailure TopologyReason = 6
)

var topologyReasonNames = [...]string{
	"RuntimeNotReady", "NoReadyPeer", "NoReadyTarget", "LocationUnavailable", "CapacityExceeded",
	"Draining", "InternalFailure",
}

// String returns the reason's name as the seed spells it, or TopologyReason(n).
func (r TopologyReason) String() string {
	if int(r) < len(topologyReasonNames) {
		return topologyReasonNames[r]
	}
	return fmt.Sprintf("TopologyReason(%d)", uint8(r))
}

// PeerState is the state of the connection to one peer node, publisher or server.
type PeerState uint8

const (
	// PeerStateConnecting: the connection is being set up.
	PeerStateConnecting PeerState = 0
	// PeerStateReady: the connection is ready.
	PeerStateReady PeerState = 1
	// PeerStateDraining: the peer is draining.
	PeerStateDraining PeerState = 2
	// PeerStateNotConnected: a connection is required but there is no ready one; it counts as a
	// failure.
	PeerStateNotConnected PeerState = 3
	// PeerStateNotRequired: no connection is needed, as between two Object Clients of which
	// neither has a Channel Server membership. Not counted as ready, not probed, not reconnected,
	// not counted as a failure, and it never degrades the topology.
	PeerStateNotRequired PeerState = 4
)

var peerStateNames = [...]string{"Connecting", "Ready", "Draining", "NotConnected", "NotRequired"}

// String returns the state's name as the seed spells it, or PeerState(n).
func (s PeerState) String() string {
	if int(s) < len(peerStateNames) {
		return peerStateNames[s]
	}
	return fmt.Sprintf("PeerState(%d)", uint8(s))
}

// PeerStatus is the state of one peer. Endpoints and connection generations are internal
// and never in public status.
type PeerStatus struct {
	// NodeRid is the peer's transport identity (RID); there is no separate operator identity.
	NodeRid NodeID
	// State is the connection's state.
	State PeerState
	// UnavailableReason tells why the peer is not Ready, or is nil.
	UnavailableReason *TopologyReason
}

// ChannelStatus is the readiness of one channel of a RouteMesh.
type ChannelStatus struct {
	ChannelName string
	// IsReady: the channel can carry application traffic.
	IsReady bool
	// ReadyTargetCount is the number of ready targets of the channel.
	ReadyTargetCount int
}

// PlacementStatus says whether this node can take new objects. Reservations, current
// activation concurrency, activation barriers and per-type counts are internal.
type PlacementStatus struct {
	// IsAvailable: this node is an Object Server and can take new Actors and Spots, with room in
	// both capacity and activation concurrency.
	IsAvailable bool
	// ActiveActorCount and ActiveSpotCount count only the objects active in this process.
	ActiveActorCount int
	ActiveSpotCount  int
	// UnavailableReason tells why placement is not available, or is nil.
	UnavailableReason *TopologyReason
}

// RouteMeshStatus is a complete snapshot of one RouteMesh: its peer connections, channel
// readiness and placement. Each one a host hands out is its receiver's own: it never changes
// under the receiver, and writing to its slices or to what its pointers point to changes what
// no other receiver sees. Descriptor revisions, generations and endpoints are never in it.
type RouteMeshStatus struct {
	MeshName string
	// State is the mesh's availability.
	State TopologyState
	// IsReady: the host is Serving and the mesh can carry application traffic. Zero peers alone
	// does not make a mesh unavailable, since its local channels still work.
	IsReady bool
	// ReadyPeerCount is the number of Ready remote mesh nodes; NotRequired peers are not counted.
	ReadyPeerCount int
	// Channels is the readiness of each of the mesh's channels.
	Channels []ChannelStatus
	// Peers lists the mesh's remote nodes, NotRequired ones included.
	Peers []PeerStatus
	// Placement says whether this node can take new objects.
	Placement PlacementStatus
	// Sequence orders the statuses of this runtime instance.
	Sequence uint64
	// ObservedAt is when the snapshot was taken.
	ObservedAt time.Time
}

// ClientServerRole is this process's role on a ClientServer channel.
type ClientServerRole uint8

const (
	// ClientServerRoleClient: this process only calls the channel's servers.
	ClientServerRoleClient ClientServerRole = 1
	// ClientServerRoleServer: this process only serves the channel.
	ClientServerRoleServer ClientServerRole = 2
	// ClientServerRoleClientAndServer: this process calls and serves; its own server is a normal
	// target under the same weight rules.
	ClientServerRoleClientAndServer ClientServerRole = 3
)

var clientServerRoleNames = [...]string{"", "Client", "Server", "ClientAndServer"}

// String returns the role's name as the seed spells it, or ClientServerRole(n); 0 is not a
// role.
func (r ClientServerRole) String() string {
	if r != 0 && int(r) < len(clientServerRoleNames) {
		return clientServerRoleNames[r]
	}
	return fmt.Sprintf("ClientServerRole(%d)", uint8(r))
}

// ClientServerTargetStatus is the state of one server of a ClientServer channel, local or remote.
// It is read-only diagnostics: targets cannot be selected or re-weighted through it.
type ClientServerTargetStatus struct {
	// NodeRid is the server's transport identity.
	NodeRid NodeID
	// Weight is the server's configured weight; only a positive weight makes it a ready target.
	Weight int
	// State is the connection's state; a server in this process is Ready while it serves.
	State PeerState
	// UnavailableReason tells why the server is not Ready, or is nil.
	UnavailableReason *TopologyReason
}

// ClientServerStatus is a complete snapshot of one ClientServer channel. Each one a host hands
// out is its receiver's own, as a [RouteMeshStatus] is. Endpoints and discovery revisions are
// never in it.
type ClientServerStatus struct {
	ChannelName string
	// LocalRole is this process's role on the channel.
	LocalRole ClientServerRole
	// State is the channel's availability.
	State TopologyState
	// IsReady: the host is Serving and the channel can carry calls.
	IsReady bool
	// ReadyTargetCount counts the Ready servers, local or remote, that have a positive weight and
	// are not draining.
	ReadyTargetCount int
	// UnavailableReason tells why the channel is not Ready — NoReadyTarget when no server
	// can take a call, RuntimeNotReady when the host does not serve — or is nil.
	UnavailableReason *TopologyReason
	// Targets lists the channel's servers, for diagnostics only.
	Targets []ClientServerTargetStatus
	// Sequence orders the statuses of this runtime instance.
	Sequence uint64
	// ObservedAt is when the snapshot was taken.
	ObservedAt time.Time
}

// FanoutStatus is a complete snapshot of the publisher connections an automatic subscriber of
// one Fanout channel can use. Each one a host hands out is its receiver's own, as a
// [RouteMeshStatus] is. Asking it of a manual subscriber's channel is an ErrConfig error.
// Publisher endpoints, discovery sources and generations are internal.
type FanoutStatus struct {
	ChannelName string
	// State is the channel's availability.
	State TopologyState
	// IsReady: the host is Serving and the channel can deliver publications.
	IsReady bool
	// ReadyPublisherCount is the number of Ready publishers.
	ReadyPublisherCount int
	// UnavailableReason tells why the channel is not Ready — NoReadyPeer when a publisher is
	// not connected, RuntimeNotReady when the host does not serve — or is nil.
	UnavailableReason *TopologyReason
	// Publishers lists the channel's publishers.
	Publishers []PeerStatus
	// Sequence orders the statuses of this runtime instance.
	Sequence uint64
	// ObservedAt is when the snapshot was taken.
	ObservedAt time.Time
}
