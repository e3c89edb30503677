package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zlink-go/zlink/sdk"
)

// A write whose answer is lost (a timeout, a leader change, a lost connection) may have been
// applied or not. DESIGN §4: such a write is never reported as failed on a guess; the store
// re-reads the record linearizably until it knows. Every fenced write is idempotent to repeat
// while its fence holds, because the fence is the revision it was read at.

// verdict is what a linearizable re-read says of a fenced write whose answer was lost.
type verdict uint8

const (
	// verdictKnown: the outcome is known (for most writes: it was applied); report it.
	verdictKnown verdict = iota + 1
	// verdictAgain: it was not applied and its fence still holds: write it again.
	verdictAgain
	// verdictFenced: it was not applied and never will be: the record moved on.
	verdictFenced
)

// fencedWrite runs write, a write fenced on a revision, and settles it when its answer is
// lost. write reports false when its fence failed; check re-reads the record and judges.
func fencedWrite[T any](ctx context.Context, s *Etcd,
	write func(context.Context) (T, bool, error),
	check func(context.Context) (T, verdict, error),
) (T, error) {
	var zero T
	v, ok, err := write(ctx)
	switch {
	case err == nil && ok:
		return v, nil
	case err == nil:
		return zero, ErrFenced
	case !ambiguous(err):
		return zero, unavailable(err)
	}
	return settle(ctx, s, err, check, write)
}

// settle learns the outcome of a write whose answer was lost with cause, by re-reading with
// check and writing again while the fence holds, for at most ctx and s.settle. It fails with
// ErrFenced when the write can no longer be applied, and with ErrOutcomeUnknown when it could
// not tell in time.
func settle[T any](ctx context.Context, s *Etcd, cause error,
	check func(context.Context) (T, verdict, error),
	write func(context.Context) (T, bool, error),
) (T, error) {
	var zero T
	sctx, cancel := context.WithTimeout(ctx, s.settle)
	defer cancel()
	last := cause
	refused := false // a write again failed its fence
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		v, verdict, err := check(sctx)
		if err == nil {
			switch {
			case verdict == verdictKnown:
				return v, nil
			case verdict == verdictFenced, refused:
				// refused: the record was still at the fenced revision, so the part of the
				// fence that the re-read does not see, the owner lease, failed.
				return zero, ErrFenced
			}
			var ok bool
			if v, ok, err = write(sctx); err == nil && ok {
				return v, nil
			}
			if err == nil {
				// The first write may have landed after the re-read: read again to tell.
				refused = true
				continue
			}
		}
		if !ambiguous(err) && !errors.As(err, new(notSent)) {
			return zero, outcomeUnknown(cause, err)
		}
		last = err
		select {
		case <-sctx.Done():
			if end := sctx.Err(); !errors.Is(last, end) {
				last = fmt.Errorf("%w (last error: %v)", end, last)
			}
			return zero, outcomeUnknown(cause, last)
		case <-time.After(wait):
		}
	}
}

// outcomeUnknown is the error of a write whose answer was lost with cause and whose outcome
// could not be learnt before last ended the search. It is store unavailability unless the
// caller cancelled.
func outcomeUnknown(cause, last error) error {
	if isUnavailable(last) {
		return fmt.Errorf("%w: %w: %w (the answer was lost: %v)", ErrOutcomeUnknown, sdk.ErrStoreUnavailable, last, cause)
	}
	return fmt.Errorf("%w: %w (the answer was lost: %v)", ErrOutcomeUnknown, last, cause)
}

// ambiguous reports whether a failed request may still have been applied.
func ambiguous(err error) bool {
	if errors.As(err, new(notSent)) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code, ok := errorCode(err)
	if !ok {
		return false
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// isUnavailable reports whether err says that etcd could not be reached or did not answer in
// time. A caller's own cancellation is not.
func isUnavailable(err error) bool {
	switch {
	case errors.Is(err, sdk.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, context.Canceled):
		return false
	}
	code, ok := errorCode(err)
	return ok && (code == codes.Unavailable || code == codes.DeadlineExceeded)
}

// unavailable wraps err with sdk.ErrStoreUnavailable when it is store unavailability, so that
// errors.Is(err, sdk.ErrStoreUnavailable) holds and err stays matchable too.
func unavailable(err error) error {
	if err == nil || errors.Is(err, sdk.ErrStoreUnavailable) || !isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", sdk.ErrStoreUnavailable, err)
}

// errorCode is the gRPC code of an etcd server error or a gRPC status error.
func errorCode(err error) (codes.Code, bool) {
	var serverErr rpctypes.EtcdError
	if errors.As(err, &serverErr) {
		// An etcd server error such as "request timed out" carries its code itself.
		return serverErr.Code(), true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code(), true
	}
	return codes.OK, false
}

// deletedVerdict judges a fenced delete of the record at revision of incarnation, re-read as
// present with (curIncarnation, curRevision): gone or re-created is done, unchanged is to be
// written again, anything else fenced it.
func deletedVerdict(present bool, curIncarnation, curRevision, incarnation, revision int64) verdict {
	switch {
	case !present || curIncarnation != incarnation:
		return verdictKnown
	case curRevision == revision:
		return verdictAgain
	}
	return verdictFenced
}
