package mesh

import (
	"context"
	"sync"
)

// revisionGate records the newest store revision a watcher has applied and lets others wait
// until it reaches a revision.
type revisionGate struct {
	mu      sync.Mutex
	rev     int64
	changed chan struct{} // made by the first waiter, closed and dropped when rev advances
}

// advance raises the applied revision to rev; a lower rev changes nothing.
func (g *revisionGate) advance(rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if rev <= g.rev {
		return
	}
	g.rev = rev
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// wait returns once the applied revision is at least rev, or with ctx's error when ctx ends.
func (g *revisionGate) wait(ctx context.Context, rev int64) error {
	for {
		g.mu.Lock()
		if g.rev >= rev {
			g.mu.Unlock()
			return nil
		}
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
