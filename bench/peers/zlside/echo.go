// Package zlside runs the side-by-side workloads on ZLink: Echo Instance Spots (the generated
// code in package zl) on nodes started with rt.Start against a real etcd.
package zlside

import (
	"context"
	"sync/atomic"

	"github.com/zlink-go/zlink/bench/peers/zl"
	"github.com/zlink-go/zlink/sdk"
)

// echo serves one Echo Spot. Its handlers run one at a time on the Spot's serial queue, so its
// own tick count needs no synchronization; handled is the node's total, which the harness reads.
type echo struct {
	ticks   int64
	handled *atomic.Int64
}

var _ zl.Echo = (*echo)(nil)

// Ping answers the ping's sequence number.
func (e *echo) Ping(_ context.Context, req *zl.Ping) (*zl.Pong, error) {
	return &zl.Pong{Seq: req.GetSeq()}, nil
}

// Tick counts a tick.
func (e *echo) Tick(context.Context, *zl.Tick) error {
	e.ticks++
	e.handled.Add(1)
	return nil
}

// Count answers this Spot's ticks.
func (e *echo) Count(context.Context, *zl.CountRequest) (*zl.CountReply, error) {
	return &zl.CountReply{Ticks: e.ticks}, nil
}

// Register registers the Echo type; handled counts the ticks of every Echo of the node.
func Register(r sdk.Registrar, handled *atomic.Int64) error {
	return zl.RegisterEcho(r, func(sdk.SpotContext) (zl.Echo, error) {
		return &echo{handled: handled}, nil
	})
}
