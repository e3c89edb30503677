package store

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
)

// oldDescriptor is a node descriptor as the runtime wrote it before the descriptor carried the
// admin server's URL (field 13).
const oldDescriptor = "0a086e6f64652d6f6c64100318072001280230043a06776176652d61420e3132372e302e302e313a3730303148e807500c5a09636861742e526f6f6d5a09636861742e55736572620764656661756c74"

func oldDescriptorFields() *storepb.NodeDescriptor {
	return &storepb.NodeDescriptor{
		NodeId: "node-old", Roles: 3, ApplicationVersion: 7, State: 1, Weight: 2, LifecycleGeneration: 4,
		MaintenanceWave: "wave-a", Endpoint: "127.0.0.1:7001", MaxActive: 1000, Active: 12,
		SpotTypes: []string{"chat.Room", "chat.User"}, Mesh: "default",
	}
}

// A descriptor written before the admin URL existed decodes as before, with no admin URL; one
// without an admin URL encodes to the very bytes the older runtime wrote; and one with it is
// those bytes followed by field 13 alone, which an older runtime skips as an unknown field.
func TestNodeDescriptorAdminURLIsBackwardCompatible(t *testing.T) {
	old, err := hex.DecodeString(oldDescriptor)
	require.NoError(t, err)
	d, err := decodeNode(old)
	require.NoError(t, err)
	require.True(t, proto.Equal(oldDescriptorFields(), d), "decoded: %v", d)
	require.Empty(t, d.GetAdminUrl())

	enc, err := encodeNode(oldDescriptorFields())
	require.NoError(t, err)
	require.Equal(t, old, []byte(enc), "no admin URL: the same bytes as before")

	withAdmin := oldDescriptorFields()
	withAdmin.AdminUrl = "http://127.0.0.1:9090"
	enc, err = encodeNode(withAdmin)
	require.NoError(t, err)
	require.Equal(t, old, []byte(enc)[:len(old)], "the older fields come first, unchanged")
	num, typ, n := protowire.ConsumeTag([]byte(enc)[len(old):])
	require.Positive(t, n)
	require.Equal(t, protowire.Number(13), num)
	require.Equal(t, protowire.BytesType, typ)
	rest := []byte(enc)[len(old)+n:]
	url, m := protowire.ConsumeBytes(rest)
	require.Equal(t, len(rest), m, "field 13 is the only addition")
	require.Equal(t, "http://127.0.0.1:9090", string(url))

	back, err := decodeNode([]byte(enc))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9090", back.GetAdminUrl())
}
