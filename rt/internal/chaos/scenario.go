package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// Scenario is one fault, injected while a workload runs. Adding one is writing its Fault.
type Scenario struct {
	Name string
	// Fault injects the fault and heals it; it returns once everything is healed (the
	// processes it stopped are running again, the proxies pass).
	Fault func(tb testing.TB, c *Cluster)
	// Before and After are how long the workload runs before the fault and after the heal
	// (defaults 2 s and 3 s).
	Before, After time.Duration
	// Registers and Accounts are how many Instance registers and User accounts the workload
	// drives (defaults 12 and 6).
	Registers, Accounts int
	// Callers and Deadline configure the workload (defaults 8 and 2 s).
	Callers  int
	Deadline time.Duration
}

// RecoveryBound is how long after the heal every object must answer again.
const RecoveryBound = 60 * time.Second

// Run runs sc on c and checks it: the workload's record, the nodes' journals, the store's
// records and each object's history. dir receives the visualization of any history that is
// not linearizable.
func Run(tb testing.TB, c *Cluster, sc Scenario, dir string) Result {
	tb.Helper()
	if sc.Before <= 0 {
		sc.Before = 2 * time.Second
	}
	if sc.After <= 0 {
		sc.After = 3 * time.Second
	}
	if sc.Registers == 0 && sc.Accounts == 0 {
		sc.Registers, sc.Accounts = 12, 6
	}
	r := Result{Scenario: sc.Name}
	objects := Registers(sc.Name, sc.Registers, sc.Accounts)
	for _, o := range objects {
		if o.Kind != sdk.KindUser {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := c.Driver.Create(ctx, o.target()); err != nil {
			tb.Fatalf("chaos: create %s: %v", o.Name, err)
		}
		cancel()
	}
	w := &Workload{Client: c.Driver, Objects: objects, Callers: sc.Callers, Deadline: sc.Deadline, Prefix: sc.Name}
	for _, n := range c.Nodes {
		w.Relays = append(w.Relays, n.ID)
	}
	w.Start()
	time.Sleep(sc.Before)
	sc.Fault(tb, c)
	healed := time.Now()
	time.Sleep(sc.After)
	w.Stop()

	ops := w.Ops()
	// Recovery: for each object, the first answer after the heal; objects that gave none
	// during the workload are called until they answer.
	var silent []Object
	for _, o := range objects {
		first := time.Time{}
		for _, op := range ops {
			if op.Object == o.Name && op.Outcome == OK && op.Call.After(healed) && (first.IsZero() || op.Return.Before(first)) {
				first = op.Return
			}
		}
		if first.IsZero() {
			silent = append(silent, o)
			continue
		}
		r.Recovery = max(r.Recovery, first.Sub(healed))
	}
	if len(silent) > 0 {
		var late Result
		AwaitRecovery(&late, c.Driver, silent, RecoveryBound)
		r.Recovery = max(r.Recovery, time.Since(healed))
		r.Unrecovered += late.Unrecovered
		r.Failures = append(r.Failures, late.Failures...)
	}

	st, err := store.New(c.Etcd.Client(), "default", store.WithoutGroupCommit())
	if err != nil {
		tb.Fatalf("chaos: store: %v", err)
	}
	defer st.Close()
	keys := make([]store.SpotKey, len(objects))
	for i, o := range objects {
		typ := rttest.RegisterType
		if o.Kind == sdk.KindUser {
			typ = rttest.AccountType
		}
		keys[i] = store.SpotKey{Type: typ, ID: o.Name}
	}
	CheckLeaks(&r, st, keys, 20*time.Second)

	all, err := ReadExecutions(c.Journals())
	if err != nil {
		tb.Fatalf("chaos: %v", err)
	}
	mine := map[string]bool{}
	for _, o := range objects {
		mine[o.Name] = true
	}
	var execs []Execution
	for _, e := range all {
		if mine[e.Spot] {
			execs = append(execs, e)
		}
	}
	CheckRuns(&r, ops, execs)
	CheckLinearizable(&r, ops, 30*time.Second, dir)
	return r
}
