package capacity

import (
	"context"
	"sync/atomic"
)

// Charge is the Core HWM charge of one peer's request. The stream that read the request
// returns it when the request's reply is queued, unless the job that the request became keeps
// it (Keep): a one-way message is acknowledged as soon as a lane admits it, and its bytes stay
// charged, to its stream too, until its handler returns.
type Charge struct {
	n        int64
	to       Releaser // takes the bytes back: to the meter and to the stream's share
	kept     atomic.Bool
	returned atomic.Bool
}

// Releaser takes back the bytes of a charge that is released.
type Releaser interface{ ReleaseCharge(n int64) }

// Keeper is a Releaser that bounds the bytes of the charges that jobs keep: a stream whose
// messages queued at consumers that do not drain would otherwise hold its whole share, and
// stop every other message of its peer.
type Keeper interface {
	// KeepCharge reports whether n more bytes may be kept, and counts them if so.
	KeepCharge(n int64) bool
	// UnkeepCharge takes back n kept bytes that KeepCharge counted.
	UnkeepCharge(n int64)
}

// Init makes c, unused until now, the charge of n bytes that to takes back, once. A charge is
// a field of the value that lives as long as its request, rather than an allocation of its own.
func (c *Charge) Init(n int64, to Releaser) { c.n, c.to = n, to }

// Bytes is the charge's size.
func (c *Charge) Bytes() int64 { return c.n }

// Keep makes the job hold the charge: the stream's Settle no longer returns it, Release does.
// It reports false, and changes nothing, when the stream bounds its kept bytes (Keeper) and
// these would pass the bound: the job is then refused, and the stream returns the charge with
// the refusal.
func (c *Charge) Keep() bool {
	if k, ok := c.to.(Keeper); ok && !k.KeepCharge(c.n) {
		return false
	}
	c.kept.Store(true)
	return true
}

// Unkeep gives the charge back to the stream: the job that kept it was refused before it was
// admitted, and the stream's Settle returns it after all.
func (c *Charge) Unkeep() {
	if c.kept.Swap(false) {
		if k, ok := c.to.(Keeper); ok {
			k.UnkeepCharge(c.n)
		}
	}
}

// Settle returns the charge when its request is answered, unless a job keeps it.
func (c *Charge) Settle() {
	if !c.kept.Load() {
		c.Release()
	}
}

// Release returns the charge; only the first call does anything.
func (c *Charge) Release() {
	if c.returned.CompareAndSwap(false, true) {
		if c.kept.Load() {
			if k, ok := c.to.(Keeper); ok {
				k.UnkeepCharge(c.n)
			}
		}
		c.to.ReleaseCharge(c.n)
	}
}

type chargeKey struct{}

// WithCharge returns ctx carrying c, for the request's handler to find.
func WithCharge(ctx context.Context, c *Charge) context.Context {
	return context.WithValue(ctx, chargeKey{}, c)
}

// ChargeValue is what a context that carries c answers for key: c for the key ChargeOf looks
// up, and false for any other key. It lets a context type of its own carry a charge without a
// context.WithValue around it.
func ChargeValue(key any, c *Charge) (any, bool) {
	if _, ok := key.(chargeKey); ok && c != nil {
		return c, true
	}
	return nil, false
}

// ChargeOf returns the charge that ctx carries, or nil.
func ChargeOf(ctx context.Context) *Charge {
	c, _ := ctx.Value(chargeKey{}).(*Charge)
	return c
}
