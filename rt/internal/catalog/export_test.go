package catalog

import (
	"context"

	"github.com/zlink-go/zlink/sdk"
)

// PermitBatch is how many job permits of ended jobs a Spot's runner returns together.
const PermitBatch = permitBatch

// Callers is how many requests of this node's callers are in the delivery of the local Spot t;
// -1 if t is not active here.
func (c *Catalog) Callers(t sdk.Target) int32 {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return -1
	}
	return sp.base().callers.Load()
}

// Company reports whether a request with ctx that came to the local Spot t now would have
// company, as enter would report it.
func (c *Catalog) Company(ctx context.Context, t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	return sp != nil && hasCompany(sp.base().callers.Load()+1, ctx)
}

// NestsASpotContext reports whether ctx is a Spot context whose sender's values are a Spot
// context themselves.
func NestsASpotContext(ctx context.Context) bool {
	sc, ok := ctx.(*spotCtx)
	if !ok {
		return false
	}
	_, nested := sc.values.(*spotCtx)
	return nested
}

// OnTurnChecked makes fn run after every turn's lease check lets it start, before the rest of
// the turn, until restore is called.
func OnTurnChecked(fn func()) (restore func()) {
	prev := turnChecked.Swap(&fn)
	return func() { turnChecked.Store(prev) }
}
