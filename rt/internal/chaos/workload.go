package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/rt/internal/rttest/chaospb"
	"github.com/zlink-go/zlink/sdk"
)

// Outcome is what a caller can know of an operation from its answer.
type Outcome uint8

const (
	// OK: it ran and answered.
	OK Outcome = iota + 1
	// Refused: it certainly did not take effect (refused before it ran, or a write the
	// register fenced out).
	Refused
	// Unknown: it may or may not have taken effect (a deadline, a lost connection, an etcd
	// answer lost).
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Object is one register the workload drives: an Instance register (created by the first
// call with create-intent) or a User account (created explicitly).
type Object struct {
	Name string
	Kind sdk.SpotKind
}

func (o Object) target() sdk.Target {
	if o.Kind == sdk.KindUser {
		return sdk.UserTarget(rttest.AccountType, o.Name).WithDesc(&rttest.AccountDesc)
	}
	return sdk.InstanceIntent(rttest.RegisterType, o.Name).WithDesc(&rttest.RegisterDesc)
}

// Op is one operation a caller made and what it learnt.
type Op struct {
	Client       int
	Object       string
	Method       string
	Input        *chaospb.Op
	Call, Return time.Time
	Deadline     time.Duration
	// OneWay: a Send; its OK means it was admitted, not that it ran.
	OneWay bool
	// Relay, when set, is the node whose Relay passed the operation on.
	Relay   sdk.NodeID
	Output  *chaospb.Result
	Err     error
	Outcome Outcome
}

// Workload drives registers with numbered operations from several callers and records every
// one of them.
type Workload struct {
	// Client is where the calls are made from.
	Client sdk.Client
	// Objects are the registers driven.
	Objects []Object
	// Callers is the number of concurrent callers (default 8).
	Callers int
	// Deadline bounds every call (default 2 s) but those of the patient callers.
	Deadline time.Duration
	// Patient is how many of the callers wait PatientDeadline (default 20 s) for each call:
	// their requests are still wanted when a paused owner wakes up (default 2).
	Patient         int
	PatientDeadline time.Duration
	// Pace is each caller's pause between its calls (default 5 ms): it keeps histories small
	// enough to check.
	Pace time.Duration
	// MaxUnknownWrites is how many writes of unknown outcome an object may collect before the
	// callers only read it (default 16): each makes the linearizability check harder.
	MaxUnknownWrites int
	// MaxOpsPerObject bounds the operations made on one object (default 2,000), so that its
	// history is checked within the scenario's time.
	MaxOpsPerObject int
	// Prefix starts every operation ID, so that the IDs of different workloads never meet.
	Prefix string
	// Relays are nodes whose Relay Entry Spot a share of the calls go through (RelayShare,
	// percent, default 30), so that calls also start inside the mesh.
	Relays     []sdk.NodeID
	RelayShare int

	seq     atomic.Int64
	mu      sync.Mutex
	ops     []Op
	unknown map[string]int // writes of unknown outcome per object
	count   map[string]int // operations with a reply per object
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

func (w *Workload) defaults() {
	if w.Callers <= 0 {
		w.Callers = 8
	}
	if w.Deadline <= 0 {
		w.Deadline = 2 * time.Second
	}
	if w.Pace <= 0 {
		w.Pace = 5 * time.Millisecond
	}
	if w.MaxUnknownWrites <= 0 {
		w.MaxUnknownWrites = 16
	}
	if w.Patient == 0 {
		w.Patient = 2
	}
	if w.PatientDeadline <= 0 {
		w.PatientDeadline = 20 * time.Second
	}
	if w.RelayShare == 0 {
		w.RelayShare = 30
	}
	if w.MaxOpsPerObject <= 0 {
		w.MaxOpsPerObject = 2000
	}
	w.unknown, w.count = map[string]int{}, map[string]int{}
}

// Registers returns n Instance registers and m User accounts named after prefix.
func Registers(prefix string, n, m int) []Object {
	var out []Object
	for i := range n {
		out = append(out, Object{Name: fmt.Sprintf("%s-r%d", prefix, i), Kind: sdk.KindInstance})
	}
	for i := range m {
		out = append(out, Object{Name: fmt.Sprintf("%s-a%d", prefix, i), Kind: sdk.KindUser})
	}
	return out
}

// Start starts the callers; they run until Stop.
func (w *Workload) Start() {
	w.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	for i := range w.Callers {
		w.wg.Go(func() {
			w.caller(ctx, i)
		})
	}
}

// Stop stops the callers and waits until each call in flight has ended.
func (w *Workload) Stop() {
	w.stop()
	w.wg.Wait()
}

// Ops returns every operation recorded so far.
func (w *Workload) Ops() []Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Op(nil), w.ops...)
}

func (w *Workload) caller(ctx context.Context, client int) {
	rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
	last := map[string]int64{}
	for ctx.Err() == nil {
		obj := w.Objects[rng.IntN(len(w.Objects))]
		if w.full(obj) {
			if !sleepCtx(ctx, w.Pace) {
				return
			}
			continue
		}
		if rng.IntN(100) < 5 {
			w.touch(ctx, client, obj)
		} else {
			op := w.pick(rng, client, obj, last)
			w.do(ctx, obj, &op)
			if op.Outcome == OK {
				last[obj.Name] = op.Output.GetValue()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.Pace):
		}
	}
}

// pick chooses the next operation: reads mostly, and only reads on an object with too many
// writes of unknown outcome.
func (w *Workload) pick(rng *rand.Rand, client int, obj Object, last map[string]int64) Op {
	id := fmt.Sprintf("%s.c%d-%d", w.Prefix, client, w.seq.Add(1))
	in := &chaospb.Op{Id: id}
	op := Op{Client: client, Object: obj.Name, Input: in, Method: rttest.RegisterGet}
	if len(w.Relays) > 0 && rng.IntN(100) < w.RelayShare {
		op.Relay = w.Relays[rng.IntN(len(w.Relays))]
	}
	w.mu.Lock()
	readOnly := w.unknown[obj.Name] >= w.MaxUnknownWrites
	w.mu.Unlock()
	if readOnly {
		return op
	}
	switch r := rng.IntN(100); {
	case r < 40:
	case r < 65:
		op.Method, in.Value = rttest.RegisterPut, rng.Int64N(1000)
	case r < 90:
		op.Method, in.Value = rttest.RegisterAdd, 1+rng.Int64N(9)
	default:
		op.Method, in.Expect, in.Value = rttest.RegisterCAS, last[obj.Name], rng.Int64N(1000)
	}
	return op
}

// do makes one call and records it. A User account that does not exist is created
// explicitly (its owner may have died), and the call is recorded as refused.
func (w *Workload) do(ctx context.Context, obj Object, op *Op) {
	op.Deadline = w.Deadline
	if op.Client < w.Patient {
		op.Deadline = w.PatientDeadline
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Deadline)
	defer cancel()
	target, method := obj.target(), op.Method
	if op.Relay != "" {
		op.Input.Object, op.Input.Account, op.Input.Method = obj.Name, obj.Kind == sdk.KindUser, op.Method
		target, method = sdk.EntryTarget(rttest.RelayType, op.Relay).WithDesc(&rttest.RelayDesc), rttest.RelayMethod
	}
	op.Call = time.Now()
	out, err := w.Client.Call(cctx, target, method, op.Input)
	op.Return = time.Now()
	op.Err = err
	if err == nil {
		op.Output, op.Outcome = out.(*chaospb.Result), OK
	} else {
		op.Outcome = Classify(err)
	}
	w.mu.Lock()
	w.ops = append(w.ops, *op)
	w.count[obj.Name]++
	if op.Outcome == Unknown && op.Method != rttest.RegisterGet {
		w.unknown[obj.Name]++
	}
	w.mu.Unlock()
	if obj.Kind == sdk.KindUser && errors.Is(err, sdk.ErrNotFound) {
		_ = w.Client.Create(cctx, obj.target())
	}
}

// full reports whether obj has all the operations a history may have: the linearizability
// check of a longer one could outlast the scenario.
func (w *Workload) full(obj Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count[obj.Name] >= w.MaxOpsPerObject
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// touchBurst is how many one-way Touch messages a burst sends: they queue behind each other.
const touchBurst = 20

// touch sends a burst of one-way messages to obj. Each is recorded; OK means admitted. A
// message admitted to an owner that then lost its lease is dropped unrun, so one-way messages
// are checked for duplicates and for running on a stale owner, not for being lost.
func (w *Workload) touch(ctx context.Context, client int, obj Object) {
	for range touchBurst {
		op := Op{Client: client, Object: obj.Name, Method: rttest.RegisterTouch, OneWay: true,
			Input: &chaospb.Op{Id: fmt.Sprintf("%s.c%d-%d", w.Prefix, client, w.seq.Add(1))}, Deadline: w.Deadline}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Deadline)
		op.Call = time.Now()
		op.Err = w.Client.Send(cctx, obj.target(), op.Method, op.Input)
		op.Return = time.Now()
		cancel()
		op.Outcome = OK
		if op.Err != nil {
			op.Outcome = Classify(op.Err)
		}
		w.mu.Lock()
		w.ops = append(w.ops, op)
		w.mu.Unlock()
		if op.Err != nil {
			return
		}
	}
}

// Classify tells from an error whether the operation certainly did not take effect.
func Classify(err error) Outcome {
	var ae *sdk.AppError
	if errors.As(err, &ae) {
		if ae.Code == rttest.CodeFenced || ae.Code == rttest.CodeRefused {
			return Refused
		}
		return Unknown
	}
	if rttest.NotRun(err) {
		return Refused
	}
	return Unknown
}
