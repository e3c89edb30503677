package mesh

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"

	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// place chooses the node that creates a new Spot typ/id among the Object Servers (D6 at
// placement): Serving, hosting typ, with positive weight, a ready connection (or this node),
// and not at or near their active-object cap. Among those, weighted rendezvous hashing picks
// one: shares follow the weights, and every caller picks the same node for the same ID, so
// concurrent creators of one object meet on one node.
// Nodes that refused the message already (away) are left out: as at their cap, or as not
// Serving. When none is left, the answer names the last not-serving refusal, which says which
// node refused and why.
func (m *Mesh) place(typ, id string, away refusals) (sdk.NodeID, error) {
	cands := m.sortedMembers()
	var best sdk.NodeID
	bestScore := math.Inf(-1)
	hosting, full, notServing := 0, 0, 0
	for _, n := range cands {
		d := n.Desc
		if d.GetRoles()&RoleObjectServer == 0 || d.GetWeight() == 0 || !slices.Contains(d.GetSpotTypes(), typ) {
			continue
		}
		if slices.Contains(away.full, n.ID) {
			hosting++
			full++
			continue
		}
		state := sdk.RuntimeState(d.GetState())
		if n.ID == m.cfg.Node && m.state != nil {
			state = m.state() // its own descriptor may lag behind: a draining node places nothing on itself
		}
		if state != sdk.RuntimeStateServing || slices.Contains(away.notServing, n.ID) {
			notServing++
			continue
		}
		hosting++
		if !m.hasRoom(n) {
			full++
			continue
		}
		if n.ID != m.cfg.Node && m.tr.PeerState(n.ID) != sdk.PeerStateReady {
			continue
		}
		if s := score(typ, id, n.ID, d.GetWeight()); s > bestScore {
			best, bestScore = n.ID, s
		}
	}
	switch {
	case best != "":
		return best, nil
	case hosting == 0 && notServing > 0 && away.last != nil:
		// Every node hosting it refused as not serving or is not Serving: the last refusal
		// names a node and why.
		return "", away.last
	case hosting == 0 && notServing > 0:
		return "", fmt.Errorf("%w: place %s/%q: every node hosting it is starting, draining or stopped", sdk.ErrOwnerUnavailable, typ, id)
	case hosting == 0:
		return "", fmt.Errorf("%w: no Serving Object Server of the mesh hosts spot type %s", sdk.ErrUnhandled, typ)
	case full == hosting:
		return "", fmt.Errorf("place %s/%q: every node hosting it is at its cap: %w", typ, id, &sdk.CapacityError{Where: sdk.CapacityPlacement})
	case away.last != nil:
		// A node that may take it is not reachable, which is why none is left: that is the
		// answer, with what the nodes that were reached said.
		return "", fmt.Errorf("%w: place %s/%q: no node hosting it is reachable, and the last one reached refused: %v", sdk.ErrOwnerUnavailable, typ, id, away.last)
	}
	return "", fmt.Errorf("%w: place %s/%q: no node hosting it is reachable", sdk.ErrOwnerUnavailable, typ, id)
}

// hasRoom applies D6 at placement: a node at or near its cap takes no new Spot. This node
// knows its own count; a peer's comes from its descriptor, published every PublishInterval,
// so "near" is within 5% of the cap.
func (m *Mesh) hasRoom(n store.Node) bool {
	if n.ID == m.cfg.Node {
		return m.cat.HasRoom()
	}
	limit := n.Desc.GetMaxActive()
	if limit <= 0 {
		return true
	}
	return n.Desc.GetActive() < limit-limit/20
}

// score is the weighted rendezvous score of node for typ/id: -weight / ln(u) with u uniform
// in (0, 1), largest wins. The hash is the same in every process, so every node ranks alike.
func score(typ, id string, node sdk.NodeID, weight uint32) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(typ))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	u := (float64(mix64(h.Sum64())>>11) + 0.5) / (1 << 53)
	return -float64(weight) / math.Log(u)
}

// mix64 is splitmix64's finaliser: it spreads FNV's bits over the whole word.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Members returns the nodes of the mesh as this node's membership view holds them, by ID.
func (m *Mesh) Members() []store.Node { return m.sortedMembers() }

// PeerReady reports whether this node's connection to node is Ready.
func (m *Mesh) PeerReady(node sdk.NodeID) bool { return m.tr.PeerState(node) == sdk.PeerStateReady }

// HasRoom reports whether node, a member, takes new objects by its active-object cap (D6).
func (m *Mesh) HasRoom(n store.Node) bool { return m.hasRoom(n) }

// Choose picks among nodes, by weighted rendezvous hashing on typ/id, the one that takes the
// object typ/id: shares follow the weights (F5 (6)).
func Choose(typ, id string, nodes []store.Node) store.Node {
	var best store.Node
	bestScore := math.Inf(-1)
	for _, n := range nodes {
		if s := score(typ, id, n.ID, max(n.Desc.GetWeight(), 1)); s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
}
