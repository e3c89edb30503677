package gen

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The package sdk joins the user's patterns only where the go command takes it as it takes
// them: not beside named files or queries.
func TestTheSDKIsLoadedBesidePackagePatternsOnly(t *testing.T) {
	assert.True(t, mayLoadSDK([]string{"./..."}))
	assert.True(t, mayLoadSDK([]string{".", "example.com/chat"}))
	assert.False(t, mayLoadSDK([]string{"chat/room.go"}))
	assert.False(t, mayLoadSDK([]string{"file=chat/room.go"}))
}
