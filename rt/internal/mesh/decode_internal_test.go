package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDecodeNewDecodesAsUnmarshalDoes: a message decoded into a newly made one is the message
// that was encoded, and a payload that is not one fails as proto.Unmarshal fails.
func TestDecodeNewDecodesAsUnmarshalDoes(t *testing.T) {
	in, err := structpb.NewStruct(map[string]any{"name": "ping", "seq": 7.0, "tags": []any{"a", "b"}})
	require.NoError(t, err)
	b, err := proto.Marshal(in)
	require.NoError(t, err)
	out := new(structpb.Struct)
	require.NoError(t, decodeNew(b, out))
	assert.True(t, proto.Equal(in, out), "decoded %v", out)

	bad := []byte{0x0a, 0x05, 0x01} // a field that claims five bytes and has one
	assert.Equal(t, proto.Unmarshal(bad, new(structpb.Struct)) != nil, decodeNew(bad, new(structpb.Struct)) != nil)
	assert.Error(t, decodeNew(bad, new(structpb.Struct)))
	invalid := []byte{0x0a, 0x02, 0xff, 0xfe} // a string field that is not UTF-8
	assert.Error(t, decodeNew(invalid, new(wrapperspb.StringValue)))
}

// BenchmarkDecodeNew compares decoding a call's small payload into a newly made message with
// proto.Unmarshal, which clears the message first.
//
//	go test -run '^$' -bench BenchmarkDecodeNew -benchmem ./rt/internal/mesh/
func BenchmarkDecodeNew(b *testing.B) {
	payload, err := proto.Marshal(wrapperspb.String("a message of some thirty-two bytes"))
	require.NoError(b, err)
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(payload, new(wrapperspb.StringValue)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeNew", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeNew(payload, new(wrapperspb.StringValue)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
