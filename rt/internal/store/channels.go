package store

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// ChannelRole is a node's part in one channel.
type ChannelRole uint8

const (
	// ChannelServer serves a ClientServer channel.
	ChannelServer ChannelRole = 1
	// ChannelSubscriber subscribes to a Fanout channel automatically.
	ChannelSubscriber ChannelRole = 2
	// ChannelPublisher has published on a Fanout channel.
	ChannelPublisher ChannelRole = 3
)

var channelRoleDirs = [...]string{ChannelServer: "servers", ChannelSubscriber: "subscribers", ChannelPublisher: "publishers"}

func (r ChannelRole) dir() string { return channelRoleDirs[r] }

// String returns the role's directory name: servers, subscribers or publishers.
func (r ChannelRole) String() string {
	if r >= ChannelServer && r <= ChannelPublisher {
		return r.dir()
	}
	return fmt.Sprintf("ChannelRole(%d)", uint8(r))
}

// ChannelMembership is one node's membership of one channel, as it registers it.
type ChannelMembership struct {
	Channel string
	Role    ChannelRole
	Kind    sdk.ChannelKind
	// Weight is a server's weight.
	Weight int64
	// Methods are the method shapes the member serves, for diagnostics.
	Methods []string
	// Publishers are the only nodes a manual subscriber takes publications from (empty: every
	// publisher).
	Publishers []string
}

// ChannelMember is a live membership: the node that holds it, on its owner lease.
type ChannelMember struct {
	Node sdk.NodeID
	ChannelMembership
	Lease int64
	// Revision is the store revision the membership was written at.
	Revision int64
}

// ChannelEvent is one report of a channel-membership watch, shaped like a NodeEvent: a change
// (Member set; Gone when the membership ended with its lease), a resync with the whole
// Snapshot, or a progress notification.
type ChannelEvent struct {
	Member   ChannelMember
	Gone     bool
	Revision int64
	Resync   bool
	Snapshot []ChannelMember
	Progress bool
}

func (k keys) channelsPrefix() string { return k.root + "channels/" }

// channel is channels/<name>/<role dir>/<rid>.
func (k keys) channel(name string, role ChannelRole, rid sdk.NodeID) string {
	return k.channelsPrefix() + escape(name) + "/" + role.dir() + "/" + escape(string(rid))
}

// parseChannel splits a channels/<name>/<role dir>/<rid> key.
func (k keys) parseChannel(key string) (name string, role ChannelRole, rid sdk.NodeID, ok bool) {
	rest, ok := strings.CutPrefix(key, k.channelsPrefix())
	if !ok {
		return "", 0, "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return "", 0, "", false
	}
	for r := ChannelServer; r <= ChannelPublisher; r++ {
		if parts[1] == r.dir() {
			role = r
		}
	}
	n, ok1 := unescape(parts[0])
	id, ok2 := unescape(parts[2])
	return n, role, sdk.NodeID(id), ok1 && ok2 && role != 0
}

// MaxChannelMemberships bounds the channel memberships of one registration, which its
// transaction writes with the node's two keys: within etcd's default of 128 operations per
// transaction. A store made for a server with a lower --max-txn-ops (WithGroupCommit) allows
// two fewer than that.
const MaxChannelMemberships = 120

// channelOps are the writes of ms on lease.
func (s *Etcd) channelOps(rid sdk.NodeID, lease int64, ms []ChannelMembership) ([]clientv3.Op, error) {
	if len(ms) > s.maxMemberships {
		return nil, fmt.Errorf("%w: %d channel memberships (servers and subscribers), at most %d for an etcd that takes %d operations per transaction",
			sdk.ErrConfig, len(ms), s.maxMemberships, s.maxMemberships+2)
	}
	ops := make([]clientv3.Op, 0, len(ms))
	for _, m := range ms {
		if m.Role < ChannelServer || m.Role > ChannelPublisher {
			return nil, fmt.Errorf("store: channel %s: unknown role %d", m.Channel, m.Role)
		}
		b, err := marshal.Marshal(&storepb.ChannelMember{Kind: uint32(m.Kind), Weight: m.Weight, Methods: m.Methods, Publishers: m.Publishers})
		if err != nil {
			return nil, fmt.Errorf("store: encode channel membership: %w", err)
		}
		ops = append(ops, clientv3.OpPut(s.keys.channel(m.Channel, m.Role, rid), string(b), clientv3.WithLease(clientv3.LeaseID(lease))))
	}
	return ops, nil
}

// membershipKey names one membership of a node: a channel and a role in it.
type membershipKey struct {
	channel string
	role    ChannelRole
}

// JoinChannel adds m to the registration's channel memberships: it is written on the owner
// lease, fenced on the node's descriptor, so that it lives exactly as long as the registration,
// and a later registration of the node (Channels) carries it too. It fails with ErrFenced when
// the lease no longer holds the descriptor, with ErrTooManyMemberships when m is a new
// membership and the registration holds as many as a later registration's transaction writes,
// and with ErrMembershipsJoining when joins under way take the rest of them. Joining a
// membership the registration holds writes it again.
func (r *Registration) JoinChannel(ctx context.Context, m ChannelMembership) error {
	key := membershipKey{m.Channel, m.Role}
	reserved, err := r.reserveMembership(key)
	if err != nil {
		return fmt.Errorf("store: join channel %s: %w", m.Channel, err)
	}
	err = r.writeMembership(ctx, m)
	r.mu.Lock()
	defer r.mu.Unlock()
	if reserved {
		if r.joining[key]--; r.joining[key] == 0 {
			delete(r.joining, key)
		}
	}
	if err != nil || r.holdsLocked(key) {
		return err // a membership held already is carried once
	}
	r.channels = append(r.channels, m)
	return nil
}

// reserveMembership takes a slot of the bound for a join of key, unless the registration
// holds that membership already: the joins under way count with the memberships held, so
// that joins that run together cannot pass the bound together and leave a registration that
// a later one could not write. It reports whether it took one, which JoinChannel gives back
// once its write ended.
func (r *Registration) reserveMembership(key membershipKey) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holdsLocked(key) {
		return false, nil
	}
	if r.joining[key] == 0 {
		// Only the memberships held make the refusal final: a join under way may still fail
		// and give its slot back.
		held, pending := len(r.channels), r.pendingLocked()
		if held >= r.store.maxMemberships {
			return false, fmt.Errorf("%w (%d)", ErrTooManyMemberships, held)
		}
		if held+pending >= r.store.maxMemberships {
			return false, fmt.Errorf("%w (%d held, %d joining)", ErrMembershipsJoining, held, pending)
		}
	}
	if r.joining == nil {
		r.joining = make(map[membershipKey]int)
	}
	r.joining[key]++
	return true, nil
}

// holdsLocked reports whether the registration holds the membership key. r.mu is held.
func (r *Registration) holdsLocked(key membershipKey) bool {
	for _, c := range r.channels {
		if c.Channel == key.channel && c.Role == key.role {
			return true
		}
	}
	return false
}

// pendingLocked counts the memberships being joined that the registration does not hold
// yet. r.mu is held.
func (r *Registration) pendingLocked() int {
	n := 0
	for key := range r.joining {
		if !r.holdsLocked(key) {
			n++
		}
	}
	return n
}

// writeMembership writes m on the owner lease, fenced on the node's descriptor.
func (r *Registration) writeMembership(ctx context.Context, m ChannelMembership) error {
	ops, err := r.store.channelOps(r.owner.Node, r.owner.Lease, []ChannelMembership{m})
	if err != nil {
		return err
	}
	nodeKey := r.store.keys.node(r.owner.Node)
	resp, err := r.store.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(nodeKey), "=", r.owner.Lease)).
		Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("store: join channel %s: %w", m.Channel, unavailable(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("store: join channel %s: %w", m.Channel, ErrFenced)
	}
	return nil
}

// Channels returns the channel memberships of the registration: those it registered with and
// those it joined since.
func (r *Registration) Channels() []ChannelMembership {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ChannelMembership(nil), r.channels...)
}

// Channels lists the live channel memberships of the mesh and the revision the list was read
// at.
func (s *Etcd) Channels(ctx context.Context) ([]ChannelMember, int64, error) {
	resp, err := s.client.Get(ctx, s.keys.channelsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("store: list channels: %w", unavailable(err))
	}
	out := make([]ChannelMember, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if m, ok := s.decodeChannel(kv.Key, kv.Value, kv.Lease, kv.ModRevision); ok {
			out = append(out, m)
		}
	}
	return out, resp.Header.Revision, nil
}

func (s *Etcd) decodeChannel(key, value []byte, lease, rev int64) (ChannelMember, bool) {
	name, role, rid, ok := s.keys.parseChannel(string(key))
	if !ok {
		return ChannelMember{}, false
	}
	m := ChannelMember{Node: rid, Lease: lease, Revision: rev}
	m.Channel, m.Role = name, role
	if value == nil {
		return m, true
	}
	var pb storepb.ChannelMember
	if err := proto.Unmarshal(value, &pb); err != nil {
		return ChannelMember{}, false
	}
	m.Kind, m.Weight, m.Methods, m.Publishers = sdk.ChannelKind(pb.Kind), pb.Weight, pb.Methods, pb.Publishers
	return m, true
}

// WatchChannels calls fn for every channel-membership change after revision, in order, until
// ctx ends, as WatchNodes does for the nodes.
func (s *Etcd) WatchChannels(ctx context.Context, revision int64, fn func(ChannelEvent)) error {
	return s.watchPrefix(ctx, s.keys.channelsPrefix(), revision, watchHandlers{
		event: func(ev *clientv3.Event) {
			if ev.Type == clientv3.EventTypeDelete {
				if m, ok := s.decodeChannel(ev.Kv.Key, nil, 0, ev.Kv.ModRevision); ok {
					fn(ChannelEvent{Member: m, Gone: true, Revision: ev.Kv.ModRevision})
				}
				return
			}
			if m, ok := s.decodeChannel(ev.Kv.Key, ev.Kv.Value, ev.Kv.Lease, ev.Kv.ModRevision); ok {
				fn(ChannelEvent{Member: m, Revision: ev.Kv.ModRevision})
			}
		},
		progress: func(rev int64) { fn(ChannelEvent{Progress: true, Revision: rev}) },
		resync: func(ctx context.Context) (int64, error) {
			ms, rev, err := s.Channels(ctx)
			if err == nil {
				fn(ChannelEvent{Resync: true, Snapshot: ms, Revision: rev})
			}
			return rev, err
		},
	})
}
