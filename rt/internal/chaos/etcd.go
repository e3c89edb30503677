package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zlink-go/zlink/internal/proctest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one etcd member: a process of its own (internal/etcdproc) with a data directory
// that outlives it, so it can be killed, paused and started again with its data.
type Member struct {
	Name, ClientAddr, PeerAddr string

	tb   testing.TB
	bin  string
	spec string // the -cluster flag every member gets
	dir  string
	proc *proctest.Process
}

// Etcd is a 3-member etcd cluster on loopback.
type Etcd struct {
	Members []*Member
	cli     *clientv3.Client
}

// freeAddr returns a loopback address with a port free now, for a process that listens on it
// later. The port is below Linux's ephemeral range, so that the ports the kernel hands out in
// the meantime (the proxies', the clients') never take it.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		return addr
	}
	tb.Fatalf("chaos: no free port")
	return ""
}

// StartEtcd starts a cluster of n members, each in its own process, and waits until it
// serves. Everything stops when the test ends. A port taken between its choice and the
// member's listen (by another test's process) makes the cluster start again on new ports.
func StartEtcd(tb testing.TB, n int, dir string) *Etcd {
	tb.Helper()
	bin := proctest.Build(tb, "github.com/zlink-go/zlink/internal/etcdproc")
	var e *Etcd
	var err error
	for attempt := range 3 {
		e, err = startEtcd(tb, bin, n, filepath.Join(dir, fmt.Sprintf("try-%d", attempt)))
		if err == nil {
			break
		}
		tb.Logf("chaos: etcd cluster did not start (%v); starting it again on new ports", err)
	}
	if err != nil {
		tb.Fatalf("chaos: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("chaos: etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	e.cli = cli
	return e
}

// startEtcd starts one try of the cluster; on failure every member it started is stopped.
func startEtcd(tb testing.TB, bin string, n int, dir string) (*Etcd, error) {
	e := &Etcd{}
	var spec []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("etcd-%d", i+1), ClientAddr: freeAddr(tb), PeerAddr: freeAddr(tb), tb: tb, bin: bin}
		m.dir = filepath.Join(dir, m.Name)
		spec = append(spec, m.Name+"="+m.ClientAddr+"="+m.PeerAddr)
		e.Members = append(e.Members, m)
	}
	for _, m := range e.Members {
		m.spec = strings.Join(spec, ",")
		m.start()
	}
	for _, m := range e.Members {
		if err := m.ready(); err != nil {
			for _, m := range e.Members {
				m.proc.Stop()
			}
			return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
		}
	}
	return e, nil
}

// Endpoints are the members' client addresses.
func (e *Etcd) Endpoints() []string {
	out := make([]string, len(e.Members))
	for i, m := range e.Members {
		out[i] = m.ClientAddr
	}
	return out
}

// Client is a client of the whole cluster, for the harness's own reads.
func (e *Etcd) Client() *clientv3.Client { return e.cli }

func (m *Member) start() {
	m.proc = proctest.Start(m.tb, m.bin, nil, "-nofsync", "-dir", m.dir, "-name", m.Name, "-cluster", m.spec)
}

func (m *Member) awaitReady() {
	if err := m.ready(); err != nil {
		m.tb.Fatalf("chaos: etcd member %s: %v", m.Name, err)
	}
}

// ready waits for the member to serve, then drains its output for the rest of its life.
func (m *Member) ready() error {
	p := m.proc
	if _, err := p.Expect("endpoints=", 60*time.Second); err != nil {
		return err
	}
	go func() {
		for range p.Lines() {
		}
	}()
	return nil
}

// Kill kills the member as a crash would.
func (m *Member) Kill() { m.proc.Kill() }

// Restart starts a killed member again on its data.
func (m *Member) Restart() {
	m.start()
	m.awaitReady()
}

// Pause stops the member (SIGSTOP); Resume continues it.
func (m *Member) Pause()  { m.proc.Pause() }
func (m *Member) Resume() { m.proc.Resume() }

// Leader returns the member that leads the cluster now, asking the members that answer.
func (e *Etcd) Leader(ctx context.Context) (*Member, error) {
	for _, m := range e.Members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := e.cli.Status(sctx, m.ClientAddr)
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		return e.memberByID(ctx, st.Leader)
	}
	return nil, fmt.Errorf("chaos: no etcd member knows a leader")
}

func (e *Etcd) memberByID(ctx context.Context, id uint64) (*Member, error) {
	resp, err := e.cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	for _, pm := range resp.Members {
		if pm.ID != id {
			continue
		}
		for _, m := range e.Members {
			if m.Name == pm.Name {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("chaos: no member with ID %x", id)
}

// MoveLeader makes the leader hand leadership to another member.
func (e *Etcd) MoveLeader(ctx context.Context) error {
	leader, err := e.Leader(ctx)
	if err != nil {
		return err
	}
	resp, err := e.cli.MemberList(ctx)
	if err != nil {
		return err
	}
	for _, pm := range resp.Members {
		if pm.Name == leader.Name {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{leader.ClientAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		_, err = cli.MoveLeader(ctx, pm.ID)
		return err
	}
	return fmt.Errorf("chaos: no member to move the leadership to")
}

// Compact compacts the store's history up to its current revision.
func (e *Etcd) Compact(ctx context.Context) error {
	resp, err := e.cli.Get(ctx, "compaction-probe")
	if err != nil {
		return err
	}
	_, err = e.cli.Compact(ctx, resp.Header.Revision)
	return err
}
