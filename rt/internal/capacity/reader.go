package capacity

import (
	"context"
	"fmt"

	"github.com/zlink-go/zlink/sdk"
)

// ErrReaderHeldUp ends a wait that held up a peer's stream's reader while none of the stream's
// other calls ended for the transport's stall timeout: they may wait for cancellations queued
// behind the request that waits, so the request is refused, as the node's scheduler being
// full, and the stream is read on.
var ErrReaderHeldUp = fmt.Errorf("the wait held up the peer's stream while none of its other calls ended: %w",
	&sdk.CapacityError{Where: sdk.CapacityScheduler})

// readerWaitKey finds, in a peer's request's context, how its stream's reader waits.
type readerWaitKey struct{}

// ReaderWaiter runs the waits that a peer's stream's reader makes while it takes in one of the
// stream's requests; the transport provides one in its requests' contexts (ReaderWaitValue).
type ReaderWaiter interface {
	// WaitAsReader runs wait, telling the peer meanwhile that the stream is read for as long
	// as the wait holds the reader up, and returns wait's outcome, or ErrReaderHeldUp.
	WaitAsReader(ctx context.Context, wait func(context.Context) error) error
}

// ReaderWaitValue is what a context that carries w answers for key: w for the key AsReader
// looks up, and false for any other key (see ChargeValue).
func ReaderWaitValue(key any, w ReaderWaiter) (any, bool) {
	if _, ok := key.(readerWaitKey); ok && w != nil {
		return w, true
	}
	return nil, false
}

// AsReader runs wait for ctx. A wait that the reader of a peer's stream makes while it takes
// in the request ctx belongs to (a permit, a slot of a bounded pool) holds up the stream's
// other requests: the peer is told meanwhile that the stream is read, so that it does not take
// the stream for one that has stopped; and once none of the stream's other calls has ended
// for the transport's stall timeout, the wait ends with ErrReaderHeldUp, so that their
// cancellations are read (as does every such wait of the requests read behind it, at once,
// until one of the stream's calls ends or the reader catches up with the peer). With any
// other ctx, or once the reader has gone on, it is wait(ctx). It returns wait's outcome, or
// ctx's error once ctx ends.
func AsReader(ctx context.Context, wait func(context.Context) error) error {
	if w, ok := ctx.Value(readerWaitKey{}).(ReaderWaiter); ok {
		return w.WaitAsReader(ctx, wait)
	}
	return wait(ctx)
}
