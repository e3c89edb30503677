package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/rttest/chaospb"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Result is what one scenario measured. The counts that must be zero are Duplicates, Lost,
// SplitBrain, Late, Unrecovered, Leaks and NotLinearizable.
type Result struct {
	Scenario string
	// Ops is the number of operations driven; OK, Refused and Unknown split them by what
	// their callers learnt.
	Ops, OK, Refused, Unknown int
	// Duplicates: operations that ran more than once.
	Duplicates int
	// Lost: operations that answered success but never ran.
	Lost int
	// SplitBrain: turns that an activation started after a later activation of the same
	// object had started one, and turns whose journal line does not show a start of their own
	// (rttest.CheckTurnStarts).
	SplitBrain int
	// Late: calls that ended more than a second after their deadline.
	Late int
	// Slowest is the longest any call took to end, with a reply or an error.
	Slowest time.Duration
	// Recovery is how long after the fault was healed every object answered again.
	Recovery time.Duration
	// Unrecovered: objects that did not answer again within the bound.
	Unrecovered int
	// Leaks: records left Creating, Releasing or on an ended owner after recovery.
	Leaks int
	// Objects and LinOps: the objects and operations checked for linearizability;
	// NotLinearizable: the objects whose history is not (or could not be shown to be).
	Objects, LinOps, NotLinearizable int
	// Failures describe what failed, for the test's output.
	Failures []string
	// Notes are figures of the scenario's own, for the report.
	Notes []string
}

// Failed reports whether any promised zero is not.
func (r *Result) Failed() bool {
	return r.Duplicates+r.Lost+r.SplitBrain+r.Late+r.Unrecovered+r.Leaks+r.NotLinearizable > 0
}

func (r *Result) failf(format string, args ...any) {
	if len(r.Failures) < 20 {
		r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
	}
}

// Execution is one turn a journal recorded: the operation it ran, where, under which
// activation, when the runtime let it start (Start: its lease check's instant, which a pause of
// the process before the handler's first line does not move) and when its handler ran.
type Execution struct {
	ID         string
	Node       string
	Spot       string
	Epoch      int64
	Start, Ran time.Time
}

// ReadExecutions reads the turns of the nodes' journals, each journal's in its order.
func ReadExecutions(paths []string) ([]Execution, error) {
	var out []Execution
	for _, p := range paths {
		turns, err := rttest.ReadJournal(p)
		if err != nil {
			return nil, err
		}
		for _, t := range turns {
			out = append(out, Execution{ID: t.What, Node: t.Node, Spot: t.Spot, Epoch: t.Epoch, Start: t.Start, Ran: t.Ran})
		}
	}
	return out, nil
}

// CheckRuns counts, from the journals, duplicates, lost operations and split-brain turns, and
// from the operations, calls that ended more than a second after their deadline.
func CheckRuns(r *Result, ops []Op, execs []Execution) {
	runs := map[string]int{}
	for _, e := range execs {
		runs[e.ID]++
	}
	for id, n := range runs {
		if n > 1 {
			r.Duplicates++
			r.failf("operation %s ran %d times", id, n)
		}
	}
	for _, op := range ops {
		r.Ops++
		switch op.Outcome {
		case OK:
			r.OK++
			if !op.OneWay && runs[op.Input.GetId()] == 0 {
				r.Lost++
				r.failf("operation %s on %s answered %v but never ran", op.Input.GetId(), op.Object, op.Output)
			}
		case Refused:
			r.Refused++
		case Unknown:
			r.Unknown++
		}
		took := op.Return.Sub(op.Call)
		r.Slowest = max(r.Slowest, took)
		if took > op.Deadline+time.Second {
			r.Late++
			r.failf("operation %s on %s took %v (deadline %v): %v", op.Input.GetId(), op.Object, took, op.Deadline, op.Err)
		}
	}
	// Split brain: per object, a turn of an activation that started after a later activation
	// of the object had started its first. A turn is judged by its Start, so each Start must
	// be its own lease check's: a turn whose journal line cannot show that counts too.
	turns := make([]rttest.Turn, len(execs))
	for i, e := range execs {
		turns[i] = rttest.Turn{Start: e.Start, Ran: e.Ran, Epoch: e.Epoch, Node: e.Node, Spot: e.Spot, What: e.ID}
	}
	for _, p := range rttest.CheckTurnStarts(turns) {
		r.SplitBrain++
		r.failf("%s", p)
	}
	first := map[string]map[int64]time.Time{}
	for _, e := range execs {
		if e.Start.IsZero() {
			continue
		}
		if first[e.Spot] == nil {
			first[e.Spot] = map[int64]time.Time{}
		}
		if f, ok := first[e.Spot][e.Epoch]; !ok || e.Start.Before(f) {
			first[e.Spot][e.Epoch] = e.Start
		}
	}
	for _, e := range execs {
		for epoch, f := range first[e.Spot] {
			if epoch > e.Epoch && f.Before(e.Start) {
				r.SplitBrain++
				r.failf("%s: %s ran %s under epoch %d, started at %v, after epoch %d began at %v",
					e.Spot, e.Node, e.ID, e.Epoch, e.Start.Format(time.StampMicro), epoch, f.Format(time.StampMicro))
				break
			}
		}
	}
}

// AwaitRecovery calls every object until it answers, and reports how long the slowest took;
// objects still failing after within are counted as unrecovered.
func AwaitRecovery(r *Result, client sdk.Client, objects []Object, within time.Duration) {
	start := time.Now()
	deadline := start.Add(within)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, obj := range objects {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var last error
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := client.Call(ctx, obj.target(), rttest.RegisterGet, &chaospb.Op{Id: "recovery-" + obj.Name})
				if obj.Kind == sdk.KindUser && errors.Is(err, sdk.ErrNotFound) {
					_ = client.Create(ctx, obj.target())
				}
				cancel()
				if err == nil {
					mu.Lock()
					r.Recovery = max(r.Recovery, time.Since(start))
					mu.Unlock()
					return
				}
				last = err
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			r.Unrecovered++
			r.failf("%s did not answer within %v after the heal: %v", obj.Name, within, last)
			mu.Unlock()
		})
	}
	wg.Wait()
}

// CheckLeaks reads every Spot record of the mesh and counts those that stay, for settle,
// Creating, Releasing or Unavailable: after recovery every record belongs to a live
// activation or is gone.
func CheckLeaks(r *Result, st *store.Etcd, keys []store.SpotKey, settle time.Duration) {
	deadline := time.Now().Add(settle)
	pending := append([]store.SpotKey(nil), keys...)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []store.SpotKey
		for _, k := range pending {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := st.Lookup(ctx, k)
			cancel()
			if err != nil || (res.State != store.StateReady && res.State != store.StateMissing) {
				still = append(still, k)
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].ID < pending[j].ID })
	for _, k := range pending {
		r.Leaks++
		r.failf("record %s stayed neither Ready nor Missing", k)
	}
}
