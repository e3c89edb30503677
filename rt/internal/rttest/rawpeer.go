package rttest

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// MeshMethod is the full name of the stream nodes open to each other.
const MeshMethod = "/zlink.wire.v1.Mesh/Stream"

// RawPeer is a client of a node's mesh port that is no node: a test sends it whatever it
// likes, well-formed batches or arbitrary bytes, to see what the node does with hostile input.
type RawPeer struct {
	conn *grpc.ClientConn
}

// DialRawPeer connects to a node's endpoint in plaintext. It closes when the test ends.
func DialRawPeer(tb testing.TB, endpoint string) *RawPeer {
	tb.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		tb.Fatalf("rttest: dial %s: %v", endpoint, err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return &RawPeer{conn: conn}
}

// Stream opens a mesh stream that claims to come from node from; headers are more metadata
// pairs. Its messages are []byte (sent as they are) or proto messages; it receives
// *wire.Batch.
func (p *RawPeer) Stream(ctx context.Context, from string, headers ...string) (grpc.ClientStream, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, append([]string{"zlink-node", from}, headers...)...)
	return p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, MeshMethod)
}

// Batch is a batch of the given requests.
func Batch(reqs ...*wire.Request) *wire.Batch {
	b := &wire.Batch{}
	for _, r := range reqs {
		b.Envelopes = append(b.Envelopes, &wire.Envelope{Request: r})
	}
	return b
}

// rawCodec sends []byte as it is and protobuf messages encoded; it decodes into protobuf
// messages. Its name is the protobuf codec's, so the node reads what it sends as batches.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case []byte:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return nil, fmt.Errorf("rttest: cannot send %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("rttest: cannot receive into %T", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}
