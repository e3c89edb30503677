package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
