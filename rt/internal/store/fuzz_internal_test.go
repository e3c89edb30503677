package store

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// FuzzIDKeyRoundTrip: every valid type name and ID comes back unchanged from its etcd key,
// whatever bytes it holds ('/' and '%' included), and an invalid one is refused with a reason.
func FuzzIDKeyRoundTrip(f *testing.F) {
	for _, seed := range [][2]string{
		{"chat.Room", "r1"}, {"a/b", "c/d"}, {"%2F", "%"}, {"x", "%25%2F/"}, {"", "id"}, {"t", ""},
		{"t", "a\x00b"}, {"t", "\xff\xfe"}, {"t", "é/ü"},
	} {
		f.Add(seed[0], seed[1])
	}
	k := newKeys("mesh")
	f.Fuzz(func(t *testing.T, typ, id string) {
		key := SpotKey{Type: typ, ID: id}
		if err := key.Validate(); err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		got, ok := k.parseSpot(k.spot(key))
		if !ok || got != key {
			t.Fatalf("spot key %q came back as %q (%v)", key, got, ok)
		}
		if sdk.NodeID(id).Validate() == nil {
			node, ok := k.parseNode(k.node(sdk.NodeID(id)))
			if !ok || node != sdk.NodeID(id) {
				t.Fatalf("node key %q came back as %q", id, node)
			}
			rid, lease, ok := k.parseIncarnation(k.incarnation(sdk.NodeID(id), 42))
			if !ok || rid != sdk.NodeID(id) || lease != 42 {
				t.Fatalf("incarnation of %q came back as %q/%d", id, rid, lease)
			}
		}
	})
}

// FuzzDecodeRecord: any bytes stored under a record's or a node's key decode to an error or to
// a value, never to a panic.
func FuzzDecodeRecord(f *testing.F) {
	for _, m := range []proto.Message{
		&storepb.SpotRecord{Phase: storepb.Phase_PHASE_READY, Owner: "n", OwnerLease: 7, Attempt: 1, Generation: 1, Kind: 3},
		&storepb.SpotRecord{Phase: storepb.Phase_PHASE_RELEASING, ReleaseTag: storepb.ReleaseTag_RELEASE_TAG_IDLE_RELEASE},
		&storepb.NodeDescriptor{NodeId: "n", Roles: 3, SpotTypes: []string{"a", "b"}, Endpoint: "127.0.0.1:1"},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var stored storepb.SpotRecord
		if proto.Unmarshal(data, &stored) == nil {
			rec := recordAt(&stored, 1, 2)
			_ = rec.proto()
			_ = rec.Kind.String()
			_ = rec.Phase.String()
		}
		if d, err := decodeNode(data); err == nil {
			_ = cloneNode(d)
		}
	})
}
