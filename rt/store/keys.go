package store

import (
	"strconv"
	"strings"

	"github.com/zlink-go/zlink/sdk"
)

// keys builds the etcd keys of one mesh (DESIGN §4), all under /zlink/<mesh>/:
//
//	nodes/<rid>                          node descriptor, on the node's owner lease
//	incarnations/<rid>/<lease>           one per registration, no lease: the reclaimer's work list
//	spots/<type>/<id>                    Spot record, no lease: authority survives the owner (B3)
//	spots/<type>/<id>\x00o               owner marker, on the owner's lease: gone when it expires
//	owned/<rid>/<lease>/<type>/<id>      index of what one registration owns, for the reclaimer
//
// Every path element is escaped ('%' -> %25, '/' -> %2F), so any valid ID, '/' included,
// round-trips unchanged. IDs never contain NUL (sdk.ValidateID), so the owner marker sorts
// right after its record and one range read returns both.
type keys struct {
	root string // "/zlink/<mesh>/"
}

func newKeys(mesh string) keys { return keys{root: "/zlink/" + escape(mesh) + "/"} }

const markerSuffix = "\x00o"

func (k keys) nodesPrefix() string        { return k.root + "nodes/" }
func (k keys) node(rid sdk.NodeID) string { return k.nodesPrefix() + escape(string(rid)) }
func (k keys) incarnationsPrefix() string { return k.root + "incarnations/" }
func (k keys) spotsPrefix() string        { return k.root + "spots/" }
func (k keys) spot(key SpotKey) string {
	return k.spotsPrefix() + escape(key.Type) + "/" + escape(key.ID)
}
func (k keys) marker(spotKey string) string       { return spotKey + markerSuffix }
func (k keys) spotRangeEnd(spotKey string) string { return spotKey + "\x01" }

func (k keys) incarnation(rid sdk.NodeID, lease int64) string {
	return k.incarnationsPrefix() + escape(string(rid)) + "/" + strconv.FormatInt(lease, 16)
}

func (k keys) ownedPrefix(rid sdk.NodeID, lease int64) string {
	return k.root + "owned/" + escape(string(rid)) + "/" + strconv.FormatInt(lease, 16) + "/"
}

func (k keys) owned(rid sdk.NodeID, lease int64, key SpotKey) string {
	return k.ownedPrefix(rid, lease) + escape(key.Type) + "/" + escape(key.ID)
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

// parseOwned returns the SpotKey of an owned/<rid>/<lease>/<type>/<id> key.
func (k keys) parseOwned(prefix, key string) (SpotKey, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return SpotKey{}, false
	}
	typ, id, ok := strings.Cut(rest, "/")
	if !ok {
		return SpotKey{}, false
	}
	t, ok1 := unescape(typ)
	i, ok2 := unescape(id)
	return SpotKey{Type: t, ID: i}, ok1 && ok2
}

// parseSpot returns the SpotKey of a spots/<type>/<id> key.
func (k keys) parseSpot(key string) (SpotKey, bool) { return k.parseOwned(k.spotsPrefix(), key) }

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
	if strings.IndexAny(s, "%/") < 0 {
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
