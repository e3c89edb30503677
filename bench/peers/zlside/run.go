package zlside

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/bench/peers/internal/grpcfloor"
	"github.com/zlink-go/zlink/bench/peers/internal/tcpfloor"
	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/bench/peers/zl"
	"github.com/zlink-go/zlink/sdk"
)

// Run runs one workload on ZLink and returns its result and a function that stops what the
// run started. A caller that exits the process right after may skip it.
func Run(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	if err := p.Validate(); err != nil {
		return workload.Result{}, nil, err
	}
	node, err := StartNode(ctx, p.Etcd, "bench", NodeOptions{
		ClientOnly: p.Workload.Remote(), Actors: p.Workload == workload.ActorCall64,
		ChannelServer: p.Workload == workload.ChannelCall64,
	})
	if err != nil {
		return workload.Result{}, nil, err
	}
	stop := node.Close
	ctx, cancel := context.WithTimeout(ctx, runBound(p))
	defer cancel()
	var res workload.Result
	switch p.Workload {
	case workload.LocalCall1, workload.LocalCall64:
		if res, err = calls(ctx, node, p, "hot"); err == nil && !p.NoFloor {
			// The same callers through bare Go, right after: what the machine allows.
			res.Floor, err = LocalFloor(ctx, p.Callers, p.Warmup, p.Duration)
		}
	case workload.RemoteCall1, workload.RemoteCall64:
		// The node is client-only, so placement puts the Spot on the server process.
		if res, err = calls(ctx, node, p, "far"); err == nil && !p.NoFloor {
			res.Floor, res.TCPFloor, err = remoteFloors(ctx, p)
		}
	case workload.OneWay64:
		if res, err = oneWay(ctx, node, p); err == nil && !p.NoFloor {
			// The same sends through bare Go channels, right after: what the machine allows.
			res.Floor, err = OneWayFloor(ctx, p.Callers, p.Objects, p.Count)
		}
	case workload.ColdActivation:
		res, err = cold(ctx, node, p)
	case workload.RemoteColdActivation:
		res, err = remoteCold(ctx, node, p)
	case workload.Steady10k, workload.Steady10k1024:
		res, err = steady(ctx, node, p)
	case workload.ActorCall64:
		res, err = actorCalls(ctx, node, p)
	case workload.ChannelCall64:
		if res, err = channelCalls(ctx, node, p); err == nil && !p.NoFloor {
			// The same callers calling the handler itself, right after.
			res.Floor, err = ChannelFloor(ctx, p.Callers, p.Warmup, p.Duration)
		}
	case workload.IdleFootprint, workload.Memory100k:
		res, err = memory(ctx, node, p)
	}
	if err != nil {
		_ = stop()
		return workload.Result{}, nil, fmt.Errorf("zlink %s: %w", p.Workload, err)
	}
	return res, stop, nil
}

// runBound bounds a whole run: every phase plus a generous margin.
func runBound(p workload.Params) time.Duration {
	return time.Duration(p.Windows())*(p.Warmup+p.Duration) + 10*p.Timeout
}

// remoteFloors measures, right after ZLink's window, the same callers calling the server
// process over a bare gRPC stream and over a bare TCP connection, one after the other in the
// order p says.
func remoteFloors(ctx context.Context, p workload.Params) (grpc, tcp *workload.Floor, err error) {
	if p.Floor == "" || p.TCPFloor == "" {
		return nil, nil, errors.New("no address of the server's bare gRPC or TCP echo to measure the floors on")
	}
	type probe struct {
		name    string
		measure func(ctx context.Context, addr string, callers int, warmup, duration time.Duration) (workload.Result, error)
		addr    string
		floor   **workload.Floor
	}
	probes := []probe{{"floor", grpcfloor.Measure, p.Floor, &grpc}, {"TCP floor", tcpfloor.Measure, p.TCPFloor, &tcp}}
	if p.TCPFloorFirst {
		probes[0], probes[1] = probes[1], probes[0]
	}
	for _, pr := range probes {
		res, err := pr.measure(ctx, pr.addr, p.Callers, p.Warmup, p.Duration)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", pr.name, err)
		}
		*pr.floor = workload.FloorOf(res)
	}
	return grpc, tcp, nil
}

// calls measures request/reply to one Spot, activated by an intent call first; the measured
// calls use the plain reference.
func calls(ctx context.Context, n *Node, p workload.Params, id string) (workload.Result, error) {
	if err := warm(ctx, n, id, p.Timeout); err != nil {
		return workload.Result{}, err
	}
	ref := zl.EchoOf(n, id)
	return workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		reply, err := ref.Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
}

// warm activates the Spot id with an intent call. A node that has just started may not have
// connected to the mesh's other nodes yet (a remote Spot's owner answers unavailable), so the
// call is tried again every 20 ms for up to within, as the runtime's own remote benchmark does.
func warm(ctx context.Context, n *Node, id string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		_, err := zl.OpenEcho(n, id).Ping(ctx, &zl.Ping{Seq: 0})
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oneWay sends p.Count ticks from p.Callers callers to p.Objects Spots, pushing back on a full
// queue, and measures until every tick was handled; then it checks the Spots' own counts.
func oneWay(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	refs, err := activate(ctx, n, "t", p.Objects, p.Callers)
	if err != nil {
		return workload.Result{}, err
	}
	var pushbacks atomic.Int64
	begin, cpu := time.Now(), workload.StartCPUWindow()
	_, err = workload.ForCount(ctx, p.Callers, int64(p.Count), func(_ int, seq int64) error {
		ref := refs[seq%int64(len(refs))]
		for {
			err := ref.Tick(ctx, &zl.Tick{Seq: seq})
			if !errors.Is(err, sdk.ErrQueueFull) {
				return err
			}
			pushbacks.Add(1)
			runtime.Gosched()
		}
	})
	if err != nil {
		return workload.Result{}, err
	}
	want := int64(p.Count)
	if err := workload.WaitFor(ctx, "every tick handled", func() bool { return n.Handled.Load() >= want }); err != nil {
		return workload.Result{}, err
	}
	elapsed := time.Since(begin)
	used, procs := cpu.End()
	var sum int64
	for _, ref := range refs {
		c, err := ref.Count(ctx, &zl.CountRequest{})
		if err != nil {
			return workload.Result{}, err
		}
		sum += c.GetTicks()
	}
	if sum != want || n.Handled.Load() != want {
		return workload.Result{}, fmt.Errorf("handled %d ticks (Spots count %d), sent %d", n.Handled.Load(), sum, want)
	}
	return workload.Result{Ops: want, Seconds: elapsed.Seconds(), Pushbacks: pushbacks.Load(), CPUSeconds: used, Processes: procs}, nil
}

// cold activates p.Count fresh Instance Spots with intent calls from p.Callers callers.
func cold(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	res, err := workload.ForCount(ctx, p.Callers, int64(p.Count), func(_ int, seq int64) error {
		reply, err := zl.OpenEcho(n, fmt.Sprintf("cold-%07d", seq)).Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
	if err != nil {
		return res, err
	}
	if got := n.MeshStatus().Placement.ActiveSpotCount; got != p.Count {
		return res, fmt.Errorf("%d Spots active after %d activations", got, p.Count)
	}
	// The same two writes per activation straight to the same etcd, in the same run: the
	// ceiling that the activations are judged against.
	if res.Ceiling, err = EtcdCeiling(ctx, p.Etcd, max(1, p.Count/4), p.Callers); err != nil {
		return res, fmt.Errorf("etcd ceiling: %w", err)
	}
	return res, nil
}

// steady activates p.Objects Spots, then measures calls spread over all of them.
func steady(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	refs, err := activate(ctx, n, "s", p.Objects, p.Callers)
	if err != nil {
		return workload.Result{}, err
	}
	return workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		reply, err := refs[seq%int64(len(refs))].Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
}

// activate makes count Spots prefix-0..count-1 with intent calls and returns plain references.
func activate(ctx context.Context, n *Node, prefix string, count, callers int) ([]zl.EchoRef, error) {
	refs := make([]zl.EchoRef, count)
	_, err := workload.ForCount(ctx, callers, int64(count), func(_ int, seq int64) error {
		i := seq - 1
		id := fmt.Sprintf("%s-%05d", prefix, i)
		if _, err := zl.OpenEcho(n, id).Ping(ctx, &zl.Ping{Seq: seq}); err != nil {
			return err
		}
		refs[i] = zl.EchoOf(n, id)
		return nil
	})
	return refs, err
}

// remoteCold activates p.Count fresh Instance Spots with intent calls from p.Callers callers of
// this client-only node: placement puts each on the server process. One Spot is activated
// first, unmeasured, to wait for the connection to the server's node.
func remoteCold(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	if err := warm(ctx, n, "rcold-warm", p.Timeout); err != nil {
		return workload.Result{}, err
	}
	return workload.ForCount(ctx, p.Callers, int64(p.Count), func(_ int, seq int64) error {
		reply, err := zl.OpenEcho(n, fmt.Sprintf("rcold-%07d", seq)).Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
}

// actorCalls spawns one Token into this node's Board and measures request/reply to it through
// the generated Actor reference.
func actorCalls(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	if _, err := zl.LocalBoard(n).Spawn(ctx, &zl.SpawnRequest{Id: "hot"}); err != nil {
		return workload.Result{}, err
	}
	ref := zl.TokenOf(n, "hot")
	return workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		reply, err := ref.Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
}

// channelCalls measures calls of the Service channel, whose one Ready server is this node's.
// The first call is tried again until the node's own server is Ready.
func channelCalls(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	cli := zl.ServiceClient(n)
	deadline := time.Now().Add(p.Timeout)
	for {
		_, err := cli.Ping(ctx, &zl.Ping{Seq: 0})
		if err == nil {
			break
		}
		if !errors.Is(err, sdk.ErrNoReadyTarget) || time.Now().After(deadline) {
			return workload.Result{}, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		reply, err := cli.Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
}

// memory activates p.Objects Instance Spots with intent calls from p.Callers callers, for
// Memory100k calls each once more through a plain reference, and measures the heap's growth
// and the process's memory. The caller keeps nothing of its own: every ID and reference is made
// again for each call.
func memory(ctx context.Context, n *Node, p workload.Params) (workload.Result, error) {
	id := func(seq int64) string { return fmt.Sprintf("m-%07d", seq) }
	before := workload.MarkHeap()
	res, err := workload.ForCount(ctx, p.Callers, int64(p.Objects), func(_ int, seq int64) error {
		_, err := zl.OpenEcho(n, id(seq)).Ping(ctx, &zl.Ping{Seq: seq})
		return err
	})
	if err != nil {
		return res, err
	}
	if p.Workload == workload.Memory100k {
		if _, err := workload.ForCount(ctx, p.Callers, int64(p.Objects), func(_ int, seq int64) error {
			reply, err := zl.EchoOf(n, id(seq)).Ping(ctx, &zl.Ping{Seq: seq})
			if err != nil {
				return err
			}
			return workload.CheckSeq(seq, reply.GetSeq())
		}); err != nil {
			return res, err
		}
	}
	if got := n.MeshStatus().Placement.ActiveSpotCount; got != p.Objects {
		return res, fmt.Errorf("%d Spots active after %d activations", got, p.Objects)
	}
	res.Memory, err = workload.MeasureMemory(before, p.Objects)
	return res, err
}
