package paside

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zlink-go/zlink/bench/peers/workload"
)

// RemoteClusterName names the two-process cluster of the remote grain workload.
const RemoteClusterName = "peers-remote"

// StartRemoteMember starts a member of the two-process cluster: the etcd cluster provider on
// the given endpoints, the disthash identity lookup and the echo kind. A client (client true)
// hosts no kind and waits until the member list holds a member that activates the echo kind;
// a member hosting it (client false) waits until that member is itself.
func StartRemoteMember(ctx context.Context, endpoints []string, client bool) (*Member, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("paside: no etcd endpoints")
	}
	provider, err := etcd.NewWithConfig("/protoactor", clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	sys := NewSystem()
	opts := []cluster.ConfigOption{}
	if !client {
		opts = append(opts, cluster.WithKinds(cluster.NewKind(EchoKind, EchoProps(new(atomic.Int64)))))
	}
	cfg := cluster.Configure(RemoteClusterName, provider, disthash.New(), remote.Configure("127.0.0.1", 0), opts...)
	c := cluster.New(sys, cfg)
	if client {
		c.StartClient()
	} else {
		c.StartMember()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = workload.WaitFor(ctx, "a member that activates echo grains", func() bool {
		activator := c.MemberList.GetActivatorMember(EchoKind, "")
		return activator != "" && (client || activator == sys.Address())
	})
	m := &Member{Cluster: c, client: client}
	if err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// remoteCold activates p.Count grains hosted by the member process with their first request,
// from p.Callers callers of a cluster client. One grain is activated first, unmeasured, to
// open the connection to the member.
func remoteCold(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	m, err := StartRemoteMember(ctx, p.Etcd, true)
	if err != nil {
		return workload.Result{}, nil, err
	}
	if err := m.Ping("rcold-warm", 0); err != nil {
		return workload.Result{}, m.Stop, err
	}
	res, err := workload.ForCount(ctx, p.Callers, int64(p.Count), func(_ int, seq int64) error {
		return m.Ping(fmt.Sprintf("rcold-%07d", seq), seq)
	})
	return res, m.Stop, err
}

// memory activates p.Objects grains with their first request from p.Callers callers, for
// Memory100k requests each once more, and measures the heap's growth and the process's memory.
// The caller keeps nothing of its own: every ID is made again for each request.
func memory(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	m, err := StartMember(ctx)
	if err != nil {
		return workload.Result{}, nil, err
	}
	id := func(seq int64) string { return fmt.Sprintf("m-%07d", seq) }
	before := workload.MarkHeap()
	res, err := workload.ForCount(ctx, p.Callers, int64(p.Objects), func(_ int, seq int64) error {
		return m.Ping(id(seq), seq)
	})
	if err != nil {
		return res, m.Stop, err
	}
	if p.Workload == workload.Memory100k {
		if _, err := workload.ForCount(ctx, p.Callers, int64(p.Objects), func(_ int, seq int64) error {
			return m.Ping(id(seq), seq)
		}); err != nil {
			return res, m.Stop, err
		}
	}
	if got := m.GetClusterKind(EchoKind).Count(); got != int32(p.Objects) {
		return res, m.Stop, fmt.Errorf("%d grains activated after %d first requests", got, p.Objects)
	}
	res.Memory, err = workload.MeasureMemory(before, p.Objects)
	return res, m.Stop, err
}
