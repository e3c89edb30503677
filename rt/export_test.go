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

// RelocationTarget is the node a planned relocation of t, at this node's version, would move
// it to now, as this node's view of the mesh chooses it; false when it has none.
func (h *Host) RelocationTarget(t sdk.Target) (sdk.NodeID, bool) {
	target, reason := h.chooseTarget(&relocationOp{version: h.cfg.ApplicationVersion}, unit{t: t}, nil)
	return target.ID, reason == sdk.RelocationReasonNone
}

// HoldKeepAlive holds the keep-alive of the node's owner lease until release: its guard runs
// out on the clock while the node has not noticed, as after a pause of the process.
func (h *Host) HoldKeepAlive() (release func()) { return h.reg.Load().HoldKeepAlive() }

// LeaseGuard returns whether the node's owner lease is certainly valid now, and whether the
// node knows it lost it.
func (h *Host) LeaseGuard() (valid, lost bool) {
	g := h.reg.Load().Guard()
	return g.Valid(), g.Lost()
}

// ServingMembers is how many nodes this node's view of the mesh holds as Serving, itself
// included.
func (h *Host) ServingMembers() int {
	n := 0
	for _, m := range h.mesh.Members() {
		if sdk.RuntimeState(m.Desc.GetState()) == sdk.RuntimeStateServing {
			n++
		}
	}
	return n
}

// BetweenRelocationReads has f run between the two reads of each round of the node's
// relocations: whether a creation is under way, then which objects are here.
func (h *Host) BetweenRelocationReads(f func()) { h.betweenReads.Store(&f) }
