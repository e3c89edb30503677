package rt

import (
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/mesh"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/sdk"
)

// Endpoint is the address peers dial to reach this node.
func (h *Host) Endpoint() string { return h.endpoint() }

// CatalogStats returns counters of the node's Spot catalog.
func (h *Host) CatalogStats() catalog.Stats { return h.catalogStats() }

// TransportStats returns counters of the node's connections to its peers.
func (h *Host) TransportStats() transport.Stats { return h.transportStats() }

// UnhandledStats returns the node's unhandled-message counters.
func (h *Host) UnhandledStats() mesh.UnhandledStats { return h.mesh.UnhandledStats() }

// Fail puts the host in the Error state, as a failure it cannot recover from does.
func (h *Host) Fail(err error) { h.fail(err) }

// SeesServingPeer reports whether this node's view of the mesh holds peer as a relocation
// would choose it: Serving, with room, and a Ready connection.
func (h *Host) SeesServingPeer(peer sdk.NodeID) bool {
	for _, n := range h.mesh.Members() {
		if n.ID == peer {
			return sdk.RuntimeState(n.Desc.GetState()) == sdk.RuntimeStateServing && h.mesh.HasRoom(n) && h.mesh.PeerReady(peer)
		}
	}
	return false
}
