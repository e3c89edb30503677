package zl

import "context"

// Board is the Entry Spot that every node hosting Echo Spots has from its start; the Actor
// workload's Tokens are spawned into it.
//
//zlink:spot entry name=peers.Board
type Board interface {
	// Spawn spawns the Token the request names into this Board and answers once it exists.
	Spawn(ctx context.Context, req *SpawnRequest) (*SpawnReply, error)
}

// Token is the Actor of the Actor workload: it answers pings. An Actor exists only once a
// Spot's handler spawned it (here the Board's Spawn), and runs on its Spot's serial queue.
//
//zlink:actor name=peers.Token
type Token interface {
	// Ping answers a Pong with the ping's sequence number.
	Ping(ctx context.Context, req *Ping) (*Pong, error)
}

// Service is the ClientServer channel of the channel workload: a stateless server whose
// handlers run concurrently, each call going to one Ready server of the channel.
//
//zlink:server channel=peers.Service
type Service interface {
	// Ping answers a Pong with the ping's sequence number.
	Ping(ctx context.Context, req *Ping) (*Pong, error)
}
