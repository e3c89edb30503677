package wire_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// roundTrip sends err through its wire form, as bytes.
func roundTrip(t *testing.T, err error) error {
	t.Helper()
	b, merr := proto.Marshal(wire.EncodeError(err))
	require.NoError(t, merr)
	var e wire.Error
	require.NoError(t, proto.Unmarshal(b, &e))
	return wire.DecodeError(&e)
}

func TestSentinelsComeBackAsThemselves(t *testing.T) {
	for _, s := range []error{sdk.ErrNotFound, sdk.ErrAlreadyExists, sdk.ErrStaleRoute, sdk.ErrOwnerUnavailable,
		sdk.ErrInboundBudget, sdk.ErrNotServing, sdk.ErrUnhandled, sdk.ErrClosed, sdk.ErrMessageTooLarge,
		sdk.ErrCreationFailed, sdk.ErrHandlerPanicked, sdk.ErrInvalidArgument, sdk.ErrInvalidID,
		sdk.ErrStoreUnavailable, sdk.ErrUnsupported, context.Canceled, context.DeadlineExceeded} {
		err := roundTrip(t, fmt.Errorf("on node-b: %w", s))
		assert.ErrorIs(t, err, s)
		assert.Equal(t, "on node-b: "+s.Error(), err.Error(), "the message crosses too")
	}
}

// An etcd timeout wrapped as the store's failure crosses as the store's failure, not as the
// caller's deadline.
func TestStoreUnavailableCrossesAsItself(t *testing.T) {
	err := roundTrip(t, fmt.Errorf("lookup: %w: %w", sdk.ErrStoreUnavailable, context.DeadlineExceeded))
	assert.ErrorIs(t, err, sdk.ErrStoreUnavailable)
	var ae *sdk.AppError
	assert.False(t, errors.As(err, &ae), "a store failure is not an application error")
}

func TestTypedDetailsCross(t *testing.T) {
	err := roundTrip(t, fmt.Errorf("send: %w", &sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisBytes, Limit: 10, Queued: 9, Requested: 3}))
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisBytes, Limit: 10, Queued: 9, Requested: 3}, *qf)
	assert.ErrorIs(t, err, sdk.ErrQueueFull)

	err = roundTrip(t, &sdk.CapacityError{Where: sdk.CapacityPlacement})
	var ce *sdk.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, sdk.CapacityPlacement, ce.Where)
}

func TestApplicationErrorsKeepCodeAndMessage(t *testing.T) {
	err := roundTrip(t, sdk.Errorf("room_full", "room %s is full", "r1"))
	var ae *sdk.AppError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "room_full", ae.Code)
	assert.Equal(t, "room r1 is full", ae.Message)

	err = roundTrip(t, errors.New("plain failure"))
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "", ae.Code)
	assert.Equal(t, "plain failure", ae.Message)
	assert.Nil(t, wire.EncodeError(nil))
	assert.NoError(t, wire.DecodeError(nil))
}

// An error's texts cross the wire as UTF-8 whatever they held: protobuf's string fields carry
// nothing else, and a peer would refuse the whole batch.
func TestEncodeErrorKeepsItsTextsUTF8(t *testing.T) {
	for _, err := range []error{
		errors.New("bad \xff byte"),
		&sdk.AppError{Code: "c\xfe", Message: "m\xff"},
		&sdk.QueueFullError{Lane: sdk.LaneApplication, Where: "Room.J\xffoin"},
	} {
		e := wire.EncodeError(err)
		for _, s := range []string{e.GetMessage(), e.GetAppCode(), e.GetQueueWhere()} {
			assert.True(t, utf8.ValidString(s), "%q", s)
		}
		_, merr := proto.Marshal(e)
		assert.NoError(t, merr)
	}
	assert.Equal(t, "m\uFFFD", wire.EncodeError(&sdk.AppError{Message: "m\xff"}).GetMessage())
}
