package store

import (
	"strconv"
	"strings"

	"github.com/zlink-go/zlink/sdk"
)

// keys builds the etcd keys of one mesh (DESIGN §4), all under /zlink/<mesh>/:
//
//	nodes/<rid>                  node descriptor, on the node's owner lease
//	incarnations/<rid>/<lease>   one per registration, no lease: the reclaimer's work list
//	reclaims/<rid>/<lease>       a reclaimer's claim on a dead registration, on its own lease
//	spots/<type>/<id>            Spot record, no lease: authority survives the owner (B3)
//	actors/<type>/<id>           Actor record: its host Spot and generation (DESIGN §6)
//	spot-actors/<host>/<type>/<id>  index of a host Spot's Actors, empty values
//	arrivals/<type>/<id>         a relocation target's consent to receive a Spot, on the
//	                             target's owner lease
//
// <host> is spot/<type>/<id>/<incarnation> for a User or Instance Spot (the host record's
// CreateRevision, in hex) and entry/<type>/<node>/<lease> for the Entry Spot of one
// registration of a node (its owner lease, in hex): a re-created Spot or a registered-again
// node is a new host with an index of its own. An index key exists exactly while the Actor
// record it names has that host: every write of an Actor record writes its index keys in the
// same transaction.
//
// A Spot record is the only key its creation writes. Its owner is alive exactly while
// nodes/<owner> exists on the owner's lease, so that key is both the liveness evidence of
// every record the node owns and the fence of the node's writes.
//
// Every path element is escaped ('%' -> %25, '/' -> %2F), so any valid ID, '/' included,
// round-trips unchanged.
type keys struct {
	root string // "/zlink/<mesh>/"
}

func newKeys(mesh string) keys { return keys{root: "/zlink/" + escape(mesh) + "/"} }

// nodesDir is the directory of node descriptors under the mesh's root.
const nodesDir = "nodes/"

func (k keys) nodesPrefix() string        { return k.root + nodesDir }
func (k keys) node(rid sdk.NodeID) string { return k.nodesPrefix() + escape(string(rid)) }
func (k keys) incarnationsPrefix() string { return k.root + "incarnations/" }
func (k keys) spotsPrefix() string        { return k.root + "spots/" }
func (k keys) spot(key SpotKey) string {
	return k.spotsPrefix() + escape(key.Type) + "/" + escape(key.ID)
}

func (k keys) arrival(key SpotKey) string {
	return k.root + "arrivals/" + escape(key.Type) + "/" + escape(key.ID)
}

func (k keys) actorsPrefix() string { return k.root + "actors/" }
func (k keys) actor(key ActorKey) string {
	return k.actorsPrefix() + escape(key.Type) + "/" + escape(key.ID)
}

// hostActorsPrefix is the index prefix of host's Actors, ending in '/'.
func (k keys) hostActorsPrefix(h HostRef) string {
	if h.Kind == sdk.KindEntry {
		return k.root + "spot-actors/entry/" + escape(h.Type) + "/" + escape(string(h.Node)) + "/" +
			strconv.FormatInt(h.Lease, 16) + "/"
	}
	return k.root + "spot-actors/spot/" + escape(h.Type) + "/" + escape(h.ID) + "/" +
		strconv.FormatInt(h.Incarnation, 16) + "/"
}

// hostActor is the index key of actor in host.
func (k keys) hostActor(h HostRef, actor ActorKey) string {
	return k.hostActorsPrefix(h) + escape(actor.Type) + "/" + escape(actor.ID)
}

// parseHostActor returns the Actor of an index key under prefix, a hostActorsPrefix.
func parseHostActor(prefix, key string) (ActorKey, bool) {
	return parseTypeID(prefix, key)
}

// parseTypeID splits prefix<type>/<id> and unescapes both.
func parseTypeID(prefix, key string) (ActorKey, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return ActorKey{}, false
	}
	typ, id, ok := strings.Cut(rest, "/")
	if !ok {
		return ActorKey{}, false
	}
	t, ok1 := unescape(typ)
	i, ok2 := unescape(id)
	return ActorKey{Type: t, ID: i}, ok1 && ok2
}

func (k keys) incarnation(rid sdk.NodeID, lease int64) string {
	return k.incarnationsPrefix() + escape(string(rid)) + "/" + strconv.FormatInt(lease, 16)
}

func (k keys) reclaim(rid sdk.NodeID, lease int64) string {
	return k.root + "reclaims/" + escape(string(rid)) + "/" + strconv.FormatInt(lease, 16)
}

// parseIncarnation splits incarnations/<rid>/<lease>.
func (k keys) parseIncarnation(key string) (sdk.NodeID, int64, bool) {
	rest, ok := strings.CutPrefix(key, k.incarnationsPrefix())
	if !ok {
		return "", 0, false
	}
	rid, leaseHex, ok := strings.Cut(rest, "/")
	if !ok {
		return "", 0, false
	}
	lease, err := strconv.ParseInt(leaseHex, 16, 64)
	if err != nil {
		return "", 0, false
	}
	id, ok := unescape(rid)
	return sdk.NodeID(id), lease, ok
}

// parseSpot returns the SpotKey of a spots/<type>/<id> key.
func (k keys) parseSpot(key string) (SpotKey, bool) {
	tk, ok := parseTypeID(k.spotsPrefix(), key)
	return SpotKey(tk), ok
}

// parseNode returns the node ID of a nodes/<rid> key.
func (k keys) parseNode(key string) (sdk.NodeID, bool) {
	rest, ok := strings.CutPrefix(key, k.nodesPrefix())
	if !ok {
		return "", false
	}
	id, ok := unescape(rest)
	return sdk.NodeID(id), ok
}

func escape(s string) string {
	// Two byte searches: ContainsAny builds a set on every call, and every record write
	// escapes its owner's node ID.
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '/') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		switch s[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "2F":
			b.WriteByte('/')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}
