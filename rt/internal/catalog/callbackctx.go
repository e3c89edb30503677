package catalog

import (
	"context"
	"sync/atomic"
)

// callbackCtx is the context of a callback that the node's shutdown and relocation wait for:
// an OnActivate, which its creation waits for, or a closing callback, which its Spot's close
// waits for. It is marked until the callback ends, so InTurn refuses to wait for either from
// it; a goroutine that the callback started with it, or with a context derived from it, is
// free to wait once the callback has ended.
type callbackCtx struct {
	context.Context
	cat   *Catalog
	ended atomic.Bool
}

// callbackKey is the key under which a callback's context, and every context derived from it,
// answers its callbackCtx.
type callbackKey struct{}

// markCallback returns ctx marked as the context of a callback of this catalog until end.
func (c *Catalog) markCallback(ctx context.Context) *callbackCtx {
	return &callbackCtx{Context: ctx, cat: c}
}

// end ends the mark: the callback returned or panicked.
func (m *callbackCtx) end() { m.ended.Store(true) }

// Value implements context.Context.
func (m *callbackCtx) Value(key any) any {
	if key == (callbackKey{}) {
		return m
	}
	return m.Context.Value(key)
}

// inCallback reports whether ctx is, or derives from, the context of a callback of c that has
// not ended.
func (c *Catalog) inCallback(ctx context.Context) bool {
	// A callback's context may derive from another's (a closing callback that closes a Spot,
	// of this node or another, with its context): the one nearest may have ended, or be
	// another node's, while an outer one of c's still runs.
	for m, _ := ctx.Value(callbackKey{}).(*callbackCtx); m != nil; m, _ = m.Context.Value(callbackKey{}).(*callbackCtx) {
		if m.cat == c && !m.ended.Load() {
			return true
		}
	}
	return false
}
