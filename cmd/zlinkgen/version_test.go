package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/zlink-go/zlink/internal/gen"
	"github.com/zlink-go/zlink/templates"
)

func TestVersionText(t *testing.T) {
	pin := "generated code: zlinkgen " + gen.Version + ", sdk." + gen.SupportPackage + "\n"

	// Run from a checkout (go run ./cmd/zlinkgen): no VCS stamp.
	assert.Equal(t, "zlinkgen (devel)\nsdk github.com/zlink-go/zlink (devel)\n"+pin, versionText(devel))

	// Built from a checkout with the VCS stamp: the revision, and whether the tree was dirty.
	stamped := &debug.BuildInfo{Main: debug.Module{Path: templates.SDKPath, Version: "v0.0.0-20260101000000-abcdefabcdef+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abcdefabcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	assert.Equal(t, "zlinkgen v0.0.0-20260101000000-abcdefabcdef+dirty, revision abcdefabcdef0123, modified\n"+
		"sdk github.com/zlink-go/zlink v0.0.0-20260101000000-abcdefabcdef+dirty\n"+pin, versionText(stamped))
	stamped.Settings[2].Value = "false"
	assert.Contains(t, versionText(stamped), ", revision abcdefabcdef0123\n")

	// A released version: zlinkgen and the SDK are the same module, so the same version.
	assert.Equal(t, "zlinkgen v0.1.0\nsdk github.com/zlink-go/zlink v0.1.0\n"+pin, versionText(released))

	// A tool of an application: the SDK module is a dependency; the application's VCS stamp is
	// not zlinkgen's.
	asTool := &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
		Deps:     []*debug.Module{{Path: templates.SDKPath, Version: "v0.2.3", Sum: "h1:def="}},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123"}}}
	assert.Equal(t, "zlinkgen v0.2.3\nsdk github.com/zlink-go/zlink v0.2.3\n"+pin, versionText(asTool))

	// A tool of an application that replaces the SDK with a checkout.
	replaced := &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
		Deps: []*debug.Module{{Path: templates.SDKPath, Version: templates.DevVersion, Replace: &debug.Module{Path: "/src/zlink"}}}}
	assert.Equal(t, "zlinkgen "+templates.DevVersion+"\nsdk github.com/zlink-go/zlink "+templates.DevVersion+" => /src/zlink\n"+pin,
		versionText(replaced))

	// No build information at all.
	assert.Equal(t, "zlinkgen unknown\nsdk github.com/zlink-go/zlink unknown\n"+pin, versionText(nil))
}
