package catalog

import (
	"context"

	"github.com/zlink-go/zlink/sdk"
)

// WaitingCallers is how many requests wait for their outcome on the local Spot t, having found
// it busy; -1 if t is not active here.
func (c *Catalog) WaitingCallers(t sdk.Target) int32 {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	if sp == nil {
		return -1
	}
	return sp.base().waiting.Load()
}

// Company reports whether a request with ctx that ran inline on the local Spot t now would
// yield its processor now and then.
func (c *Catalog) Company(ctx context.Context, t sdk.Target) bool {
	sp := c.spotAt(spotKey{t.Type(), t.ID()})
	return sp != nil && sp.base().company(ctx)
}
