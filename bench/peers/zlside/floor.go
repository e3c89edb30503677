package zlside

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/bench/peers/zl"
)

// LocalFloor measures what Go allows on this machine for the structure of a call to one
// active object, with no runtime at all: callers send a request through a channel to one
// goroutine, which answers each on its caller's own channel, for warmup and then duration, as
// the ZLink run that it follows measured. It is what the local request/reply rows are judged
// against: on a machine whose processors stall, part of every tail is the machine's, and this
// probe meets the stalls of the same minute (not the same ones: its window comes right after
// ZLink's).
func LocalFloor(ctx context.Context, callers int, warmup, duration time.Duration) (*workload.Floor, error) {
	type request struct {
		seq   int64
		reply chan int64
	}
	in := make(chan request, callers)
	var server sync.WaitGroup
	server.Go(func() {
		for r := range in {
			r.reply <- r.seq
		}
	})
	defer server.Wait()
	defer close(in)
	replies := make([]chan int64, callers)
	for c := range replies {
		replies[c] = make(chan int64, 1)
	}
	res, err := workload.ForDuration(ctx, callers, warmup, duration, func(c int, seq int64) error {
		in <- request{seq, replies[c]}
		if got := <-replies[c]; got != seq {
			return fmt.Errorf("latency floor: answer %d to request %d", got, seq)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return workload.FloorOf(res), nil
}

// ChannelFloor measures what Go allows on this machine for a stateless server's calls that run
// on their callers' goroutines, with no runtime at all: callers call the Service server's
// handler directly, for warmup and then duration, as the ZLink run that it follows measured.
// Neither it nor the ZLink run blocks its callers, so both share the processors by Go's
// preemption of running goroutines: a call under way when its goroutine is preempted waits
// for that goroutine's next turn, and the tails of both show it.
func ChannelFloor(ctx context.Context, callers int, warmup, duration time.Duration) (*workload.Floor, error) {
	srv := service{}
	res, err := workload.ForDuration(ctx, callers, warmup, duration, func(_ int, seq int64) error {
		reply, err := srv.Ping(ctx, &zl.Ping{Seq: seq})
		if err != nil {
			return err
		}
		return workload.CheckSeq(seq, reply.GetSeq())
	})
	if err != nil {
		return nil, err
	}
	return workload.FloorOf(res), nil
}

// oneWayQueue is how many messages each receiver of the one-way floor holds before its
// senders block: a bounded queue, as a Spot's lane is.
const oneWayQueue = 1024

// OneWayFloor measures what Go allows on this machine for the structure of one-way sends to
// objects, with no runtime at all: callers send count messages, each allocated as the ZLink
// run's are, round robin through buffered channels to objects goroutines, each of which
// counts what it receives; the run ends when every message was counted. A full channel
// blocks its sender.
func OneWayFloor(ctx context.Context, callers, objects, count int) (*workload.Floor, error) {
	if objects < 1 {
		return nil, fmt.Errorf("one-way floor: %d objects", objects)
	}
	queues := make([]chan *zl.Tick, objects)
	counted := make([]int64, objects)
	var receivers sync.WaitGroup
	begin := time.Now()
	for i := range queues {
		queues[i] = make(chan *zl.Tick, oneWayQueue)
		receivers.Go(func() {
			for t := range queues[i] {
				if t.GetSeq() > 0 {
					counted[i]++
				}
			}
		})
	}
	_, err := workload.ForCount(ctx, callers, int64(count), func(_ int, seq int64) error {
		select {
		case queues[seq%int64(objects)] <- &zl.Tick{Seq: seq}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	for _, q := range queues {
		close(q)
	}
	receivers.Wait()
	elapsed := time.Since(begin)
	if err != nil {
		return nil, fmt.Errorf("one-way floor: %w", err)
	}
	var sum int64
	for _, n := range counted {
		sum += n
	}
	if sum != int64(count) {
		return nil, fmt.Errorf("one-way floor: counted %d of %d messages", sum, count)
	}
	return &workload.Floor{Rate: float64(count) / elapsed.Seconds()}, nil
}
