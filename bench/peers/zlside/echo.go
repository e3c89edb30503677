// Package zlside runs the side-by-side workloads on ZLink: Echo Instance Spots, Token Actors in
// a node's Board Entry Spot and a Service ClientServer channel (the generated code in package
// zl) on nodes started with rt.Start against a real etcd.
package zlside

import (
	"context"
	"errors"
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

// board is a node's Board Entry Spot: it spawns Tokens into itself.
type board struct {
	sc sdk.SpotContext
}

var _ zl.Board = (*board)(nil)

// Spawn spawns the Token req names into this Board.
func (b *board) Spawn(ctx context.Context, req *zl.SpawnRequest) (*zl.SpawnReply, error) {
	if _, err := zl.SpawnToken(ctx, b.sc, req.GetId()); err != nil {
		return nil, err
	}
	return &zl.SpawnReply{}, nil
}

// token is a Token Actor: it answers pings.
type token struct{}

var _ zl.Token = token{}

// Ping answers the ping's sequence number.
func (token) Ping(_ context.Context, req *zl.Ping) (*zl.Pong, error) {
	return &zl.Pong{Seq: req.GetSeq()}, nil
}

// service is the Service channel's server. It holds no state, so its calls need no
// synchronization however many run at once.
type service struct{}

var _ zl.Service = service{}

// Ping answers the ping's sequence number.
func (service) Ping(_ context.Context, req *zl.Ping) (*zl.Pong, error) {
	return &zl.Pong{Seq: req.GetSeq()}, nil
}

// Register registers the Echo type; handled counts the ticks of every Echo of the node.
func Register(r sdk.Registrar, handled *atomic.Int64) error {
	return zl.RegisterEcho(r, func(sdk.SpotContext) (zl.Echo, error) {
		return &echo{handled: handled}, nil
	})
}

// RegisterActors registers the Board Entry Spot type, whose one Spot every node has from its
// start, and the Token Actor type.
func RegisterActors(r sdk.Registrar) error {
	return errors.Join(
		zl.RegisterBoard(r, func(sc sdk.SpotContext) (zl.Board, error) { return &board{sc: sc}, nil }),
		zl.RegisterToken(r, func(sdk.ActorContext) (zl.Token, error) { return token{}, nil }),
	)
}
