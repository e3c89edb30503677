// Package observe is the observation machine behind every status stream of the host: one Hub per
// status, any number of observers, each holding a single slot with the newest snapshot (H1).
//
// A publisher never waits for an observer: Publish stores the snapshot once and, for each
// observer, replaces what that observer has not taken yet and counts the replacement. A slow
// observer therefore always gets the newest status and learns how many it skipped; a terminal
// status that an observer did not take before a newer one replaced it counts apart, so that it
// is never lost silently. Snapshots are shared: one allocation per change, not per observer.
// The host copies what it delivers of them for each observer, since a status it hands out is
// its receiver's own.
package observe

import (
	"context"
	"iter"
	"math"
	"slices"
	"sync"

	"github.com/zlink-go/zlink/sdk"
)

// Hub publishes the snapshots of one status to its observers.
type Hub[T any] struct {
	lost func(missed, next *T) bool

	mu      sync.Mutex
	current *T
	subs    map[*observer[T]]struct{}
	closed  bool
	done    chan struct{} // closed by Close: observations end once they took the last status
}

// observer is one observation's slot.
type observer[T any] struct {
	mu      sync.Mutex
	pending *T // the newest snapshot not yet taken, or nil
	loss    sdk.ObservationLoss
	wake    chan struct{} // one token: something is pending
}

// NewHub returns a hub whose first status is initial. lost reports whether an observer that
// takes next in place of missed loses a terminal status (Stopped, Error), which is counted
// apart; nil: none is.
func NewHub[T any](initial T, lost func(missed, next *T) bool) *Hub[T] {
	if lost == nil {
		lost = func(_, _ *T) bool { return false }
	}
	return &Hub[T]{lost: lost, current: &initial, subs: map[*observer[T]]struct{}{}, done: make(chan struct{})}
}

// TerminalStates is the lost rule of statuses whose state, read by state, is terminal when it
// is one of terminal: a terminal state is lost when the status that replaces it is in another
// state. A newer status in the same terminal state loses nothing.
func TerminalStates[T any, S comparable](state func(*T) S, terminal ...S) func(missed, next *T) bool {
	return func(missed, next *T) bool {
		s := state(missed)
		return slices.Contains(terminal, s) && state(next) != s
	}
}

// Current returns the newest status.
func (h *Hub[T]) Current() T {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.current
}

// Observers returns how many observations are open.
func (h *Hub[T]) Observers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Publish makes s the current status and offers it to every observer. It never blocks on an
// observer; after Close it does nothing.
func (h *Hub[T]) Publish(s T) {
	p := &s
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.current = p
	for o := range h.subs {
		o.offer(p, h.lost)
	}
}

// Close ends every observation after it has taken the status it holds, and every later one at
// once after the current status.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

func (o *observer[T]) offer(p *T, lost func(missed, next *T) bool) {
	o.mu.Lock()
	replaced := o.pending != nil
	if replaced {
		// H1, H5: running totals of this observation, saturating.
		o.loss.CoalescedCount = inc(o.loss.CoalescedCount)
		if lost(o.pending, p) {
			o.loss.DiscardedTerminalCount = inc(o.loss.DiscardedTerminalCount)
		}
	}
	o.pending = p
	o.mu.Unlock()
	if replaced {
		return // the observer was woken for the status this one replaced, and takes this one
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *observer[T]) take() (*T, sdk.ObservationLoss) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.pending
	o.pending = nil
	return p, o.loss
}

func inc(n uint64) uint64 {
	if n == math.MaxUint64 {
		return n
	}
	return n + 1
}

// Observe returns the observation stream: the current status first, then every change, newest
// first when the consumer is slower than the changes. It ends when ctx ends (nothing is delivered
// once the cancellation is seen, H4), when the consumer stops ranging, or after the hub closed
// and the last status was delivered. Each range over it is an observation of its own.
func (h *Hub[T]) Observe(ctx context.Context) iter.Seq[sdk.Observed[T]] {
	return func(yield func(sdk.Observed[T]) bool) {
		o := &observer[T]{wake: make(chan struct{}, 1)}
		h.mu.Lock()
		o.pending = h.current
		o.wake <- struct{}{}
		closed := h.closed
		if !closed {
			h.subs[o] = struct{}{}
		}
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			delete(h.subs, o)
			h.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
			case <-h.done:
				// Closed: deliver what is pending, then end.
				if p, loss := o.take(); p != nil && ctx.Err() == nil {
					yield(sdk.Observed[T]{Status: *p, Loss: loss})
				}
				return
			}
			p, loss := o.take()
			if p == nil {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			if !yield(sdk.Observed[T]{Status: *p, Loss: loss}) {
				return
			}
		}
	}
}
