// Package match is the match example's application: players queue in their node's lobby, a
// matchmaker forms matches by rating band, players' Pawns move into each match and back, and
// every node's leaderboard hears each result.
//
//   - Lobby is the Entry Spot of each node; waiting players are Pawn Actors in it.
//   - Pawn is a player's piece: an Actor that moves between lobbies and matches.
//   - Player is a player's session: a User Spot that keeps the rating and the history.
//   - Matchmaker is a ClientServer channel: it forms matches of four from queued players of one
//     rating band, each band sticky to one server.
//   - Match is an Instance Spot made by the first call that states create-intent: its Pawns
//     move into it, it plays rounds on a timer, reports, and sends them back.
//   - Results is a Fanout channel: every node's leaderboard subscribes.
//
// zlinkgen writes match_zlink.go from the interfaces below: run `go generate ./...` (or
// `make gen`) after changing them.
package match

import "context"

//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen

// Lobby is where a node's waiting players are. Every node has one from its start.
//
//zlink:spot entry name=match.Lobby
type Lobby interface {
	// Join spawns the player's Pawn into this lobby.
	Join(ctx context.Context, req *JoinRequest) (*JoinReply, error)

	// Joined counts the players who joined at this lobby.
	Joined(ctx context.Context, req *Empty) (*Count, error)
}

// Pawn is a player's piece on the board: it waits in a lobby and plays in matches.
//
//zlink:actor name=match.Pawn
type Pawn interface {
	// Play takes one round's input of the match the Pawn is in.
	//
	//zlink:send
	Play(ctx context.Context, r *Round) error

	// Info tells where the Pawn is and what it got.
	Info(ctx context.Context, req *Empty) (*PawnInfo, error)
}

// Player is one player's session, created explicitly at login. It keeps the player's rating
// and the history of the matches they played.
//
//zlink:spot user name=match.Player
type Player interface {
	// Record adds a finished match to the history, adjusts the rating and answers it.
	Record(ctx context.Context, o *Outcome) (*Count, error)

	// Profile returns the rating and the history.
	Profile(ctx context.Context, req *Empty) (*Profile, error)
}

// Matchmaker forms matches of four from the players queued in one rating band.
//
//zlink:server channel=match.Matchmaker
type Matchmaker interface {
	// Enqueue queues a player whose Pawn is in a lobby.
	Enqueue(ctx context.Context, t *Ticket) (*Ack, error)
}

// Match is one match: its Pawns move in, it plays its rounds on a timer, records the result
// with each player and on every leaderboard, and sends its Pawns back to a lobby.
//
//zlink:spot instance idle=2s name=match.Match
type Match interface {
	// Start takes the match's players into it and starts its rounds.
	Start(ctx context.Context, spec *MatchSpec) (*Ack, error)

	// State tells how far the match is.
	State(ctx context.Context, req *Empty) (*MatchState, error)
}

// Results tells every node's leaderboard how each match ended.
//
//zlink:fanout channel=match.Results
type Results interface {
	// Finished announces a finished match.
	Finished(ctx context.Context, r *MatchResult) error
}
