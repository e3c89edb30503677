package catalog

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

// idleList is the idle scan's list of Instance Spots with a cursor that each scan resumes
// from (D1). Removal swaps the last Spot into the gap, so a Spot may be seen twice or once
// late in a pass; every Spot is still seen within two passes.
type idleList struct {
	mu     sync.Mutex
	spots  []*instanceSpot
	cursor int
}

func (l *idleList) add(s *instanceSpot) {
	l.mu.Lock()
	s.idleIndex = len(l.spots)
	l.spots = append(l.spots, s)
	l.mu.Unlock()
}

func (l *idleList) remove(s *instanceSpot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := s.idleIndex
	if i < 0 || i >= len(l.spots) || l.spots[i] != s {
		return
	}
	last := len(l.spots) - 1
	l.spots[i] = l.spots[last]
	l.spots[i].idleIndex = i
	l.spots[last] = nil
	l.spots = l.spots[:last]
	s.idleIndex = -1
	if len(l.spots) == 0 {
		l.spots = nil
	}
}

// next returns up to n Spots from the cursor and moves the cursor past them.
func (l *idleList) next(n int) []*instanceSpot {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.spots) == 0 {
		return nil
	}
	n = min(n, len(l.spots))
	out := make([]*instanceSpot, 0, n)
	for range n {
		if l.cursor >= len(l.spots) {
			l.cursor = 0
		}
		out = append(out, l.spots[l.cursor])
		l.cursor++
	}
	return out
}

func (l *idleList) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.spots)
}

// idleLoop scans for idle Instance Spots every IdleScanInterval until the catalog closes.
func (c *Catalog) idleLoop() {
	if !c.idleEnabled() {
		return
	}
	ticker := time.NewTicker(c.cfg.IdleScanInterval)
	defer ticker.Stop()
	evicting := make(chan struct{}, MaxScanCandidates) // bounds the evictions in flight
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-ticker.C:
			c.scanIdle(evicting)
		}
	}
}

// idleEnabled reports whether any Instance type can be idle-evicted.
func (c *Catalog) idleEnabled() bool {
	for _, t := range c.types {
		if t.desc.Kind == sdk.KindInstance && t.idleTimeout(c.cfg.InstanceSpotIdleTimeout) > 0 {
			return true
		}
	}
	return false
}

// scanIdle examines at most MaxScanCandidates Spots from the cursor (D1) and starts the close
// transaction of each that is idle (D2, D3). Closes run beside the scan, bounded by evicting.
func (c *Catalog) scanIdle(evicting chan struct{}) {
	cands := c.idle.next(MaxScanCandidates)
	c.stats.scanned(len(cands))
	now := exec.Now()
	for _, s := range cands {
		if !s.evictable(now) {
			continue
		}
		select {
		case evicting <- struct{}{}:
		default:
			return // enough evictions in flight; the cursor comes back to the rest
		}
		started := c.bg.goRun(func() {
			defer func() { <-evicting }()
			err := c.closeSpot(c.ctx, s, sdk.CloseIdleEvicted, true)
			if err != nil && !errors.Is(err, errNotQuiescent) && !errors.Is(err, errAlreadyClosed) && c.ctx.Err() == nil {
				c.log.Warn("idle cleanup could not close a spot; it is tried again", "spot", s.typ.desc.Name, "id", s.id, "err", err)
			}
		})
		if !started {
			<-evicting
			return
		}
	}
}

// stats are counters of the catalog's work, for status and tests.
type stats struct {
	factoryRuns      atomic.Int64
	creationFailures atomic.Int64
	capRefusals      atomic.Int64
	leaksReleased    atomic.Int64
	idleScans        atomic.Int64
	maxScanned       atomic.Int64
	idleEvicted      atomic.Int64
	explicitClosed   atomic.Int64
	otherClosed      atomic.Int64
	ownerLost        atomic.Int64
	reconciled       atomic.Int64
	turns            stripedCounter
}

// stripedCounter is a counter that many goroutines add to at once: each add goes to one of
// its stripes, each two cache lines from the next, chosen by the executor whose turn it
// counts, so that the turns of executors busy on different processors seldom meet on one line
// and one executor's turns keep to one; reading it sums the stripes.
type stripedCounter struct {
	stripes [16]struct {
		n atomic.Int64
		_ [120]byte
	}
}

func (c *stripedCounter) add(stripe uint32) { c.stripes[stripe%uint32(len(c.stripes))].n.Add(1) }

func (c *stripedCounter) load() int64 {
	var n int64
	for i := range c.stripes {
		n += c.stripes[i].n.Load()
	}
	return n
}

func (s *stats) scanned(n int) {
	s.idleScans.Add(1)
	for {
		cur := s.maxScanned.Load()
		if int64(n) <= cur || s.maxScanned.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

func (s *stats) closed(r sdk.CloseReason) {
	switch r {
	case sdk.CloseIdleEvicted:
		s.idleEvicted.Add(1)
	case sdk.CloseExplicit:
		s.explicitClosed.Add(1)
	case sdk.CloseOwnerLost:
		s.ownerLost.Add(1)
		s.otherClosed.Add(1)
	default:
		s.otherClosed.Add(1)
	}
}

// Stats is a snapshot of the catalog's counters.
type Stats struct {
	// FactoryRuns counts factories run for User and Instance Spots (B5).
	FactoryRuns int64
	// CreationFailures counts creations whose factory, OnActivate or Ready commit failed (B8).
	CreationFailures int64
	// CapRefusals counts activations refused at the active-object cap (D6).
	CapRefusals int64
	// LeaksReleased counts records of this node released because no activation stood for them.
	LeaksReleased int64
	// IdleScans counts idle scans; MaxScanned is the most Spots one of them examined (D1).
	IdleScans, MaxScanned int64
	// IdleEvicted, ExplicitClosed and OtherClosed count completed closes by reason;
	// OwnerLost counts those of OtherClosed that ended because the owner lease ended.
	IdleEvicted, ExplicitClosed, OtherClosed, OwnerLost int64
	// Reconciled counts the keys the reconcile compared with their records; Suspects is the
	// number waiting.
	Reconciled int64
	Suspects   int
	// Active is the number of User and Instance Spots active or being created.
	Active int64
	// IdleCandidates is the number of Instance Spots in the idle scan's list.
	IdleCandidates int
	// Turns counts the messages that took a turn on this node, a Spot's or an Actor's: the
	// node's calls served, whose rate the admin page charts.
	Turns int64
}

// Turns counts the messages that took a turn on this node (Stats.Turns), cheaply.
func (c *Catalog) Turns() int64 { return c.stats.turns.load() }

// Stats returns a snapshot of the catalog's counters.
func (c *Catalog) Stats() Stats {
	return Stats{
		FactoryRuns:      c.stats.factoryRuns.Load(),
		CreationFailures: c.stats.creationFailures.Load(),
		CapRefusals:      c.stats.capRefusals.Load(),
		LeaksReleased:    c.stats.leaksReleased.Load(),
		IdleScans:        c.stats.idleScans.Load(),
		MaxScanned:       c.stats.maxScanned.Load(),
		IdleEvicted:      c.stats.idleEvicted.Load(),
		ExplicitClosed:   c.stats.explicitClosed.Load(),
		OtherClosed:      c.stats.otherClosed.Load(),
		OwnerLost:        c.stats.ownerLost.Load(),
		Reconciled:       c.stats.reconciled.Load(),
		Suspects:         c.suspects.len(),
		Active:           c.active.Load(),
		IdleCandidates:   c.idle.len(),
		Turns:            c.stats.turns.load(),
	}
}
