package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zlink-go/zlink/internal/proctest"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// Options configure a Cluster.
type Options struct {
	// Nodes is the number of node processes (default 3).
	Nodes int
	// LeaseTTL is every node's owner lease TTL (default 2 s).
	LeaseTTL time.Duration
	// Tags are build tags for the node binary: a deliberately broken runtime for the test of
	// the checks themselves.
	Tags []string
}

func (o Options) withDefaults() Options {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 2 * time.Second
	}
	return o
}

// Node is one ZLink node process. Its links to every etcd member and to every other node go
// through proxies of its own, so that a scenario can fault each link alone.
type Node struct {
	ID         sdk.NodeID
	ListenAddr string
	Journal    string
	// Etcd are its links to the etcd members, in member order.
	Etcd []*Proxy
	// Peers are its links to the other nodes, by node ID.
	Peers map[sdk.NodeID]*Proxy

	tb   testing.TB
	bin  string
	args []string
	proc *proctest.Process
}

// Cluster is the system under test: etcd, the nodes, the proxies between them, and a driver
// host in the test process that calls the nodes directly.
type Cluster struct {
	Etcd   *Etcd
	Nodes  []*Node
	Driver *rt.Host

	tb  testing.TB
	dir string
}

// statePrefix is where the registers keep their values: outside the runtime's keys.
const statePrefix = "/chaos/registers"

// Start starts a cluster and waits until the driver sees every node Ready.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	opts = opts.withDefaults()
	dir := tb.TempDir()
	c := &Cluster{tb: tb, dir: dir, Etcd: StartEtcd(tb, 3, dir)}
	bin := proctest.BuildTags(tb, "github.com/zlink-go/zlink/rt/internal/nodeproc", opts.Tags...)
	for i := range opts.Nodes {
		id := sdk.NodeID(fmt.Sprintf("node-%d", i+1))
		c.Nodes = append(c.Nodes, &Node{
			ID: id, ListenAddr: freeAddr(tb), Journal: filepath.Join(dir, string(id)+".journal"),
			Peers: map[sdk.NodeID]*Proxy{}, tb: tb, bin: bin,
		})
	}
	for _, n := range c.Nodes {
		for _, m := range c.Etcd.Members {
			n.Etcd = append(n.Etcd, c.proxy(fmt.Sprintf("%s->%s", n.ID, m.Name), m.ClientAddr))
		}
		var via []string
		for _, peer := range c.Nodes {
			if peer == n {
				continue
			}
			p := c.proxy(fmt.Sprintf("%s->%s", n.ID, peer.ID), peer.ListenAddr)
			n.Peers[peer.ID] = p
			via = append(via, peer.ListenAddr+"="+p.Addr())
		}
		etcd := make([]string, len(n.Etcd))
		for i, p := range n.Etcd {
			etcd[i] = p.Addr()
		}
		n.args = []string{
			"-node", string(n.ID), "-etcd", strings.Join(etcd, ","), "-lease-ttl", opts.LeaseTTL.String(),
			"-listen", n.ListenAddr, "-dial-via", strings.Join(via, ","), "-journal", n.Journal,
			"-registers", statePrefix, "-quiet",
		}
	}
	for _, n := range c.Nodes {
		n.Start()
	}
	c.Driver = c.startDriver()
	c.AwaitNodes(60 * time.Second)
	return c
}

func (c *Cluster) proxy(name, target string) *Proxy {
	p, err := NewProxy(name, target)
	if err != nil {
		c.tb.Fatalf("chaos: proxy %s: %v", name, err)
	}
	c.tb.Cleanup(func() { _ = p.Close() })
	return p
}

// startDriver starts the test process's host: an Object Client only, on the etcd members
// directly, calling the nodes directly.
func (c *Cluster) startDriver() *rt.Host {
	cfg := rt.DefaultConfig()
	cfg.NodeID = "driver"
	cfg.Roles = rt.RoleObjectClient
	cfg.EtcdEndpoints = c.Etcd.Endpoints()
	cfg.LeaseTTL = 2 * time.Second
	cfg.StopTimeout = 10 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := rt.Start(context.Background(), cfg)
	if err != nil {
		c.tb.Fatalf("chaos: driver: %v", err)
	}
	c.tb.Cleanup(func() { _ = h.Close() })
	return h
}

// AwaitNodes waits until the driver sees every node as a Ready peer.
func (c *Cluster) AwaitNodes(within time.Duration) {
	c.tb.Helper()
	deadline := time.Now().Add(within)
	for {
		ready := map[sdk.NodeID]bool{}
		for _, p := range c.Driver.MeshStatus().Peers {
			ready[p.NodeRid] = p.State == sdk.PeerStateReady
		}
		all := true
		for _, n := range c.Nodes {
			all = all && ready[n.ID]
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("chaos: nodes not Ready within %v: %+v", within, c.Driver.MeshStatus().Peers)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Journals are the nodes' journal files.
func (c *Cluster) Journals() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Journal
	}
	return out
}

// HealAll puts every proxy back to Pass.
func (c *Cluster) HealAll() {
	for _, n := range c.Nodes {
		for _, p := range n.Etcd {
			p.Heal()
		}
		for _, p := range n.Peers {
			p.Heal()
		}
	}
}

// Node returns the node with id.
func (c *Cluster) Node(id sdk.NodeID) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.tb.Fatalf("chaos: no node %s", id)
	return nil
}

// Start starts the node's process and waits until it serves. A node whose previous process
// still holds its ID (its lease had not ended yet) is started again until the lease has.
func (n *Node) Start() {
	for try := 0; ; try++ {
		n.proc = proctest.Start(n.tb, n.bin, nil, n.args...)
		_, err := n.proc.Expect("ready ", 120*time.Second)
		if err == nil {
			break
		}
		if try == 5 {
			n.tb.Fatalf("chaos: node %s: %v", n.ID, err)
		}
		n.tb.Logf("chaos: node %s did not start (%v); trying again", n.ID, err)
		time.Sleep(time.Second)
	}
	p := n.proc
	go func() {
		for range p.Lines() {
		}
	}()
}

// Kill kills the node as a crash would.
func (n *Node) Kill() { n.proc.Kill() }

// Pid is the node's process ID.
func (n *Node) Pid() int { return n.proc.Pid() }

// Stop stops the node gracefully (SIGTERM) and waits for it to exit.
func (n *Node) Stop() { n.proc.Stop() }

// Pause stops the node with SIGSTOP; Resume continues it.
func (n *Node) Pause()  { n.proc.Pause() }
func (n *Node) Resume() { n.proc.Resume() }

// CutFromEtcd sets every link of the node to etcd to mode.
func (n *Node) CutFromEtcd(mode Mode) {
	for _, p := range n.Etcd {
		p.Set(mode, 0)
	}
}
