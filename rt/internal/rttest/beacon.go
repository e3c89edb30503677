package rttest

import (
	"context"
	"encoding/binary"
	"errors"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

// BeaconType is an Entry Spot on every node that spawns Marks into itself: the Actors of the
// process tests, whose host is a node that a test kills.
const BeaconType = "rttest.Beacon"

// MarkType is an Actor that answers the node it runs on.
const MarkType = "rttest.Mark"

// BeaconDesc describes the Beacon: Spawn makes the Mark its request names a member of it and
// answers "ok", or the error's text.
var BeaconDesc = sdk.SpotDesc{Name: BeaconType, Kind: sdk.KindEntry, Methods: []sdk.MethodDesc{{
	Name:       "Spawn",
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
	Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
		if err := impl.(sdk.SpotContext).Spawn(ctx, &MarkDesc, req.(*wrapperspb.StringValue).GetValue()); err != nil {
			return wrapperspb.String(err.Error()), nil
		}
		return wrapperspb.String("ok"), nil
	},
}}}

// Mark methods: Where answers its node; Record runs a message (request and reply are its ID)
// and counts it; Count answers how many it ran, over every node it ran on (its count moves with
// it).
const (
	MarkWhere  = "Where"
	MarkRecord = "Record"
	MarkCount  = "Count"
)

// MarkDesc describes the Mark.
var MarkDesc = sdk.SpotDesc{Name: MarkType, Kind: sdk.KindActor, Methods: []sdk.MethodDesc{
	{
		Name:       MarkWhere,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			return wrapperspb.String(string(impl.(*mark).ac.Node())), nil
		},
	},
	{
		Name:       MarkRecord,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			m := impl.(*mark)
			id := req.(*wrapperspb.StringValue).GetValue()
			m.ran(m.ac.ID(), id)
			m.n++
			return wrapperspb.String(id), nil
		},
	},
	{
		Name:       MarkCount,
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		NewReply:   func() proto.Message { return new(wrapperspb.Int64Value) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			return wrapperspb.Int64(impl.(*mark).n), nil
		},
	},
}}

type mark struct {
	ac  sdk.ActorContext
	ran func(actor, msg string)
	n   int64
}

// MarshalState carries the count across a move.
func (m *mark) MarshalState(context.Context) ([]byte, error) {
	return binary.AppendUvarint(nil, uint64(m.n)), nil
}

// RegisterBeacon registers the Beacon and the Mark; ran, when set, is told of every message a
// Mark records, with the Mark's ID.
func RegisterBeacon(r sdk.Registrar, ran func(actor, msg string)) error {
	if err := r.RegisterSpot(&BeaconDesc, func(sc sdk.SpotContext) (any, error) { return sc, nil }); err != nil {
		return err
	}
	if ran == nil {
		ran = func(string, string) {}
	}
	return r.RegisterActor(&MarkDesc, func(ac sdk.ActorContext) (any, error) {
		m := &mark{ac: ac, ran: ran}
		if st := ac.RestoredState(); st != nil {
			n, k := binary.Uvarint(st)
			if k <= 0 {
				return nil, errors.New("mark: restored state does not decode")
			}
			m.n = int64(n)
		}
		return m, nil
	})
}
