package zlside

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zlink-go/zlink/bench/peers/workload"
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
