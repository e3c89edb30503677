package gen

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The package sdk joins the user's patterns only where the go command takes it as it takes
// them, and never where finding it could make the go command change go.mod (-mod=mod).
func TestTheSDKIsLoadedOnlyWhereTheGoCommandChangesNothing(t *testing.T) {
	ctx := context.Background()
	env := func(goflags string) []string { return append(os.Environ(), "GOFLAGS="+goflags) }
	for _, c := range []struct {
		name     string
		cfg      Config
		patterns []string
		want     bool
	}{
		{"a package pattern", Config{Env: env("")}, []string{"./..."}, true},
		{"named files", Config{Env: env("")}, []string{"chat/room.go"}, false},
		{"a query", Config{Env: env("")}, []string{"file=chat/room.go"}, false},
		{"-mod=mod in GOFLAGS", Config{Env: env("-mod=mod")}, []string{"."}, false},
		{"-mod=mod in the build flags", Config{Env: env(""), BuildFlags: []string{"-mod=mod"}}, []string{"."}, false},
		{"--mod=mod", Config{Env: env(""), BuildFlags: []string{"--mod=mod"}}, []string{"."}, false},
		{"build flags after GOFLAGS", Config{Env: env("-mod=mod"), BuildFlags: []string{"-mod=readonly"}}, []string{"."}, true},
		{"-mod=vendor", Config{Env: env("-mod=vendor")}, []string{"."}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Dir = t.TempDir()
			assert.Equal(t, c.want, mayLoadSDK(ctx, c.cfg, c.patterns))
		})
	}
}
