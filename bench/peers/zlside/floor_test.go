package zlside

import (
	"context"
	"testing"

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
