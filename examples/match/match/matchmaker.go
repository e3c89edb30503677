package match

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// MatchSize is how many players a match takes.
const MatchSize = 4

// Matchmaking is a node's server of the Matchmaker channel: it queues players by rating band
// and forms a match whenever a band has MatchSize of them. Tickets of one band come to one
// server (the clients key them by band), so its players meet. Run forms the matches; the
// owner of a Matchmaking stops it by ending Run's context.
type Matchmaking struct {
	node   sdk.NodeID
	rounds int32

	mu      sync.Mutex
	bands   map[string][]*Ticket
	queued  map[string]bool
	paused  bool
	kick    chan struct{}
	formed  atomic.Int64
	matches atomic.Int64 // IDs
}

// NewMatchmaking makes node's matchmaker; its matches play rounds rounds.
func NewMatchmaking(node sdk.NodeID, rounds int32) *Matchmaking {
	return &Matchmaking{node: node, rounds: rounds, bands: map[string][]*Ticket{}, queued: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Enqueue implements Matchmaker: a player already queued here is queued once.
func (m *Matchmaking) Enqueue(_ context.Context, t *Ticket) (*Ack, error) {
	if t.GetPlayer() == "" {
		return nil, sdk.Errorf("no_player", "a ticket needs a player")
	}
	m.mu.Lock()
	if !m.queued[t.GetPlayer()] {
		m.queued[t.GetPlayer()] = true
		band := Band(t.GetRating())
		m.bands[band] = append(m.bands[band], t)
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
	return &Ack{}, nil
}

// Pause stops forming matches; queued players stay queued.
func (m *Matchmaking) Pause() {
	m.mu.Lock()
	m.paused = true
	m.mu.Unlock()
}

// Formed counts the matches this matchmaker started.
func (m *Matchmaking) Formed() int64 { return m.formed.Load() }

// Run forms matches through c until ctx ends.
func (m *Matchmaking) Run(ctx context.Context, c sdk.Client) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-tick.C:
		}
		for {
			spec, tickets := m.next()
			if spec == nil {
				break
			}
			if !m.start(ctx, c, spec) {
				// Not started (its node refused, a Pawn was busy): the players queue again,
				// and forming waits for the next tick.
				m.requeue(tickets)
				break
			}
			m.formed.Add(1)
		}
	}
}

// start starts the match spec and reports whether it started. An error does not always say
// the match did not start — a deadline may end the wait while Start still runs and its players
// moved in — so the match is asked until it answers: Start's turn is over once State answers.
func (m *Matchmaking) start(ctx context.Context, c sdk.Client, spec *MatchSpec) bool {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := OpenMatch(c, spec.GetMatch()).Start(sctx, spec)
	cancel()
	if err == nil {
		return true
	}
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := MatchOf(c, spec.GetMatch()).State(sctx, &Empty{})
		cancel()
		switch {
		case err == nil:
			return len(st.GetPlayers()) > 0
		case errors.Is(err, sdk.ErrNotFound):
			return false // never made, or gone: it did not start
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// next takes MatchSize players of one band for a match, or nil.
func (m *Matchmaking) next() (*MatchSpec, []*Ticket) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused {
		return nil, nil
	}
	bands := make([]string, 0, len(m.bands))
	for b := range m.bands {
		bands = append(bands, b)
	}
	slices.Sort(bands)
	for _, b := range bands {
		q := m.bands[b]
		if len(q) < MatchSize {
			continue
		}
		tickets := q[:MatchSize:MatchSize]
		m.bands[b] = q[MatchSize:]
		spec := &MatchSpec{Match: fmt.Sprintf("%s-%d", m.node, m.matches.Add(1)), Rounds: m.rounds}
		for _, t := range tickets {
			delete(m.queued, t.GetPlayer())
			spec.Players = append(spec.Players, t.GetPlayer())
			spec.Ratings = append(spec.Ratings, t.GetRating())
		}
		return spec, tickets
	}
	return nil, nil
}

func (m *Matchmaking) requeue(tickets []*Ticket) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range tickets {
		if !m.queued[t.GetPlayer()] {
			m.queued[t.GetPlayer()] = true
			band := Band(t.GetRating())
			m.bands[band] = append([]*Ticket{t}, m.bands[band]...)
		}
	}
}
