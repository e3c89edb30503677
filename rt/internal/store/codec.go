package store

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
)

func encodeNode(d *storepb.NodeDescriptor) (string, error) {
	b, err := marshal.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("store: encode node descriptor: %w", err)
	}
	return string(b), nil
}

func decodeNode(b []byte) (*storepb.NodeDescriptor, error) {
	var d storepb.NodeDescriptor
	if err := proto.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: node descriptor: %v", ErrCorruptRecord, err)
	}
	return &d, nil
}

func cloneNode(d *storepb.NodeDescriptor) *storepb.NodeDescriptor {
	if d == nil {
		return &storepb.NodeDescriptor{}
	}
	return proto.Clone(d).(*storepb.NodeDescriptor)
}
