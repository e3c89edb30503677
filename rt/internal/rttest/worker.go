package rttest

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

// WorkerType is the stable type name of the test Worker, an Instance Spot that writes every
// turn it starts to a Journal outside the runtime: the evidence that fault tests read to prove
// which node ran what, and when.
const WorkerType = "rttest.Worker"

// Worker methods: Work is one-way and takes a while (the Worker's delay), so that messages
// queue behind it; Ping answers at once. Both journal the message ID. Every Worker also runs a
// periodic timer that journals "tick".
const (
	WorkerWork = "Work"
	WorkerPing = "Ping"
)

// WorkerDesc describes the Worker type.
var WorkerDesc = sdk.SpotDesc{Name: WorkerType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
	{
		Name:       WorkerWork,
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			w := impl.(*worker)
			w.j.Record(w.sc, req.(*wrapperspb.StringValue).GetValue())
			select {
			case <-time.After(w.delay):
			case <-ctx.Done():
			}
			return nil, nil
		},
	},
	{
		Name:       WorkerPing,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			w := impl.(*worker)
			id := req.(*wrapperspb.StringValue).GetValue()
			w.j.Record(w.sc, id)
			return wrapperspb.String(id), nil
		},
	},
}}

type worker struct {
	sc    sdk.SpotContext
	j     Journal
	delay time.Duration
}

// RegisterWorker registers the Worker type: its Work turns take delay, and each Worker journals
// a "tick" every tick (none when tick is 0).
func RegisterWorker(r sdk.Registrar, j Journal, delay, tick time.Duration) error {
	return r.RegisterSpot(&WorkerDesc, func(sc sdk.SpotContext) (any, error) {
		w := &worker{sc: sc, j: j, delay: delay}
		if tick > 0 {
			sc.Every(tick, func(context.Context) { j.Record(sc, "tick") })
		}
		return w, nil
	})
}
