package match

import (
	"context"
	"sync"
)

// Leaderboard is a node's subscriber of the Results channel: it counts wins and results.
type Leaderboard struct {
	mu      sync.Mutex
	wins    map[string]int
	results map[string]int // match -> times heard
}

// NewLeaderboard returns an empty leaderboard.
func NewLeaderboard() *Leaderboard {
	return &Leaderboard{wins: map[string]int{}, results: map[string]int{}}
}

// Finished implements Results.
func (l *Leaderboard) Finished(_ context.Context, r *MatchResult) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.results[r.GetMatch()]++
	if l.results[r.GetMatch()] == 1 {
		l.wins[r.GetWinner()]++
	}
	return nil
}

// Heard counts the results heard, and those heard more than once.
func (l *Leaderboard) Heard() (results, repeated int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.results {
		results++
		if n > 1 {
			repeated++
		}
	}
	return results, repeated
}
