package rttest

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

// LedgerType is the stable type name of the test Ledger, an Instance Spot that records every
// message ID it runs, so that a test can prove no message ran twice.
const LedgerType = "rttest.Ledger"

// Ledger methods: Record runs a message (its request and reply are the message ID), Count
// answers how many messages this activation ran, Note is a one-way Record.
const (
	LedgerRecord = "Record"
	LedgerCount  = "Count"
	LedgerNote   = "Note"
	// LedgerSleep waits for the given milliseconds or until its context ends, and answers the
	// context's error then.
	LedgerSleep = "Sleep"
	// LedgerWhere answers the node the Ledger runs on.
	LedgerWhere = "Where"
)

// UserLedgerType is the Ledger as a User Spot: made only by an explicit create.
const UserLedgerType = "rttest.UserLedger"

// LedgerDesc describes the Ledger type.
var LedgerDesc = sdk.SpotDesc{Name: LedgerType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
	{
		Name:       LedgerRecord,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			l := impl.(*ledger)
			id := req.(*wrapperspb.StringValue).GetValue()
			l.ran(l.sc.ID(), id)
			l.n++
			return wrapperspb.String(id), nil
		},
	},
	{
		Name:       LedgerCount,
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			return wrapperspb.Int64(impl.(*ledger).n), nil
		},
	},
	{
		Name:       LedgerSleep,
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			l := impl.(*ledger)
			ms := req.(*wrapperspb.Int64Value).GetValue()
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return wrapperspb.Int64(ms), nil
			case <-ctx.Done():
				l.ran(l.sc.ID(), "sleep-ended:"+ctx.Err().Error())
				return nil, ctx.Err()
			}
		},
	},
	{
		Name:       LedgerWhere,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			return wrapperspb.String(string(impl.(*ledger).sc.Node())), nil
		},
	},
	{
		Name:       LedgerNote,
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			l := impl.(*ledger)
			l.ran(l.sc.ID(), req.(*wrapperspb.StringValue).GetValue())
			l.n++
			return nil, nil
		},
	},
}}

// UserLedgerDesc describes the User Ledger: the Ledger's methods on a User Spot.
var UserLedgerDesc = sdk.SpotDesc{Name: UserLedgerType, Kind: sdk.KindUser, Methods: LedgerDesc.Methods}

type ledger struct {
	sc  sdk.SpotContext
	ran func(spot, msg string)
	n   int64
	pad int // bytes of state beyond the count (benchmarks)
}

// MarshalState carries the count of messages run across a relocation.
func (l *ledger) MarshalState(context.Context) ([]byte, error) {
	return append(binary.AppendUvarint(make([]byte, 0, 10+l.pad), uint64(l.n)), make([]byte, l.pad)...), nil
}

// OnClose reports the close as the message "closed:<reason>".
func (l *ledger) OnClose(_ context.Context, reason sdk.CloseReason) {
	l.ran(l.sc.ID(), "closed:"+reason.String())
}

// RegisterLedger registers the Ledger type; ran is told of every message a Ledger runs, with
// the Spot's ID and the message ID. built counts factory runs when not nil.
func RegisterLedger(r sdk.Registrar, ran func(spot, msg string), built func(spot string)) error {
	return registerLedger(r, &LedgerDesc, ran, built, 0)
}

// RegisterLedgerWithState is RegisterLedger whose Ledgers carry pad more bytes of state across a
// relocation.
func RegisterLedgerWithState(r sdk.Registrar, ran func(spot, msg string), pad int) error {
	return registerLedger(r, &LedgerDesc, ran, nil, pad)
}

// RegisterUserLedger registers the User Ledger, as RegisterLedger does the Ledger.
func RegisterUserLedger(r sdk.Registrar, ran func(spot, msg string)) error {
	return registerLedger(r, &UserLedgerDesc, ran, nil, 0)
}

func registerLedger(r sdk.Registrar, desc *sdk.SpotDesc, ran func(spot, msg string), built func(spot string), pad int) error {
	return r.RegisterSpot(desc, func(sc sdk.SpotContext) (any, error) {
		if built != nil {
			built(sc.ID())
		}
		l := &ledger{sc: sc, ran: ran, pad: pad}
		if st := sc.RestoredState(); st != nil {
			n, k := binary.Uvarint(st)
			if k <= 0 {
				return nil, errors.New("ledger: restored state does not decode")
			}
			l.n = int64(n)
		}
		return l, nil
	})
}

// Runs collects what Ledgers ran: message ID -> how many times.
type Runs struct {
	mu   sync.Mutex
	runs map[string]int
}

// Add records one run of msg.
func (r *Runs) Add(_ string, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = make(map[string]int)
	}
	r.runs[msg]++
}

// Twice returns the messages that ran more than once. Close reports ("closed:<reason>") are
// not messages: every Spot makes the same ones.
func (r *Runs) Twice() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for m, n := range r.runs {
		if n > 1 && !strings.HasPrefix(m, "closed:") {
			out = append(out, m)
		}
	}
	return out
}

// Count returns how many times msg ran.
func (r *Runs) Count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[msg]
}

// Len returns the number of distinct messages that ran.
func (r *Runs) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}
