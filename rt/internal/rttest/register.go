package rttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/rttest/chaospb"
	"github.com/zlink-go/zlink/sdk"
)

// The fault suite's registers: an Instance Spot (RegisterType) and a User Spot (AccountType)
// that hold one integer. Each keeps its value in etcd, under a key of its own outside the
// runtime's, and writes it through fenced on its activation's Fence: a write is taken only
// while no later activation of the same Spot has claimed the key. That is how an application
// makes external state safe against the overlap the runtime cannot rule out (a turn already
// running when the lease ends), and it keeps a register's value across a failover, so that the
// history its callers see can be checked for linearizability.
const (
	RegisterType = "rttest.Register"
	AccountType  = "rttest.Account"
)

// Register methods. Each journals its operation's ID with the activation's epoch when its turn
// starts. Put, Add and CompareAndSet write through; Get answers from memory; Touch is one-way
// and only takes a while (TouchTakes), so that a burst of them queues.
const (
	RegisterPut   = "Put"
	RegisterGet   = "Get"
	RegisterAdd   = "Add"
	RegisterCAS   = "CompareAndSet"
	RegisterTouch = "Touch"
)

// TouchTakes is how long a Touch turn takes.
const TouchTakes = 5 * time.Millisecond

// Application error codes of the registers.
const (
	// CodeFenced: the write was refused because a later activation claimed the register; it
	// was not applied.
	CodeFenced = "fenced"
	// CodeUnknown: etcd's answer to the write was lost; it may or may not have been applied.
	CodeUnknown = "unknown"
)

func registerMethods() []sdk.MethodDesc {
	method := func(name string, op func(r *register, ctx context.Context, in *chaospb.Op) (*chaospb.Result, error)) sdk.MethodDesc {
		return sdk.MethodDesc{
			Name:       name,
			NewRequest: func() proto.Message { return new(chaospb.Op) },
			NewReply:   func() proto.Message { return new(chaospb.Result) },
			Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
				r := impl.(*register)
				in := req.(*chaospb.Op)
				r.j.Record(r.sc, in.GetId())
				return op(r, ctx, in)
			},
		}
	}
	return []sdk.MethodDesc{
		method(RegisterPut, func(r *register, ctx context.Context, in *chaospb.Op) (*chaospb.Result, error) {
			return r.write(ctx, func(int64) (int64, bool) { return in.GetValue(), true })
		}),
		method(RegisterGet, func(r *register, ctx context.Context, _ *chaospb.Op) (*chaospb.Result, error) {
			return r.read(ctx)
		}),
		method(RegisterAdd, func(r *register, ctx context.Context, in *chaospb.Op) (*chaospb.Result, error) {
			return r.write(ctx, func(v int64) (int64, bool) { return v + in.GetValue(), true })
		}),
		{
			Name:       RegisterTouch,
			OneWay:     true,
			NewRequest: func() proto.Message { return new(chaospb.Op) },
			Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
				r := impl.(*register)
				r.j.Record(r.sc, req.(*chaospb.Op).GetId())
				select {
				case <-time.After(TouchTakes):
				case <-ctx.Done():
				}
				return nil, nil
			},
		},
		method(RegisterCAS, func(r *register, ctx context.Context, in *chaospb.Op) (*chaospb.Result, error) {
			return r.write(ctx, func(v int64) (int64, bool) {
				if v != in.GetExpect() {
					return v, false
				}
				return in.GetValue(), true
			})
		}),
	}
}

// RegisterDesc and AccountDesc describe the registers.
var (
	RegisterDesc = sdk.SpotDesc{Name: RegisterType, Kind: sdk.KindInstance, Methods: registerMethods()}
	AccountDesc  = sdk.SpotDesc{Name: AccountType, Kind: sdk.KindUser, Methods: registerMethods()}
)

// RegisterRegisters registers both register types; their values live in etcd under prefix,
// through cli, and every turn they start goes to j.
func RegisterRegisters(r sdk.Registrar, j Journal, cli *clientv3.Client, prefix string) error {
	factory := func(sc sdk.SpotContext) (any, error) {
		reg := &register{sc: sc, j: j, cli: cli, prefix: prefix + "/" + sc.Type() + "/" + sc.ID()}
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		defer cancel()
		if err := reg.claim(ctx); err != nil {
			return nil, err
		}
		return reg, nil
	}
	return errors.Join(r.RegisterSpot(&RegisterDesc, factory), r.RegisterSpot(&AccountDesc, factory))
}

// claimTimeout bounds the claim a new activation makes.
const claimTimeout = 10 * time.Second

type register struct {
	sc     sdk.SpotContext
	j      Journal
	cli    *clientv3.Client
	prefix string

	mu    sync.Mutex // a turn at a time already; this only keeps the race detector informed
	value int64
	dirty bool // a write's outcome is unknown: read the value again before using it
}

func (r *register) epochKey() string { return r.prefix + "/epoch" }
func (r *register) valueKey() string { return r.prefix + "/value" }

// epoch is the activation's Fence epoch, padded so that etcd compares it as a number.
func (r *register) epoch() string { return fmt.Sprintf("%020d", r.sc.Fence().Epoch) }

// claim makes this activation the register's writer and loads its value. A later activation
// that claimed it already makes the creation fail.
func (r *register) claim(ctx context.Context) error {
	ek := r.epochKey()
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ek), "=", 0)).
		Then(clientv3.OpPut(ek, r.epoch()), clientv3.OpGet(r.valueKey())).
		Else(clientv3.OpGet(ek)).
		Commit()
	if err != nil {
		return fmt.Errorf("claim %s: %w", r.prefix, err)
	}
	if !resp.Succeeded {
		stored := ""
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			stored = string(kvs[0].Value)
		}
		if stored > r.epoch() {
			return fmt.Errorf("claim %s: a later activation (epoch %s) claimed it", r.prefix, stored)
		}
		resp, err = r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(ek), "=", stored)).
			Then(clientv3.OpPut(ek, r.epoch()), clientv3.OpGet(r.valueKey())).
			Commit()
		if err != nil {
			return fmt.Errorf("claim %s: %w", r.prefix, err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("claim %s: claimed by another activation meanwhile", r.prefix)
		}
	}
	return r.loadFrom(resp.Responses[1].GetResponseRange().Kvs)
}

func (r *register) loadFrom(kvs []*mvccpb.KeyValue) error {
	r.value = 0
	if len(kvs) > 0 {
		v, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
		if err != nil {
			return fmt.Errorf("register %s: stored value: %w", r.prefix, err)
		}
		r.value = v
	}
	r.dirty = false
	return nil
}

// reload reads the value again, fenced: only while this activation holds the register.
func (r *register) reload(ctx context.Context) error {
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(r.epochKey()), "=", r.epoch())).
		Then(clientv3.OpGet(r.valueKey())).
		Commit()
	if err != nil {
		return sdk.Errorf(CodeUnknown, "reload %s: %v", r.prefix, err)
	}
	if !resp.Succeeded {
		return sdk.Errorf(CodeFenced, "%s: a later activation holds it", r.prefix)
	}
	return r.loadFrom(resp.Responses[0].GetResponseRange().Kvs)
}

func (r *register) result(ok bool) *chaospb.Result {
	return &chaospb.Result{Value: r.value, Ok: ok, Epoch: r.sc.Fence().Epoch, Node: string(r.sc.Node())}
}

func (r *register) read(ctx context.Context) (*chaospb.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty {
		if err := r.reload(ctx); err != nil {
			return nil, err
		}
	}
	return r.result(true), nil
}

// write applies next to the value and writes the result through, fenced on this activation's
// claim; the value in memory changes only once etcd took it.
func (r *register) write(ctx context.Context, next func(int64) (int64, bool)) (*chaospb.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty {
		if err := r.reload(ctx); err != nil {
			return nil, err
		}
	}
	v, ok := next(r.value)
	if !ok {
		return r.result(false), nil
	}
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(r.epochKey()), "=", r.epoch())).
		Then(clientv3.OpPut(r.valueKey(), strconv.FormatInt(v, 10))).
		Commit()
	if err != nil {
		r.dirty = true
		return nil, sdk.Errorf(CodeUnknown, "write %s: %v", r.prefix, err)
	}
	if !resp.Succeeded {
		return nil, sdk.Errorf(CodeFenced, "%s: a later activation holds it", r.prefix)
	}
	r.value = v
	return r.result(true), nil
}

// RelayType is an Entry Spot on every node that passes a register operation on through its
// node's Client: the fault suite calls registers through it, so that calls also start on the
// nodes themselves, where a stale local activation would be found first.
const RelayType = "rttest.Relay"

// RelayMethod passes an Op on to the register it names; its answer is the register's.
const RelayMethod = "Relay"

// CodeRefused is a Relay's error code for an operation the runtime refused unrun.
const CodeRefused = "refused"

// RelayDesc describes the Relay.
var RelayDesc = sdk.SpotDesc{Name: RelayType, Kind: sdk.KindEntry, Methods: []sdk.MethodDesc{{
	Name:       RelayMethod,
	NewRequest: func() proto.Message { return new(chaospb.Op) },
	NewReply:   func() proto.Message { return new(chaospb.Result) },
	Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
		sc := impl.(sdk.SpotContext)
		in := req.(*chaospb.Op)
		t := sdk.InstanceIntent(RegisterType, in.GetObject()).WithDesc(&RegisterDesc)
		if in.GetAccount() {
			t = sdk.UserTarget(AccountType, in.GetObject()).WithDesc(&AccountDesc)
		}
		out, err := sc.Client().Call(ctx, t, in.GetMethod(), in)
		if err != nil {
			var ae *sdk.AppError
			if !errors.As(err, &ae) && NotRun(err) {
				return nil, sdk.Errorf(CodeRefused, "%v", err)
			}
			return nil, err
		}
		return out, nil
	},
}}}

// RegisterRelay registers the Relay.
func RegisterRelay(r sdk.Registrar) error {
	return r.RegisterSpot(&RelayDesc, func(sc sdk.SpotContext) (any, error) { return sc, nil })
}

// NotRun reports whether err is one of the runtime's answers that say the call did not run
// and never will: a refusal before the Spot's queue, or work dropped unrun.
func NotRun(err error) bool {
	for _, refused := range []error{
		sdk.ErrNotFound, sdk.ErrStaleRoute, sdk.ErrQueueFull, sdk.ErrInboundBudget, sdk.ErrCapacityExceeded,
		sdk.ErrInvalidArgument, sdk.ErrInvalidID, sdk.ErrUnhandled, sdk.ErrCreationFailed, sdk.ErrNotServing,
		sdk.ErrStoreUnavailable, sdk.ErrAlreadyExists, sdk.ErrMessageTooLarge,
	} {
		if errors.Is(err, refused) {
			return true
		}
	}
	return false
}
