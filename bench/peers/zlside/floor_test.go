package zlside

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOneWayFloorCountsEveryMessage(t *testing.T) {
	f, err := OneWayFloor(context.Background(), 8, 4, 10_000)
	require.NoError(t, err)
	require.Positive(t, f.Rate)
	require.Nil(t, f.Latency)
}

func TestOneWayFloorRefusesNoObjectsAndStopsWithItsContext(t *testing.T) {
	_, err := OneWayFloor(context.Background(), 8, 0, 10)
	require.ErrorContains(t, err, "0 objects")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = OneWayFloor(ctx, 8, 4, 10_000)
	require.ErrorIs(t, err, context.Canceled)
}

func TestChannelFloorTimesEveryCallOfItsWindow(t *testing.T) {
	f, err := ChannelFloor(context.Background(), 4, 10*time.Millisecond, 50*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, f.Rate)
	require.NotNil(t, f.Latency)
	require.Positive(t, f.Ops)
	require.LessOrEqual(t, f.Latency.P50, f.Latency.Max)
}
