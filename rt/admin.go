package rt

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zlink-go/zlink/rt/internal/admin"
	"github.com/zlink-go/zlink/sdk"
)

// AdminURL returns the base URL of the node's admin server — http://host:port, or https://
// when it speaks TLS — or "" when Config.AdminAddr is not set. With a port of 0 in AdminAddr,
// this is where the free port it got is found.
func (h *Host) AdminURL() string {
	if h.admin == nil {
		return ""
	}
	return h.admin.URL()
}

// listenAdmin binds the admin server's address, so that its URL goes into the node's
// registration; it serves once the node serves (serveAdmin).
func (h *Host) listenAdmin() error {
	if h.cfg.AdminAddr == "" {
		return nil
	}
	cfg := admin.Config{
		Addr:     h.cfg.AdminAddr,
		Loopback: loopback(h.cfg.AdminAddr),
		PeerTLS:  withTLS13(h.cfg.ClientTLS),
		Handlers: h.cfg.AdminHandlers,
		Logger:   h.log,
	}
	if !cfg.Loopback {
		// Like the mesh listener: TLS as the node speaks it with its peers, client
		// certificates included.
		cfg.TLS = withTLS13(h.cfg.ServerTLS)
		if h.cfg.ServerTLS == nil {
			h.log.Warn("the admin server listens without TLS on a network address (InsecurePlaintext): anyone who reaches it can read the node's status, and its profiles through a tunnel that ends on the node",
				"admin", h.cfg.AdminAddr)
		}
	}
	srv, err := admin.Listen(cfg)
	if err != nil {
		return err
	}
	h.admin = srv
	return nil
}

// serveAdmin starts serving the admin pages, once the node serves.
func (h *Host) serveAdmin() {
	if h.admin != nil {
		h.admin.Serve(adminNode{h})
	}
}

// closeAdmin stops the admin server, after the node stopped: its pages have shown the end.
// The requests under way get until by to end (a shutdown's deadline), a moment at least; a
// zero by gives them the server's own grace.
func (h *Host) closeAdmin(by time.Time) {
	if h.admin != nil {
		stop := h.admin.Close
		if !by.IsZero() {
			stop = func() error { return h.admin.CloseWithin(time.Until(by)) }
		}
		if err := stop(); err != nil {
			h.log.Warn("the admin server did not close cleanly", "err", err)
		}
	}
}

// adminNode is the host as the admin server sees it.
type adminNode struct{ h *Host }

func (n adminNode) Snapshot() admin.Snapshot {
	h := n.h
	rs := h.Status()
	ms := h.MeshStatus()
	snap := admin.Snapshot{
		Node: h.cfg.NodeID, Mesh: h.cfg.MeshName, ApplicationVersion: h.cfg.ApplicationVersion,
		Runtime: rs, MeshStatus: ms, Capacity: rs.Capacity,
		Relocation: h.relocationProgress(), Turns: h.catalog.Turns(), TakenAt: time.Now(),
	}
	h.lc.mu.Lock()
	snap.Failed = h.lc.failed
	h.lc.mu.Unlock()
	for _, c := range ms.Channels {
		if st, err := h.ClientServerStatus(c.ChannelName); err == nil {
			snap.ClientServer = append(snap.ClientServer, st)
		} else if st, err := h.FanoutStatus(c.ChannelName); err == nil {
			snap.Fanout = append(snap.Fanout, st)
		}
	}
	return snap
}

// Watch reports every change of the runtime, mesh and capacity statuses, as an observer of
// each, until ctx ends or the host stopped (its runtime stream ended).
func (n adminNode) Watch(ctx context.Context, changed func()) {
	h := n.h
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if meshes, err := h.ObserveMesh(ctx, h.cfg.MeshName); err == nil {
		wg.Go(func() {
			for range meshes {
				changed()
			}
		})
	}
	wg.Go(func() {
		for range h.ObserveCapacity(ctx) {
			changed()
		}
	})
	for range h.ObserveRuntime(ctx) {
		changed()
	}
	cancel()
	wg.Wait()
}

func (n adminNode) Members() []admin.Member {
	h := n.h
	var out []admin.Member
	self := false
	for _, m := range h.mesh.Members() {
		d := m.Desc
		out = append(out, admin.Member{
			Node: m.ID, State: sdk.RuntimeState(d.GetState()), ApplicationVersion: d.GetApplicationVersion(),
			AdminURL: d.GetAdminUrl(), Self: m.ID == h.cfg.NodeID,
		})
		self = self || m.ID == h.cfg.NodeID
	}
	if !self { // not registered now (its lease ended, or it stopped): it still shows itself
		out = append(out, admin.Member{Node: h.cfg.NodeID, State: h.runtimeState(), ApplicationVersion: h.cfg.ApplicationVersion, AdminURL: h.AdminURL(), Self: true})
		slices.SortFunc(out, func(a, b admin.Member) int { return strings.Compare(string(a.Node), string(b.Node)) })
	}
	return out
}

func (n adminNode) Relocate(ctx context.Context, opts sdk.RelocationOptions) (sdk.RelocationResult, error) {
	return n.h.Relocate(ctx, opts)
}

func (n adminNode) BeginShutdown(deadline time.Duration) { n.h.beginShutdown(deadline) }

// relocationProgress is the relocation in progress or the last one, nil when none started.
func (h *Host) relocationProgress() *admin.Relocation {
	h.lc.mu.Lock()
	op := h.lc.relocation
	h.lc.mu.Unlock()
	if op == nil {
		return nil
	}
	r := &admin.Relocation{
		Mode: op.mode, TargetApplicationVersion: op.version, Deadline: op.deadline,
		Units: op.total.Load(), Moved: op.moved.Load(), Gone: op.gone.Load(),
	}
	select {
	case <-op.done:
		res := op.result
		r.Result = &res
	default:
		r.Running = true
	}
	return r
}
