// Package paside runs the side-by-side workloads on Proto.Actor Go: plain actors for the local,
// one-way and Actor workloads, a round-robin pool router for the channel workload, remote for
// the two-process request/reply workload, and cluster grains (virtual actors) with the
// disthash identity lookup for activation and memory: on the in-memory test provider in one
// process, on the etcd provider across two.
package paside

import (
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/zlink-go/zlink/bench/peers/zl"
)

// echoActor answers pings and counts ticks; handled is the process's total, which the harness
// reads.
type echoActor struct {
	ticks   int64
	handled *atomic.Int64
}

// Receive handles one message.
func (a *echoActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *zl.Ping:
		c.Respond(&zl.Pong{Seq: m.GetSeq()})
	case *zl.Tick:
		a.ticks++
		a.handled.Add(1)
	case *zl.CountRequest:
		c.Respond(&zl.CountReply{Ticks: a.ticks})
	}
}

// EchoProps returns the props of an echo actor with Proto.Actor's defaults: the default
// dispatcher (throughput 300) and the default unbounded mailbox. The one-way workload and the
// grains use it: for one-way sends it was faster here than a bounded mailbox (about 6.7 M/s
// against 4.2 M/s), and grains with a bounded mailbox did not activate within the request
// timeout.
func EchoProps(handled *atomic.Int64) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &echoActor{handled: handled} })
}

// RequestProps returns the props of the echo actor of the request/reply workloads: a bounded
// mailbox, as Proto.Actor's own in-process and remote benchmarks configure it, which answered
// 64 callers faster here than the default mailbox. No more than one request per caller is ever
// queued, so it never fills.
func RequestProps() *actor.Props {
	return (&actor.Props{}).Configure(requestOptions()...)
}

// requestOptions are the options of RequestProps, which a pool router gives its routees.
func requestOptions() []actor.PropsOption {
	return []actor.PropsOption{
		actor.WithProducer(func() actor.Actor { return &echoActor{handled: new(atomic.Int64)} }),
		actor.WithMailbox(actor.Bounded(requestMailbox)),
	}
}

// requestMailbox is the capacity of RequestProps' mailbox.
const requestMailbox = 1024

// NewSystem returns an actor system that logs warnings and errors to standard error. Metrics
// stay off, Proto.Actor's default.
func NewSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
			With("lib", "Proto.Actor", "system", s.ID)
	}))
}
