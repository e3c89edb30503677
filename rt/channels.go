package rt

import (
	"context"
	"iter"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/observe"
	"github.com/zlink-go/zlink/sdk"
)

// CallChannel implements sdk.ChannelClient: the call goes to one Ready server of the
// ClientServer channel, chosen by weight (a server of this node included) or, with sdk.Key, by
// rendezvous hashing on the key. With no Ready server it fails with sdk.ErrNoReadyTarget.
func (h *Host) CallChannel(ctx context.Context, desc *sdk.ChannelDesc, method string, req proto.Message, opts ...sdk.CallOption) (proto.Message, error) {
	if ctx == nil {
		return nil, errNilContext("CallChannel")
	}
	if err := h.serving(); err != nil {
		return nil, err
	}
	return h.mesh.CallChannel(ctx, desc, method, req, false, sdk.ApplyCallOptions(opts))
}

// SendChannel implements sdk.ChannelClient.
func (h *Host) SendChannel(ctx context.Context, desc *sdk.ChannelDesc, method string, msg proto.Message, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("SendChannel")
	}
	if err := h.serving(); err != nil {
		return err
	}
	_, err := h.mesh.CallChannel(ctx, desc, method, msg, true, sdk.ApplyCallOptions(opts))
	return err
}

// Publish implements sdk.ChannelClient: every subscriber node of the Fanout channel that is
// serving and connected gets msg once; none gets it later (at most once). It returns once each
// took it, and its error names the subscriber nodes that refused it.
func (h *Host) Publish(ctx context.Context, desc *sdk.ChannelDesc, method string, msg proto.Message, _ ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("Publish")
	}
	if err := h.serving(); err != nil {
		return err
	}
	return h.mesh.PublishChannel(ctx, desc, method, msg)
}

func (c spotClient) CallChannel(ctx context.Context, desc *sdk.ChannelDesc, method string, req proto.Message, opts ...sdk.CallOption) (proto.Message, error) {
	if ctx == nil {
		return nil, errNilContext("CallChannel")
	}
	return c.h.mesh.CallChannel(ctx, desc, method, req, false, sdk.ApplyCallOptions(opts))
}

func (c spotClient) SendChannel(ctx context.Context, desc *sdk.ChannelDesc, method string, msg proto.Message, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("SendChannel")
	}
	_, err := c.h.mesh.CallChannel(ctx, desc, method, msg, true, sdk.ApplyCallOptions(opts))
	return err
}

func (c spotClient) Publish(ctx context.Context, desc *sdk.ChannelDesc, method string, msg proto.Message, _ ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("Publish")
	}
	return c.h.mesh.PublishChannel(ctx, desc, method, msg)
}

// ClientServerStatus returns the status of the ClientServer channel name: this node's role on
// it, its servers with their weights and states (local and remote alike), and how many are
// Ready targets. The targets are diagnostics: they select nothing. The status is the caller's
// own: writing to its targets or to what its pointers point to changes what no other caller
// or observer sees, nor the status's next Sequence. A channel this node knows nothing of is
// sdk.ErrNotFound; a Fanout channel is sdk.ErrInvalidArgument.
func (h *Host) ClientServerStatus(name string) (sdk.ClientServerStatus, error) {
	st, err := h.mesh.ClientServerStatus(name)
	return ownClientServerStatus(st), err
}

// FanoutStatus returns the status of this node's automatic subscriber of the Fanout channel
// name: the channel's publishers and their connection states. The status is the caller's own,
// as ClientServerStatus's is. A manual subscriber's channel is sdk.ErrConfig: its connections
// are its own. A channel this node does not subscribe to is sdk.ErrNotFound.
func (h *Host) FanoutStatus(name string) (sdk.FanoutStatus, error) {
	st, err := h.mesh.FanoutStatus(name)
	return ownFanoutStatus(st), err
}

// ObserveClientServer streams the status of the ClientServer channel name as ObserveMesh does
// the mesh's: servers joining, leaving, draining or reconnecting, the channel losing its last
// Ready target and getting one again, the node stopping. Each status it delivers is the
// observer's own, as ClientServerStatus's is. It fails as ClientServerStatus does, and with an
// error wrapping sdk.ErrInvalidArgument for a nil ctx.
func (h *Host) ObserveClientServer(ctx context.Context, name string) (iter.Seq[sdk.Observed[sdk.ClientServerStatus]], error) {
	if ctx == nil {
		return nil, errNilContext("ObserveClientServer")
	}
	st, err := h.mesh.ClientServerStatus(name)
	if err != nil {
		return nil, err
	}
	hub := channelHub(&h.chans, &h.chans.clientServer, name, st, lostChannel(func(s *sdk.ClientServerStatus) sdk.TopologyState { return s.State }))
	h.publishChannels()
	return ownStream(hub.Observe(ctx), ownClientServerStatus), nil
}

// ObserveFanout streams the status of this node's automatic subscriber of the Fanout channel
// name. Each status it delivers is the observer's own, as FanoutStatus's is. It fails as
// FanoutStatus does, and with an error wrapping sdk.ErrInvalidArgument for a nil ctx.
func (h *Host) ObserveFanout(ctx context.Context, name string) (iter.Seq[sdk.Observed[sdk.FanoutStatus]], error) {
	if ctx == nil {
		return nil, errNilContext("ObserveFanout")
	}
	st, err := h.mesh.FanoutStatus(name)
	if err != nil {
		return nil, err
	}
	hub := channelHub(&h.chans, &h.chans.fanout, name, st, lostChannel(func(s *sdk.FanoutStatus) sdk.TopologyState { return s.State }))
	h.publishChannels()
	return ownStream(hub.Observe(ctx), ownFanoutStatus), nil
}

// channelHubs are the observation hubs of the channels someone observed, made on the first
// observation; the mesh status's watcher publishes them.
type channelHubs struct {
	mu           sync.Mutex
	closed       bool
	clientServer map[string]*observe.Hub[sdk.ClientServerStatus]
	fanout       map[string]*observe.Hub[sdk.FanoutStatus]
}

func channelHub[T any](c *channelHubs, hubs *map[string]*observe.Hub[T], name string, st T, lost func(missed, next *T) bool) *observe.Hub[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *hubs == nil {
		*hubs = make(map[string]*observe.Hub[T])
	}
	hub := (*hubs)[name]
	if hub == nil {
		hub = observe.NewHub(st, lost)
		if c.closed {
			hub.Close()
		}
		(*hubs)[name] = hub
	}
	return hub
}

// channelObservers counts the observations of every channel.
func (h *Host) channelObservers() int {
	h.chans.mu.Lock()
	defer h.chans.mu.Unlock()
	n := 0
	for _, hub := range h.chans.clientServer {
		n += hub.Observers()
	}
	for _, hub := range h.chans.fanout {
		n += hub.Observers()
	}
	return n
}

// publishChannels publishes each observed channel's status if it changed.
func (h *Host) publishChannels() { h.publishChannelsAndClose(false) }

// publishChannelsAndClose publishes as publishChannels does; with final, it ends their
// observations after it (the host stopped).
func (h *Host) publishChannelsAndClose(final bool) {
	h.chans.mu.Lock()
	defer h.chans.mu.Unlock()
	for name, hub := range h.chans.clientServer {
		if st, err := h.mesh.ClientServerStatus(name); err == nil && st.Sequence > hub.Current().Sequence {
			hub.Publish(st)
		}
		if final {
			hub.Close()
		}
	}
	for name, hub := range h.chans.fanout {
		if st, err := h.mesh.FanoutStatus(name); err == nil && st.Sequence > hub.Current().Sequence {
			hub.Publish(st)
		}
		if final {
			hub.Close()
		}
	}
	h.chans.closed = h.chans.closed || final
}
