package sdk

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"
)

// ChannelKind is the topology of a channel.
type ChannelKind uint8

const (
	// ChannelClientServer: clients call one of the channel's servers, chosen by weight among
	// the Ready ones, a server in the caller's own process included.
	ChannelClientServer ChannelKind = 1
	// ChannelFanout: a publication is delivered to every subscriber of the channel, on every
	// node, once.
	ChannelFanout ChannelKind = 2
)

// String returns "ClientServer", "Fanout", or ChannelKind(n).
func (k ChannelKind) String() string {
	switch k {
	case ChannelClientServer:
		return "ClientServer"
	case ChannelFanout:
		return "Fanout"
	}
	return fmt.Sprintf("ChannelKind(%d)", uint8(k))
}

// ChannelDesc describes one channel to the runtime. zlinkgen generates one per interface
// annotated //zlink:server or //zlink:fanout; its method table is keyed by stable method names.
type ChannelDesc struct {
	// Name is the channel's name (the `channel=` option, or package.Interface).
	Name string
	// Kind is the channel's topology.
	Kind ChannelKind
	// Methods is the dispatch table in declaration order. Every method of a Fanout channel is
	// one-way.
	Methods []MethodDesc
}

// Method returns the method named name, or nil.
func (d *ChannelDesc) Method(name string) *MethodDesc {
	for i := range d.Methods {
		if d.Methods[i].Name == name {
			return &d.Methods[i]
		}
	}
	return nil
}

// ChannelOption configures a node's server or subscriber of one channel.
type ChannelOption func(*ChannelOptions)

// ChannelOptions is what ChannelOption sets. Zero values mean the defaults.
type ChannelOptions struct {
	// Weight is a server's share of the channel's calls relative to the other servers' (default
	// 1). A server of weight 0 is a member of the channel but is never chosen.
	Weight int
	// WeightSet marks an explicit Weight, 0 included.
	WeightSet bool
	// Manual marks a manual subscriber: it receives only from the publishers it names in
	// Publishers, and its connection list is its own, so the runtime reports no Fanout status
	// for its channel.
	Manual bool
	// Publishers are the nodes a manual subscriber receives from.
	Publishers []NodeID
	// MaxQueued bounds a server's calls in progress or a subscriber's queued publications
	// (default 1,024); MaxQueuedBytes bounds their payload bytes plus 256 per message (default
	// 16 MiB). A message beyond either is refused with ErrQueueFull.
	MaxQueued      int
	MaxQueuedBytes int64
	// QueueSet marks explicit MaxQueued and MaxQueuedBytes, which must then both be positive.
	QueueSet bool
}

// MaxChannelWeight is the largest server weight: a node's placement weight has the same range.
const MaxChannelWeight int64 = math.MaxUint32

// Weight sets a server's weight, 0..[MaxChannelWeight]: its share of the channel's calls is w
// over the sum of the Ready servers' weights. A weight of 0 keeps the server a member that is
// never chosen.
func Weight(w int) ChannelOption {
	return func(o *ChannelOptions) { o.Weight, o.WeightSet = w, true }
}

// ManualSubscriber makes a subscriber that receives only what the nodes named in publishers
// publish, instead of every publisher of the mesh. Its channel has no Fanout status on this
// node: asking for it is an ErrConfig error.
func ManualSubscriber(publishers ...NodeID) ChannelOption {
	return func(o *ChannelOptions) { o.Manual, o.Publishers = true, append([]NodeID(nil), publishers...) }
}

// ChannelQueue bounds a server's calls in progress, or a subscriber's queued publications, to
// n messages and bytes payload bytes (each message counts 256 bytes more). Beyond either, a
// message is refused with ErrQueueFull. Both must be positive; the registration is refused
// with ErrConfig otherwise.
func ChannelQueue(n int, bytes int64) ChannelOption {
	return func(o *ChannelOptions) { o.MaxQueued, o.MaxQueuedBytes, o.QueueSet = n, bytes, true }
}

// ApplyChannelOptions folds opts into a ChannelOptions value.
func ApplyChannelOptions(opts []ChannelOption) ChannelOptions { return apply(opts) }

// ChannelRegistrar takes a node's channel servers and subscribers before it starts serving.
// Generated RegisterXServer and SubscribeX functions call it.
type ChannelRegistrar interface {
	// RegisterServer makes impl a server of the ClientServer channel desc describes. A
	// process registers at most one server per channel.
	RegisterServer(desc *ChannelDesc, impl any, opts ...ChannelOption) error
	// Subscribe makes handler a subscriber of the Fanout channel desc describes. A process
	// subscribes at most once per channel.
	Subscribe(desc *ChannelDesc, handler any, opts ...ChannelOption) error
}

// ChannelClient is the untyped invocation surface of channels, which generated channel
// references call.
type ChannelClient interface {
	// CallChannel calls method on one Ready server of the ClientServer channel desc and waits
	// for its reply. The server is chosen by weight, or by rendezvous hashing of the key when
	// the call has [Key]. With no Ready server the call fails with [ErrNoReadyTarget].
	CallChannel(ctx context.Context, desc *ChannelDesc, method string, req proto.Message, opts ...CallOption) (proto.Message, error)
	// SendChannel delivers msg to the one-way method of one Ready server of the ClientServer
	// channel desc, chosen as CallChannel chooses. It returns once the server admitted it.
	SendChannel(ctx context.Context, desc *ChannelDesc, method string, msg proto.Message, opts ...CallOption) error
	// Publish delivers msg to the method of every subscriber of the Fanout channel desc, on
	// every node, at most once each: a subscriber that is not connected when it is published
	// does not get it later. Publications of one publisher reach each subscriber in the order
	// they were published. It returns once every subscriber's node admitted it.
	Publish(ctx context.Context, desc *ChannelDesc, method string, msg proto.Message, opts ...CallOption) error
}
