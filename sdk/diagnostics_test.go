package sdk_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

// The level is a process global: these tests restore it and do not run in parallel.

func restoreLevel(t *testing.T) {
	t.Helper()
	was := sdk.CurrentDiagnosticsLevel()
	t.Cleanup(func() { require.NoError(t, sdk.SetDiagnosticsLevelSync(was)) })
}

func TestI3_DefaultLevelIsNormal(t *testing.T) {
	assert.Equal(t, sdk.DiagnosticsLevelNormal, sdk.DefaultDiagnosticsLevel)
	// Tests of this package never leave the level changed, so the process's level is the default.
	assert.Equal(t, sdk.DefaultDiagnosticsLevel, sdk.CurrentDiagnosticsLevel())
}

func TestI3_SyncSetterBridgesToTheCanonicalOne(t *testing.T) {
	restoreLevel(t)
	for _, lvl := range []sdk.DiagnosticsLevel{sdk.DiagnosticsLevelOff, sdk.DiagnosticsLevelErrors, sdk.DiagnosticsLevelDetailed, sdk.DiagnosticsLevelNormal} {
		require.NoError(t, sdk.SetDiagnosticsLevelSync(lvl))
		assert.Equal(t, lvl, sdk.CurrentDiagnosticsLevel(), "the sync setter sets %s", lvl)
		require.NoError(t, sdk.SetDiagnosticsLevel(context.Background(), sdk.DiagnosticsLevelOff))
		assert.Equal(t, sdk.DiagnosticsLevelOff, sdk.CurrentDiagnosticsLevel())
	}
	// Both refuse an unknown level the same way and leave the level as it was.
	require.NoError(t, sdk.SetDiagnosticsLevelSync(sdk.DiagnosticsLevelErrors))
	err := sdk.SetDiagnosticsLevelSync(sdk.DiagnosticsLevel(4))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	err2 := sdk.SetDiagnosticsLevel(context.Background(), sdk.DiagnosticsLevel(4))
	require.ErrorIs(t, err2, sdk.ErrInvalidArgument)
	assert.Equal(t, err.Error(), err2.Error())
	assert.Equal(t, sdk.DiagnosticsLevelErrors, sdk.CurrentDiagnosticsLevel())
}

func TestI3_EndedContextChangesNothing(t *testing.T) {
	restoreLevel(t)
	require.NoError(t, sdk.SetDiagnosticsLevelSync(sdk.DiagnosticsLevelErrors))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, sdk.SetDiagnosticsLevel(ctx, sdk.DiagnosticsLevelOff), context.Canceled)
	assert.Equal(t, sdk.DiagnosticsLevelErrors, sdk.CurrentDiagnosticsLevel())
}

// I3: a nil context is refused as an invalid argument, not a panic, and changes nothing.
func TestI3_NilContextChangesNothing(t *testing.T) {
	restoreLevel(t)
	require.NoError(t, sdk.SetDiagnosticsLevelSync(sdk.DiagnosticsLevelErrors))
	var nilCtx context.Context
	assert.NotPanics(t, func() {
		err := sdk.SetDiagnosticsLevel(nilCtx, sdk.DiagnosticsLevelOff)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "SetDiagnosticsLevel needs a context, got nil")
	})
	assert.Equal(t, sdk.DiagnosticsLevelErrors, sdk.CurrentDiagnosticsLevel())
}

func TestI3_ReadingTheLevelAllocatesNothing(t *testing.T) {
	var sink sdk.DiagnosticsLevel
	allocs := testing.AllocsPerRun(100, func() { sink = sdk.CurrentDiagnosticsLevel() })
	assert.Zero(t, allocs)
	_ = sink
}

func TestI2_LevelAndSampleRateValidation(t *testing.T) {
	require.NoError(t, sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelDetailed, SampleRate: 1}.Validate())
	require.NoError(t, sdk.DiagnosticsOptions{SampleRate: 0}.Validate())
	require.ErrorIs(t, sdk.DiagnosticsOptions{Level: 4}.Validate(), sdk.ErrInvalidArgument)
	require.ErrorIs(t, sdk.DiagnosticsOptions{SampleRate: -0.1}.Validate(), sdk.ErrInvalidArgument)
	require.ErrorIs(t, sdk.DiagnosticsOptions{SampleRate: 1.5}.Validate(), sdk.ErrInvalidArgument)
}
