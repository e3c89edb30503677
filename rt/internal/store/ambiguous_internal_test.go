package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

// A write whose outcome is unknown is settled by re-reading; one that certainly failed is not.
func TestAmbiguousWriteErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"server timed out":           {rpctypes.ErrTimeout, true},
		"server lost its leader":     {rpctypes.ErrTimeoutDueToLeaderFail, true},
		"server lost the connection": {fmt.Errorf("wrapped: %w", rpctypes.ErrTimeoutDueToConnectionLost), true},
		"unreachable":                {status.Error(codes.Unavailable, "connection refused"), true},
		"deadline":                   {context.DeadlineExceeded, true},
		"cancelled":                  {context.Canceled, true},
		"request too large":          {rpctypes.ErrRequestTooLarge, false},
		"too many ops":               {rpctypes.ErrTooManyOps, false},
		"not sent":                   {notSent{context.Canceled}, false},
		"plain error":                {errors.New("boom"), false},
	} {
		assert.Equal(t, tc.want, ambiguous(tc.err), name)
	}
}

// Errors caused by etcd being unreachable or slow are store unavailability; the caller's own
// cancellation and the store's answers are not.
func TestStoreUnavailableErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"server timed out":       {rpctypes.ErrTimeout, true},
		"server lost its leader": {rpctypes.ErrTimeoutDueToLeaderFail, true},
		"no leader":              {fmt.Errorf("wrapped: %w", rpctypes.ErrNoLeader), true},
		"unreachable":            {status.Error(codes.Unavailable, "connection refused"), true},
		"grpc deadline":          {status.Error(codes.DeadlineExceeded, "deadline"), true},
		"deadline":               {context.DeadlineExceeded, true},
		"withdrawn at deadline":  {notSent{context.DeadlineExceeded}, true},
		"cancelled":              {context.Canceled, false},
		"withdrawn at cancel":    {notSent{context.Canceled}, false},
		"fenced":                 {fmt.Errorf("x: %w", ErrFenced), false},
		"corrupt record":         {ErrCorruptRecord, false},
		"node ID in use":         {ErrNodeIDInUse, false},
		"invalid ID":             {sdk.ErrInvalidID, false},
		"request too large":      {rpctypes.ErrRequestTooLarge, false},
		"closed":                 {ErrStoreClosed, false},
	} {
		err := unavailable(tc.err)
		assert.Equal(t, tc.want, errors.Is(err, sdk.ErrStoreUnavailable), name)
		assert.ErrorIs(t, err, tc.err, "%s: the original error stays matchable", name)
	}
}

// deadEndpoint returns an address where nothing listens.
func deadEndpoint(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// Every store operation on an unreachable etcd ends, within its context, with an error that
// wraps sdk.ErrStoreUnavailable; a caller's cancellation stays a cancellation.
func TestStoreUnavailableIsReported(t *testing.T) {
	s, err := New(newClient(t, []string{deadEndpoint(t)}), "down")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	s.settle = 300 * time.Millisecond
	owner := Owner{Node: "node", Lease: 1}
	rec := Record{Kind: sdk.KindInstance, Phase: PhaseReady, Owner: owner, Attempt: 1, Incarnation: 5, Revision: 5}
	releasing := rec
	releasing.Phase, releasing.ReleaseTag = PhaseReleasing, ReleaseExplicitClose
	ops := map[string]func(context.Context) error{
		"Lookup": func(ctx context.Context) error { _, err := s.Lookup(ctx, spot("x")); return err },
		"WaitChange": func(ctx context.Context) error {
			_, err := s.WaitChange(ctx, Resolution{Key: spot("x"), State: StateReady, Revision: 5, Record: rec})
			return err
		},
		"Reserve": func(ctx context.Context) error {
			_, err := s.Reserve(ctx, spot("x"), sdk.KindInstance, owner)
			return err
		},
		"CommitReady": func(ctx context.Context) error {
			_, err := s.CommitReady(ctx, Reservation{Key: spot("x"), Kind: sdk.KindInstance, Owner: owner, Attempt: 1, Revision: 5, Incarnation: 5})
			return err
		},
		"BeginRelease": func(ctx context.Context) error {
			_, err := s.BeginRelease(ctx, spot("x"), rec, ReleaseExplicitClose)
			return err
		},
		"FinishRelease": func(ctx context.Context) error { return s.FinishRelease(ctx, spot("x"), releasing) },
		"Release":       func(ctx context.Context) error { return s.Release(ctx, spot("x"), rec, ReleaseIdle) },
		"Reclaim":       func(ctx context.Context) error { _, err := s.Reclaim(ctx, owner); return err },
		"Nodes":         func(ctx context.Context) error { _, _, err := s.Nodes(ctx); return err },
		"Node":          func(ctx context.Context) error { _, _, err := s.Node(ctx, "node"); return err },
		"Register": func(ctx context.Context) error {
			_, err := s.Register(ctx, &storepb.NodeDescriptor{NodeId: "node"}, LeaseOptions{})
			return err
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			err := op(cctx)
			require.ErrorIs(t, err, sdk.ErrStoreUnavailable)
			switch name {
			case "Reserve", "CommitReady", "BeginRelease", "FinishRelease", "Release":
				require.ErrorIs(t, err, ErrOutcomeUnknown, "a write that was sent has an unknown outcome")
			default:
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
		})
		if name == "Reserve" {
			continue // it settles after its caller has gone, to leave no record behind
		}
		t.Run(name+" cancelled", func(t *testing.T) {
			t.Parallel()
			cctx, cancel := context.WithCancel(ctx)
			defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
			err := op(cctx)
			require.ErrorIs(t, err, context.Canceled)
			assert.NotErrorIs(t, err, sdk.ErrStoreUnavailable)
		})
	}
}
