package gen_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/gen"
)

// roomSrc declares a Spot type in a package named chat.
const roomSrc = `package chat

import (
	"context"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Room is a chat room.
//
//zlink:spot instance
type Room interface {
	// Say says something.
	Say(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}
`

// A package may use the API generated for another package of the run before the first
// generation, under whatever name it imports that package: here an alias.
func TestGeneratedAPIUsedThroughAnAliasedImportIsNoError(t *testing.T) {
	dir := tempModule(t, map[string]string{
		"chat/room.go": roomSrc,
		"lobby/lobby.go": `package lobby

import (
	"github.com/zlink-go/zlink/sdk"

	rooms "example.com/tmp/chat"
)

// Open opens a room.
func Open(c sdk.Client, id string) rooms.RoomIntent { return rooms.OpenRoom(c, id) }
`,
	})
	results, err := gen.Generate(context.Background(), gen.Config{Dir: dir, Env: moduleEnv()}, []string{"./..."})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.Equal(t, filepath.Join(dir, "chat", "room_zlink.go"), results[0].Path)
	_, err = gen.Write(results)
	require.NoError(t, err)
	buildPackage(t, dir, "./...")
}

// Two packages of one name are told apart by their import paths: a name generated in one of
// them is still undefined in the other, and that is an error of the package that uses it.
func TestANameGeneratedInAnotherPackageOfTheSameNameIsAnError(t *testing.T) {
	dir := tempModule(t, map[string]string{
		"chat/room.go":       roomSrc,
		"other/chat/chat.go": "// Package chat declares no Spot type.\npackage chat\n",
		"lobby/lobby.go": `package lobby

import (
	"github.com/zlink-go/zlink/sdk"

	"example.com/tmp/other/chat"
)

// Open opens a room of a package that generates none.
func Open(c sdk.Client, id string) chat.RoomIntent { return chat.OpenRoom(c, id) }
`,
	})
	_, err := gen.Generate(context.Background(), gen.Config{Dir: dir, Env: moduleEnv()}, []string{"./..."})
	var list gen.ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 2)
	assert.Equal(t, "lobby/lobby.go:10:41: zlinkgen: package lobby does not compile: undefined: chat.RoomIntent", list[0].Error())
	assert.Equal(t, "lobby/lobby.go:10:66: zlinkgen: package lobby does not compile: undefined: chat.OpenRoom", list[1].Error())
}
