package paside

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/asynkron/protoactor-go/router"

	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/bench/peers/zl"
)

// Run runs one workload on Proto.Actor and returns its result and a function that stops what
// the run started. A caller that exits the process right after may skip it.
func Run(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	if err := p.Validate(); err != nil {
		return workload.Result{}, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.Warmup+p.Duration+10*p.Timeout)
	defer cancel()
	var (
		res  workload.Result
		stop func() error
		err  error
	)
	switch p.Workload {
	case workload.LocalCall1, workload.LocalCall64, workload.ActorCall64:
		res, stop, err = localCalls(ctx, p)
	case workload.ChannelCall64:
		res, stop, err = poolCalls(ctx, p)
	case workload.RemoteCall1, workload.RemoteCall64:
		res, stop, err = remoteCalls(ctx, p)
	case workload.OneWay64:
		res, stop, err = oneWay(ctx, p)
	case workload.ColdActivation:
		res, stop, err = cold(ctx, p)
	case workload.RemoteColdActivation:
		res, stop, err = remoteCold(ctx, p)
	case workload.Steady10k, workload.Steady10k1024:
		res, stop, err = steady(ctx, p)
	case workload.IdleFootprint, workload.Memory100k:
		res, stop, err = memory(ctx, p)
	}
	if err != nil {
		if stop != nil {
			_ = stop()
		}
		return workload.Result{}, nil, fmt.Errorf("protoactor %s: %w", p.Workload, err)
	}
	return res, stop, nil
}

// ping sends a Ping with RequestFuture and checks the Pong.
func ping(root *actor.RootContext, pid *actor.PID, seq int64, timeout time.Duration) error {
	reply, err := root.RequestFuture(pid, &zl.Ping{Seq: seq}, timeout).Result()
	if err != nil {
		return err
	}
	pong, ok := reply.(*zl.Pong)
	if !ok {
		return fmt.Errorf("%w: %T", workload.ErrWrongReply, reply)
	}
	return workload.CheckSeq(seq, pong.GetSeq())
}

// localCalls measures RequestFuture to one local actor.
func localCalls(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	sys := NewSystem()
	stop := func() error { sys.Shutdown(); return nil }
	pid := sys.Root.Spawn(RequestProps())
	res, err := workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		return ping(sys.Root, pid, seq, p.Timeout)
	})
	return res, stop, err
}

// PoolSize is the number of echo actors of the channel workload's round-robin pool: one per
// caller, so that no caller waits behind another's request at a routee, as none waits at the
// ZLink channel's server, whose calls run concurrently. Pools of 2 and 8 answered 64 callers as
// fast here, within the runs' noise; 256 was slower.
const PoolSize = 64

// poolCalls measures RequestFuture to a round-robin pool router of PoolSize echo actors with
// RequestProps' bounded mailboxes. The router's process sends each message straight to the
// next routee's mailbox, with no mailbox of its own.
func poolCalls(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	sys := NewSystem()
	stop := func() error { sys.Shutdown(); return nil }
	pid := sys.Root.Spawn(router.NewRoundRobinPool(PoolSize, requestOptions()...))
	res, err := workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		return ping(sys.Root, pid, seq, p.Timeout)
	})
	return res, stop, err
}

// remoteCalls measures RequestFuture to the echo actor of the server process over remote.
func remoteCalls(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	if p.Server == "" {
		return workload.Result{}, nil, fmt.Errorf("no server address")
	}
	sys := NewSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	stop := func() error { r.Shutdown(false); sys.Shutdown(); return nil }
	pid := actor.NewPID(p.Server, ServerActorName)
	if err := ping(sys.Root, pid, 0, p.Timeout); err != nil {
		return workload.Result{}, stop, err
	}
	res, err := workload.ForDuration(ctx, p.Callers, p.Warmup, p.Duration, func(_ int, seq int64) error {
		return ping(sys.Root, pid, seq, p.Timeout)
	})
	return res, stop, err
}

// oneWay sends p.Count ticks from p.Callers callers to p.Objects actors and measures until
// every tick was handled; then it checks the actors' own counts.
func oneWay(ctx context.Context, p workload.Params) (workload.Result, func() error, error) {
	sys := NewSystem()
	stop := func() error { sys.Shutdown(); return nil }
	handled := new(atomic.Int64)
	pids := make([]*actor.PID, p.Objects)
	for i := range pids {
		pids[i] = sys.Root.Spawn(EchoProps(handled))
	}
	begin, cpu := time.Now(), workload.StartCPUWindow()
	_, err := workload.ForCount(ctx, p.Callers, int64(p.Count), func(_ int, seq int64) error {
		sys.Root.Send(pids[seq%int64(len(pids))], &zl.Tick{Seq: seq})
		return nil
	})
	if err != nil {
		return workload.Result{}, stop, err
	}
	want := int64(p.Count)
	if err := workload.WaitFor(ctx, "every tick handled", func() bool { return handled.Load() >= want }); err != nil {
		return workload.Result{}, stop, err
	}
	elapsed := time.Since(begin)
	used, procs := cpu.End()
	var sum int64
	for _, pid := range pids {
		reply, err := sys.Root.RequestFuture(pid, &zl.CountRequest{}, p.Timeout).Result()
		if err != nil {
			return workload.Result{}, stop, err
		}
		c, ok := reply.(*zl.CountReply)
		if !ok {
			return workload.Result{}, stop, fmt.Errorf("%w: %T", workload.ErrWrongReply, reply)
		}
		sum += c.GetTicks()
	}
	if sum != want || handled.Load() != want {
		return workload.Result{}, stop, fmt.Errorf("handled %d ticks (actors count %d), sent %d", handled.Load(), sum, want)
	}
	return workload.Result{Ops: want, Seconds: elapsed.Seconds(), CPUSeconds: used, Processes: procs}, stop, nil
}
