package sdk_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

func TestA1_SpotKindValues(t *testing.T) {
	assert.EqualValues(t, 0, sdk.KindInvalid)
	assert.EqualValues(t, 1, sdk.KindEntry)
	assert.EqualValues(t, 2, sdk.KindUser)
	assert.EqualValues(t, 3, sdk.KindInstance)
	assert.EqualValues(t, 4, sdk.KindActor)
	for k, name := range map[sdk.SpotKind]string{
		sdk.KindInvalid: "Invalid", sdk.KindEntry: "Entry", sdk.KindUser: "User", sdk.KindInstance: "Instance",
		sdk.KindActor: "Actor", sdk.SpotKind(7): "SpotKind(7)",
	} {
		assert.Equal(t, name, k.String())
	}
	assert.False(t, sdk.KindInvalid.Valid())
	assert.False(t, sdk.SpotKind(5).Valid())
	assert.True(t, sdk.KindInstance.Valid())
	assert.True(t, sdk.KindActor.Valid())
	for k, spot := range map[sdk.SpotKind]bool{
		sdk.KindInvalid: false, sdk.KindEntry: true, sdk.KindUser: true, sdk.KindInstance: true,
		sdk.KindActor: false, sdk.SpotKind(5): false,
	} {
		assert.Equal(t, spot, k.IsSpot(), "%s", k)
	}
}

func TestA1_ParseSpotKind(t *testing.T) {
	for in, want := range map[string]sdk.SpotKind{"entry": sdk.KindEntry, "User": sdk.KindUser, "INSTANCE": sdk.KindInstance} {
		got, err := sdk.ParseSpotKind(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	// An Actor is not a Spot: ParseSpotKind refuses its kind.
	for _, bad := range []string{"", "invalid", "Invalid", "actor", "Actor", "instances"} {
		_, err := sdk.ParseSpotKind(bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", bad))
	}
}

func TestValidateIDNamesTheProblem(t *testing.T) {
	cases := []struct{ id, want string }{
		{"", "node ID is empty"},
		{strings.Repeat("x", 1025), "node ID is 1025 bytes, over the limit of 1024"},
		{"a\xc3", `node ID "a\xc3" is not valid UTF-8`},
		{"ab\x00", `contains a NUL byte at offset 2`},
	}
	for _, tc := range cases {
		err := sdk.NodeID(tc.id).Validate()
		require.ErrorIs(t, err, sdk.ErrInvalidID, "%q", tc.id)
		assert.Contains(t, err.Error(), tc.want)
	}
	long := strings.Repeat("y", 2000) + "\xff"
	err := sdk.ValidateSpotID(long)
	require.ErrorIs(t, err, sdk.ErrInvalidID)
	assert.Less(t, len(err.Error()), 200, "long IDs are shortened in messages")
	for _, ok := range []string{"a/b", " ", "방", "%", strings.Repeat("z", 1024)} {
		assert.NoError(t, sdk.ValidateSpotID(ok), "%q", ok)
		assert.NoError(t, sdk.ValidateTypeName(ok), "%q", ok)
	}
}

func TestANodeIDIsWhatAgRPCHeaderCarries(t *testing.T) {
	for id, want := range map[string]string{
		"nœud-1":   `has 'œ' at offset 1`,
		"node 1":   `has ' ' at offset 4`,
		"node\t1":  `has '\t' at offset 4`,
		"node\n1":  `has '\n' at offset 4`,
		"node\x7f": `has '\x7f' at offset 4`,
	} {
		err := sdk.NodeID(id).Validate()
		require.ErrorIs(t, err, sdk.ErrInvalidID, "%q", id)
		assert.Contains(t, err.Error(), want, "%q", id)
		assert.Contains(t, err.Error(), "printable ASCII without spaces", "%q", id)
	}
	for _, ok := range []string{"node-1", "10.0.0.7:7000", "a/b%c", "~!"} {
		assert.NoError(t, sdk.NodeID(ok).Validate(), "%q", ok)
	}
	// A Spot ID is not bound by this: it travels inside messages, never in a header.
	assert.NoError(t, sdk.ValidateSpotID("nœud 1"))
}

func TestE6_QueueFullErrorMatches(t *testing.T) {
	var err error = fmt.Errorf("send: %w", &sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisBytes, Limit: 1024, Queued: 900, Requested: 300})
	require.ErrorIs(t, err, sdk.ErrQueueFull)
	assert.NotErrorIs(t, err, sdk.ErrCapacityExceeded, "a full lane is not CapacityExceeded (E6)")
	var qf *sdk.QueueFullError
	require.ErrorAs(t, err, &qf)
	assert.Equal(t, sdk.AxisBytes, qf.Axis)
	assert.Contains(t, err.Error(), "application lane bytes limit 1024 reached")
}

func TestE6_CapacityErrorMatches(t *testing.T) {
	var err error = fmt.Errorf("create: %w", &sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: 10})
	require.ErrorIs(t, err, sdk.ErrCapacityExceeded)
	assert.NotErrorIs(t, err, sdk.ErrQueueFull)
	var ce *sdk.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, sdk.CapacityActivationCap, ce.Where)
	assert.Equal(t, "zlink: capacity exceeded: activation cap (limit 10)", ce.Error())
	assert.Equal(t, "zlink: capacity exceeded: placement", (&sdk.CapacityError{Where: sdk.CapacityPlacement}).Error())
}

func TestSentinelsAreDistinct(t *testing.T) {
	all := []error{sdk.ErrInvalidID, sdk.ErrInvalidArgument, sdk.ErrConfig, sdk.ErrNotFound, sdk.ErrAlreadyExists,
		sdk.ErrStaleRoute, sdk.ErrOwnerUnavailable, sdk.ErrQueueFull, sdk.ErrInboundBudget, sdk.ErrCapacityExceeded,
		sdk.ErrNotServing, sdk.ErrUnhandled, sdk.ErrClosed, sdk.ErrMessageTooLarge, sdk.ErrCreationFailed, sdk.ErrHandlerPanicked,
		sdk.ErrStoreUnavailable, sdk.ErrUnsupported, sdk.ErrNoReadyTarget}
	for i, a := range all {
		for j, b := range all {
			assert.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
	}
}

func TestAppErrorCarriesCodeAndMessage(t *testing.T) {
	err := sdk.Errorf("room_full", "room %s has %d people", "lobby", 8)
	assert.Equal(t, "room_full: room lobby has 8 people", err.Error())
	assert.Equal(t, "plain", (&sdk.AppError{Message: "plain"}).Error())
}

func TestCloseReasonNames(t *testing.T) {
	assert.Equal(t, "IdleEvicted", sdk.CloseIdleEvicted.String())
	assert.Equal(t, "CreationFailed", sdk.CloseCreationFailed.String())
	assert.Equal(t, "CloseReason(99)", sdk.CloseReason(99).String())
}

func ExampleQueueFullError() {
	err := fmt.Errorf("join: %w", &sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisCount, Limit: 1024, Queued: 1024, Requested: 1})
	var qf *sdk.QueueFullError
	if errors.Is(err, sdk.ErrQueueFull) && errors.As(err, &qf) {
		fmt.Println("full on", qf.Lane, qf.Axis)
	}
	// Output: full on application count
}

// An Actor target names the Actor and no node; it never carries create-intent (B9), and its
// parts are validated like any other ID.
func TestB9_ActorTarget(t *testing.T) {
	a := sdk.ActorTarget("game.Pawn", "p1")
	assert.Equal(t, sdk.KindActor, a.Kind())
	assert.Equal(t, "game.Pawn", a.Type())
	assert.Equal(t, "p1", a.ID())
	assert.Empty(t, a.Node())
	assert.False(t, a.CreateIntent())
	assert.Equal(t, a, a.Plain())
	require.NoError(t, a.Validate())
	assert.Equal(t, `Actor game.Pawn/"p1"`, a.String())

	desc := &sdk.SpotDesc{Name: "game.Pawn", Kind: sdk.KindActor}
	assert.Same(t, desc, a.WithDesc(desc).Desc())
	assert.Equal(t, sdk.KindActor, a.WithDesc(desc).Kind())

	for _, tc := range []struct {
		target sdk.Target
		want   string
	}{
		{sdk.ActorTarget("game.Pawn", ""), "actor ID is empty"},
		{sdk.ActorTarget("", "p1"), "actor type name is empty"},
		{sdk.ActorTarget("game.Pawn", "a\x00"), "actor ID \"a\\x00\" contains a NUL byte"},
		{sdk.ActorTarget("game.Pawn", strings.Repeat("x", sdk.MaxIDBytes+1)), "over the limit"},
	} {
		err := tc.target.Validate()
		require.ErrorIs(t, err, sdk.ErrInvalidID, "%v", tc.target)
		assert.Contains(t, err.Error(), tc.want)
	}
}
