package zlside

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdCeiling measures what etcd allows for cold activation: the same two fenced writes per
// activation that a ZLink activation makes, each a nested transaction as the runtime's group
// commit sends them: the reservation (the record's key has CreateRevision 0 and the owner's
// node key is on the owner's lease; then put the record, else read it) and the Ready commit
// (the record is at the reservation's ModRevision and the node key is still on the lease; then
// put the record), with records and keys of a real record's size. It makes count activations
// with at most callers of them in flight, with ideal batching and nothing else: no runtime, no
// placement, no activation. It tries the in-flight activations split into 1, 2 and 4
// pipelines of batches (each batch one transaction of reserves, then one of readies) and
// returns the best rate, in activations per second.
func EtcdCeiling(ctx context.Context, endpoints []string, count, callers int) (float64, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	// Long enough for every run: the lease is not kept alive, and the fence compares it.
	lease, err := c.Grant(ctx, 3600)
	if err != nil {
		return 0, err
	}
	best := 0.0
	for i, pipes := range []int{1, 2, 4} {
		// A root of its own per run: the records stay, as a Spot's do.
		root := fmt.Sprintf("/zlink/ceiling-%x-%d/", time.Now().UnixNano(), i)
		node := root + "nodes/node-1"
		if _, err := c.Put(ctx, node, nodeDescriptor, clientv3.WithLease(lease.ID)); err != nil {
			return 0, err
		}
		rate, err := ceilingRun(ctx, c, fence{node: node, lease: lease.ID}, root+"spots/Echo/cold-", count, callers, pipes)
		if err != nil {
			return 0, err
		}
		best = max(best, rate)
	}
	return best, nil
}

// recordValue is the size of a Spot's location record (its phase, owner node and lease,
// creation attempt, kind and generation); nodeDescriptor stands for the owner's node key.
var (
	recordValue    = strings.Repeat("r", 36)
	nodeDescriptor = strings.Repeat("n", 64)
)

// maxBatch is the most writes the runtime's group commit puts in one transaction by default.
const maxBatch = 128 - 5

// fence is the owner's node key and the lease it must be on: the second compare of both writes.
type fence struct {
	node  string
	lease clientv3.LeaseID
}

// ceilingRun activates count keys under prefix in pipes pipelines of callers/pipes keys per
// batch.
func ceilingRun(ctx context.Context, c *clientv3.Client, f fence, prefix string, count, callers, pipes int) (float64, error) {
	// A batch is no wider than the runtime's group commit makes one (etcd's default 128
	// operations per transaction, less the widest write).
	per := min(max(1, callers/pipes), maxBatch)
	batches := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	begin := time.Now()
	for range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := range batches {
				if err := ceilingBatch(ctx, c, f, prefix, from, min(from+per, count)); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
feed:
	for from := 0; from < count; from += per {
		select {
		case batches <- from:
		case <-ctx.Done():
			break feed
		}
	}
	close(batches)
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(count) / time.Since(begin).Seconds(), nil
}

// ceilingBatch reserves keys [from, to) in one transaction, then makes them Ready in another.
func ceilingBatch(ctx context.Context, c *clientv3.Client, f fence, prefix string, from, to int) error {
	onLease := clientv3.Compare(clientv3.LeaseValue(f.node), "=", f.lease)
	reserve := make([]clientv3.Op, 0, to-from)
	for i := from; i < to; i++ {
		k := fmt.Sprintf("%s%07d", prefix, i)
		reserve = append(reserve, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0), onLease},
			[]clientv3.Op{clientv3.OpPut(k, recordValue)},
			[]clientv3.Op{clientv3.OpGet(k)}))
	}
	r1, err := c.Txn(ctx).Then(reserve...).Commit()
	if err != nil {
		return err
	}
	ready := make([]clientv3.Op, 0, to-from)
	for i := from; i < to; i++ {
		if !r1.Responses[i-from].GetResponseTxn().GetSucceeded() {
			return fmt.Errorf("ceiling: the reservation of key %d failed its fence: the key existed, or the node key left its lease", i)
		}
		k := fmt.Sprintf("%s%07d", prefix, i)
		ready = append(ready, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", r1.Header.Revision), onLease},
			[]clientv3.Op{clientv3.OpPut(k, recordValue)}, nil))
	}
	r2, err := c.Txn(ctx).Then(ready...).Commit()
	if err != nil {
		return err
	}
	for i, r := range r2.Responses {
		if !r.GetResponseTxn().GetSucceeded() {
			return fmt.Errorf("ceiling: the Ready write of key %d failed its fence: the key changed between its two writes, or the node key left its lease", from+i)
		}
	}
	return nil
}
