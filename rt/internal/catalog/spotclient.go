package catalog

import (
	"context"
	"fmt"

	"github.com/zlink-go/zlink/sdk"
)

// spotClient is the Client a Spot gets from its SpotContext: the node's client, except for a
// close of the Spot itself. A close waits for the Spot's turn in progress to end (D3), and a
// handler that closes its own Spot is that turn, so it only starts the close and returns.
type spotClient struct {
	sdk.Client
	a *activation
}

// errNilContext refuses call, made with a nil context, before it does anything: never a panic
// on a caller's input.
func errNilContext(call string) error {
	return fmt.Errorf("%w: %s needs a context, got nil (context.Background() when there is none)", sdk.ErrInvalidArgument, call)
}

// CloseSpot implements sdk.Client.
func (c spotClient) CloseSpot(ctx context.Context, t sdk.Target, opts ...sdk.CallOption) error {
	if ctx == nil {
		return errNilContext("CloseSpot") // a close of the Spot itself does not use it, but is refused too
	}
	a := c.a
	if t.Kind() != a.typ.desc.Kind || t.Type() != a.typ.desc.Name || t.ID() != a.id || t.Kind() == sdk.KindEntry {
		return c.Client.CloseSpot(ctx, t, opts...)
	}
	sp := a.cat.spotAt(spotKey{a.typ.desc.Name, a.id})
	if sp == nil || sp.base() != a {
		return fmt.Errorf("%w: %v cannot close itself before its creation finished: fail its factory or OnActivate instead",
			sdk.ErrInvalidArgument, t.Plain())
	}
	return a.cat.closeSelf(sp)
}
