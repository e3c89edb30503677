package wire_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// An error's texts cross the wire cut to their limits, at a rune's start, with a note of how
// long they were: a reply has bounded room beyond its payload, and a handler's error text may
// be any length. An application error keeps its code; a runtime error its sentinel.
func TestEncodeErrorCutsTextsOverTheirLimits(t *testing.T) {
	long := strings.Repeat("é", 40<<10) // two bytes each: a cut must not split one
	var ae *sdk.AppError
	require.ErrorAs(t, roundTrip(t, &sdk.AppError{Code: "full_" + long, Message: long}), &ae)
	assert.LessOrEqual(t, len(ae.Message), wire.MaxErrorMessageBytes)
	assert.LessOrEqual(t, len(ae.Code), wire.MaxErrorCodeBytes)
	for _, s := range []string{ae.Message, ae.Code} {
		assert.True(t, utf8.ValidString(s))
		assert.True(t, strings.HasSuffix(s, " bytes, cut)"), "%.40q...", s)
	}
	assert.True(t, strings.HasPrefix(ae.Code, "full_éé"))
	assert.Contains(t, ae.Message, fmt.Sprintf("(%d bytes, cut)", len(long)))

	err := roundTrip(t, fmt.Errorf("%w: %s", sdk.ErrNotFound, long))
	require.ErrorIs(t, err, sdk.ErrNotFound)
	assert.LessOrEqual(t, len(wire.EncodeError(fmt.Errorf("%w: %s", sdk.ErrNotFound, long)).GetMessage()), wire.MaxErrorMessageBytes)

	short := strings.Repeat("x", wire.MaxErrorMessageBytes)
	assert.Equal(t, short, wire.EncodeError(errors.New(short)).GetMessage(), "a text at its limit is kept whole")
}
