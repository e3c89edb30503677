package sdk_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

func TestI1_UnhandledDispatchOptionsValidate(t *testing.T) {
	require.NoError(t, sdk.UnhandledDispatchOptions{}.Validate(), "the zero value is the default policy")
	require.NoError(t, sdk.UnhandledDispatchOptions{
		Request: sdk.UnhandledDispatchActionThrow,
		Send:    sdk.UnhandledDispatchActionLogAndDrop,
		Publish: sdk.UnhandledDispatchActionDrop,
	}.Validate())
	for _, tc := range []struct {
		family string
		opts   sdk.UnhandledDispatchOptions
	}{
		{"Request", sdk.UnhandledDispatchOptions{Request: 4}},
		{"Send", sdk.UnhandledDispatchOptions{Send: 9}},
		{"Publish", sdk.UnhandledDispatchOptions{Publish: 255}},
	} {
		err := tc.opts.Validate()
		require.Error(t, err, tc.family)
		assert.ErrorIs(t, err, sdk.ErrConfig)
		assert.Contains(t, err.Error(), tc.family)
		assert.Contains(t, err.Error(), "unknown action UnhandledDispatchAction(")
	}
	err := sdk.UnhandledDispatchOptions{Request: 4, Send: 5}.Validate()
	assert.Contains(t, err.Error(), "Request")
	assert.Contains(t, err.Error(), "Send", "every unknown action is reported")
	assert.True(t, sdk.UnhandledDispatchActionThrow.Valid())
	assert.False(t, sdk.UnhandledDispatchAction(4).Valid())
}
