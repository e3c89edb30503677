package sdk_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

type enumCase struct {
	typ   string
	value uint64
	want  uint64
	str   string
	name  string
}

func ec[T interface {
	~uint8
	fmt.Stringer
}](v T, want uint64, name string) enumCase {
	return enumCase{typ: fmt.Sprintf("%T", v), value: uint64(v), want: want, str: v.String(), name: name}
}

// TestEnumValuesAndNames checks every constant's numeric value and name against seed 004 (F, G, I)
// and the project-defined profile and pressure enums (J).
func TestEnumValuesAndNames(t *testing.T) {
	cases := []enumCase{
		ec(sdk.RuntimeStatePreparing, 0, "Preparing"),
		ec(sdk.RuntimeStateServing, 1, "Serving"),
		ec(sdk.RuntimeStateRelocating, 2, "Relocating"),
		ec(sdk.RuntimeStateRelocated, 3, "Relocated"),
		ec(sdk.RuntimeStateDraining, 4, "Draining"),
		ec(sdk.RuntimeStateStopped, 5, "Stopped"),
		ec(sdk.RuntimeStateError, 6, "Error"),

		ec(sdk.RelocationModePlannedMaintenance, 0, "PlannedMaintenance"),
		ec(sdk.RelocationModeRollingUpdate, 1, "RollingUpdate"),

		ec(sdk.RelocationOutcomeRelocated, 0, "Relocated"),
		ec(sdk.RelocationOutcomeBlocked, 1, "Blocked"),

		ec(sdk.RelocationReasonNone, 0, "None"),
		ec(sdk.RelocationReasonTargetUnavailable, 1, "TargetUnavailable"),
		ec(sdk.RelocationReasonStoreUnavailable, 2, "StoreUnavailable"),
		ec(sdk.RelocationReasonRelocationDisabled, 3, "RelocationDisabled"),
		ec(sdk.RelocationReasonStateIncompatible, 4, "StateIncompatible"),
		ec(sdk.RelocationReasonDeadlineExceeded, 5, "DeadlineExceeded"),
		ec(sdk.RelocationReasonRelocationFailed, 6, "RelocationFailed"),
		ec(sdk.RelocationReasonRuntimeNotReady, 7, "RuntimeNotReady"),
		ec(sdk.RelocationReasonManualTopologyUnsupported, 8, "ManualTopologyUnsupported"),
		ec(sdk.RelocationReasonShutdownRequested, 9, "ShutdownRequested"),
		ec(sdk.RelocationReasonOperationInProgress, 10, "OperationInProgress"),

		ec(sdk.TerminationOutcomeStopped, 0, "Stopped"),
		ec(sdk.TerminationOutcomeForceStopped, 1, "ForceStopped"),

		ec(sdk.TerminationReasonNone, 0, "None"),
		ec(sdk.TerminationReasonDeadlineExceeded, 1, "DeadlineExceeded"),
		ec(sdk.TerminationReasonTeardownFailed, 2, "TeardownFailed"),

		ec(sdk.TopologyStateStarting, 0, "Starting"),
		ec(sdk.TopologyStateReady, 1, "Ready"),
		ec(sdk.TopologyStateDegraded, 2, "Degraded"),
		ec(sdk.TopologyStateStopping, 3, "Stopping"),
		ec(sdk.TopologyStateStopped, 4, "Stopped"),
		ec(sdk.TopologyStateFailed, 5, "Failed"),

		ec(sdk.TopologyReasonRuntimeNotReady, 0, "RuntimeNotReady"),
		ec(sdk.TopologyReasonNoReadyPeer, 1, "NoReadyPeer"),
		ec(sdk.TopologyReasonNoReadyTarget, 2, "NoReadyTarget"),
		ec(sdk.TopologyReasonLocationUnavailable, 3, "LocationUnavailable"),
		ec(sdk.TopologyReasonCapacityExceeded, 4, "CapacityExceeded"),
		ec(sdk.TopologyReasonDraining, 5, "Draining"),
		ec(sdk.TopologyReasonInternalFailure, 6, "InternalFailure"),

		ec(sdk.PeerStateConnecting, 0, "Connecting"),
		ec(sdk.PeerStateReady, 1, "Ready"),
		ec(sdk.PeerStateDraining, 2, "Draining"),
		ec(sdk.PeerStateNotConnected, 3, "NotConnected"),
		ec(sdk.PeerStateNotRequired, 4, "NotRequired"),

		ec(sdk.ClientServerRoleClient, 1, "Client"),
		ec(sdk.ClientServerRoleServer, 2, "Server"),
		ec(sdk.ClientServerRoleClientAndServer, 3, "ClientAndServer"),

		ec(sdk.UnhandledDispatchActionReplyError, 0, "ReplyError"),
		ec(sdk.UnhandledDispatchActionLogAndDrop, 1, "LogAndDrop"),
		ec(sdk.UnhandledDispatchActionDrop, 2, "Drop"),
		ec(sdk.UnhandledDispatchActionThrow, 3, "Throw"),

		ec(sdk.DiagnosticsLevelOff, 0, "Off"),
		ec(sdk.DiagnosticsLevelErrors, 1, "Errors"),
		ec(sdk.DiagnosticsLevelNormal, 2, "Normal"),
		ec(sdk.DiagnosticsLevelDetailed, 3, "Detailed"),

		ec(sdk.CoreHwmProfileBalanced, 0, "Balanced"),
		ec(sdk.CoreHwmProfileThroughput, 1, "Throughput"),
		ec(sdk.CoreHwmProfileLowMemory, 2, "LowMemory"),

		ec(sdk.ApplicationJobQueueProfileAuto, 0, "Auto"),
		ec(sdk.ApplicationJobQueueProfileManual, 1, "Manual"),

		ec(sdk.ApplicationJobQueuePressureStateNormal, 0, "Normal"),
		ec(sdk.ApplicationJobQueuePressureStatePaused, 1, "Paused"),
	}
	for _, c := range cases {
		t.Run(c.typ+"."+c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.value, "numeric value")
			assert.Equal(t, c.name, c.str, "String()")
		})
	}
}

func TestEnumUnknownValues(t *testing.T) {
	cases := []struct{ got, want string }{
		{sdk.RuntimeState(7).String(), "RuntimeState(7)"},
		{sdk.RuntimeState(255).String(), "RuntimeState(255)"},
		{sdk.RelocationMode(2).String(), "RelocationMode(2)"},
		{sdk.RelocationOutcome(2).String(), "RelocationOutcome(2)"},
		{sdk.RelocationReason(11).String(), "RelocationReason(11)"},
		{sdk.TerminationOutcome(2).String(), "TerminationOutcome(2)"},
		{sdk.TerminationReason(3).String(), "TerminationReason(3)"},
		{sdk.TopologyState(6).String(), "TopologyState(6)"},
		{sdk.TopologyReason(7).String(), "TopologyReason(7)"},
		{sdk.PeerState(5).String(), "PeerState(5)"},
		{sdk.ClientServerRole(0).String(), "ClientServerRole(0)"},
		{sdk.ClientServerRole(4).String(), "ClientServerRole(4)"},
		{sdk.UnhandledDispatchAction(4).String(), "UnhandledDispatchAction(4)"},
		{sdk.DiagnosticsLevel(4).String(), "DiagnosticsLevel(4)"},
		{sdk.CoreHwmProfile(3).String(), "CoreHwmProfile(3)"},
		{sdk.ApplicationJobQueueProfile(2).String(), "ApplicationJobQueueProfile(2)"},
		{sdk.ApplicationJobQueuePressureState(2).String(), "ApplicationJobQueuePressureState(2)"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.got)
	}
}

func TestDefaultShutdownDeadline(t *testing.T) {
	assert.Equal(t, 30*time.Second, sdk.DefaultShutdownDeadline) // F8
}

func ptr[T any](v T) *T { return &v }

// TestEffectiveTarget covers F4.
func TestEffectiveTarget(t *testing.T) {
	const source = int64(5)
	cases := []struct {
		name    string
		opts    sdk.RelocationOptions
		want    int64
		wantErr string
	}{
		{name: "planned maintenance uses the source version",
			opts: sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance}, want: source},
		{name: "planned maintenance with a target",
			opts:    sdk.RelocationOptions{Mode: sdk.RelocationModePlannedMaintenance, TargetApplicationVersion: ptr(source)},
			wantErr: "takes no target application version"},
		{name: "rolling update without a target",
			opts:    sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate},
			wantErr: "requires a target application version"},
		{name: "rolling update to the same version",
			opts:    sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: ptr(source)},
			wantErr: "5 is not greater than the source's 5"},
		{name: "rolling update to a lower version",
			opts:    sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: ptr(int64(4))},
			wantErr: "4 is not greater than the source's 5"},
		{name: "rolling update to a higher version",
			opts: sdk.RelocationOptions{Mode: sdk.RelocationModeRollingUpdate, TargetApplicationVersion: ptr(int64(6))},
			want: 6},
		{name: "unknown mode",
			opts:    sdk.RelocationOptions{Mode: sdk.RelocationMode(9), TargetApplicationVersion: ptr(int64(6))},
			wantErr: "unknown relocation mode RelocationMode(9)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.opts.EffectiveTarget(source)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.True(t, errors.Is(err, sdk.ErrInvalidArgument), "errors.Is ErrInvalidArgument: %v", err)
				assert.Contains(t, err.Error(), c.wantErr)
				assert.Zero(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

// TestDiagnosticsOptionsValidate covers I2.
func TestDiagnosticsOptionsValidate(t *testing.T) {
	for _, rate := range []float64{0, 1, 0.5} {
		assert.NoError(t, sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelNormal, SampleRate: rate}.Validate(), "rate %v", rate)
	}
	for _, c := range []struct {
		rate float64
		name string
	}{{-0.1, "-0.1"}, {1.1, "1.1"}, {math.NaN(), "NaN"}, {math.Inf(1), "+Inf"}} {
		err := sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevelDetailed, SampleRate: c.rate}.Validate()
		require.Error(t, err, "rate %v", c.rate)
		assert.ErrorIs(t, err, sdk.ErrInvalidArgument)
		assert.Contains(t, err.Error(), c.name)
	}
	err := sdk.DiagnosticsOptions{Level: sdk.DiagnosticsLevel(4), SampleRate: 1}.Validate()
	require.Error(t, err)
	assert.ErrorIs(t, err, sdk.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "DiagnosticsLevel(4)")
}

// TestInboundDispatchOptionsValidate covers I4.
func TestInboundDispatchOptionsValidate(t *testing.T) {
	ok := []sdk.InboundDispatchOptions{
		{},
		{ApplicationJobQueuePauseThresholdPercent: 100, ApplicationJobQueueResumeThresholdPercent: 99},
		{ApplicationJobQueuePauseThresholdPercent: 80},
		{ApplicationJobQueueResumeThresholdPercent: 50},
		{CoreHwmBudgetBytes: ptr(uint64(1 << 20)), CoreHwmProfile: sdk.CoreHwmProfileLowMemory,
			ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: ptr(uint64(64)),
			ApplicationJobQueuePauseThresholdPercent: 90, ApplicationJobQueueResumeThresholdPercent: 70},
	}
	for i, o := range ok {
		assert.NoError(t, o.Validate(), "case %d", i)
	}
	bad := []struct {
		opts sdk.InboundDispatchOptions
		msg  string
	}{
		{sdk.InboundDispatchOptions{ApplicationJobQueuePauseThresholdPercent: 101}, "pause threshold 101%"},
		{sdk.InboundDispatchOptions{ApplicationJobQueueResumeThresholdPercent: 101}, "resume threshold 101%"},
		{sdk.InboundDispatchOptions{ApplicationJobQueuePauseThresholdPercent: 70, ApplicationJobQueueResumeThresholdPercent: 70},
			"resume threshold 70% is not below the pause threshold 70%"},
		{sdk.InboundDispatchOptions{ApplicationJobQueuePauseThresholdPercent: 60, ApplicationJobQueueResumeThresholdPercent: 80},
			"resume threshold 80% is not below the pause threshold 60%"},
		{sdk.InboundDispatchOptions{CoreHwmProfile: sdk.CoreHwmProfile(3)}, "CoreHwmProfile(3)"},
		{sdk.InboundDispatchOptions{ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfile(2)}, "ApplicationJobQueueProfile(2)"},
	}
	for _, c := range bad {
		err := c.opts.Validate()
		require.Error(t, err, c.msg)
		assert.ErrorIs(t, err, sdk.ErrInvalidArgument)
		assert.Contains(t, err.Error(), c.msg)
	}
}

// TestObservedCarriesStatusAndLoss checks the generic wrapper of H1.
func TestObservedCarriesStatusAndLoss(t *testing.T) {
	o := sdk.Observed[sdk.RuntimeStatus]{
		Status: sdk.RuntimeStatus{State: sdk.RuntimeStateServing, IsReady: true, Sequence: 3, SafeToShutdown: true},
		Loss:   sdk.ObservationLoss{CoalescedCount: 2},
	}
	assert.Equal(t, sdk.RuntimeStateServing, o.Status.State)
	assert.Equal(t, uint64(2), o.Loss.CoalescedCount)
	assert.Zero(t, o.Loss.DiscardedTerminalCount)
}
