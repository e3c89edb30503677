package paside

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/bench/peers/zl"
)

// EchoKind is the cluster kind of the echo grain.
const EchoKind = "echo"

// Member is a one-member Proto.Actor cluster: the in-memory test provider, the disthash
// identity lookup and the echo kind, with the cluster's default request timeout. The remote
// grain workload's members and clients (StartRemoteMember) are Members too.
type Member struct {
	*cluster.Cluster
	// client marks a cluster client, which Cluster.Shutdown cannot stop: it started no gossip.
	client bool
}

// StartMember starts a cluster member and waits for its topology consensus.
func StartMember(ctx context.Context) (*Member, error) {
	sys := NewSystem()
	cfg := cluster.Configure("peers-"+sys.ID, test.NewTestProvider(test.NewInMemAgent()), disthash.New(),
		remote.Configure("127.0.0.1", 0),
		cluster.WithKinds(cluster.NewKind(EchoKind, EchoProps(new(atomic.Int64)))))
	c := cluster.New(sys, cfg)
	c.StartMember()
	// StartMember itself waits a second for the topology. A lone member reaches no gossip
	// consensus, so wait until the member list holds this member as the echo kind's activator.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := workload.WaitFor(ctx, "the member in its own topology", func() bool {
		return c.MemberList.ContainsMemberID(sys.ID) && c.MemberList.GetActivatorMember(EchoKind, "") != ""
	})
	if err != nil {
		c.Shutdown(false)
		return nil, err
	}
	return &Member{Cluster: c}, nil
}

// Stop stops the member without the graceful hand-over, which sleeps for seconds.
func (m *Member) Stop() error {
	if m.client {
		m.ActorSystem.Shutdown()
		m.Remote.Shutdown(false)
		return m.Config.ClusterProvider.Shutdown(false)
	}
	m.Shutdown(false)
	return nil
}

// Ping calls the grain id with cluster.Request and checks the Pong.
func (m *Member) Ping(id string, seq int64) error {
	reply, err := m.Request(id, EchoKind, &zl.Ping{Seq: seq})
	if err != nil {
		return err
	}
	pong, ok := reply.(*zl.Pong)
	if !ok {
		return fmt.Errorf("%w: %T", workload.ErrWrongReply, reply)
	}
	return workload.CheckSeq(seq, pong.GetSeq())
}

// cold activates p.Count grains with their first request from p.Callers callers.
func cold(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	m, err := StartMember(ctx)
	if err != nil {
		return workload.Result{}, nil, err
	}
	res, err := workload.ForCount(ctx, p.Callers, int64(p.Count), func(_ int, seq int64) error {
		return m.Ping(fmt.Sprintf("cold-%07d", seq), seq)
	})
	if err != nil {
		return res, m.Stop, err
	}
	if got := m.GetClusterKind(EchoKind).Count(); got != int32(p.Count) {
		return res, m.Stop, fmt.Errorf("%d grains activated after %d first requests", got, p.Count)
	}
	return res, m.Stop, nil
}

// steady activates p.Objects grains, then measures requests spread over all of them.
func steady(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	m, err := StartMember(ctx)
	if err != nil {
		return workload.Result{}, nil, err
	}
	ids := make([]string, p.Objects)
	for i := range ids {
		ids[i] = fmt.Sprintf("s-%05d", i)
	}
	if _, err := workload.ForCount(ctx, p.Callers, int64(len(ids)), func(_ int, seq int64) error {
		return m.Ping(ids[seq-1], seq)
	}); err != nil {
		return workload.Result{}, m.Stop, err
	}
	res, err := workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		return m.Ping(ids[seq%int64(len(ids))], seq)
	})
	return res, m.Stop, err
}
