// Package zl holds what both frameworks of the side-by-side benchmarks share: the messages
// (echo.proto) and, for ZLink, the annotated interfaces whose typed references zlinkgen writes
// next to them: the Echo Spot (echo_zlink.go), and the Board Entry Spot, the Token Actor and
// the Service ClientServer channel (actor_zlink.go).
package zl

import "context"

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Echo is the benchmarks' object: it answers pings and counts ticks. It is an Instance Spot, so
// the first call that states create-intent activates it.
//
//zlink:spot instance name=peers.Echo
type Echo interface {
	// Ping answers a Pong with the ping's sequence number.
	Ping(ctx context.Context, req *Ping) (*Pong, error)

	// Tick counts one tick, one-way.
	//
	//zlink:send
	Tick(ctx context.Context, msg *Tick) error

	// Count answers how many ticks this object has handled.
	Count(ctx context.Context, req *CountRequest) (*CountReply, error)
}
