package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/zlink-go/zlink/internal/gen"
	"github.com/zlink-go/zlink/templates"
)

// versionText is what -version prints: the versions this zlinkgen was built with, read from bi
// (runtime/debug.ReadBuildInfo). zlinkgen and the SDK are one module, so both lines name the
// version of that module: "(devel)" for a build from a checkout, with the VCS revision when the
// build stamped one; a released version when built from the module cache; the replaced
// directory when an application replaces the module. The last line is what the generated code
// depends on: the header version and the sdk.SupportPackageIsVersionN it references.
func versionText(bi *debug.BuildInfo) string {
	version, sdk := "unknown", templates.SDKPath+" unknown"
	if m := sdkModule(bi); m != nil {
		version = moduleVersion(m)
		sdk = templates.SDKPath + " " + version
		if m.Replace != nil {
			sdk += " => " + m.Replace.Path
			if m.Replace.Version != "" {
				sdk += " " + m.Replace.Version
			}
		}
		if m == &bi.Main {
			version += vcsStamp(bi.Settings)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "zlinkgen %s\n", version)
	fmt.Fprintf(&b, "sdk %s\n", sdk)
	fmt.Fprintf(&b, "generated code: zlinkgen %s, sdk.%s\n", gen.Version, gen.SupportPackage)
	return b.String()
}

// moduleVersion is m's version, "(devel)" when the build recorded none.
func moduleVersion(m *debug.Module) string {
	if m.Version == "" {
		return "(devel)"
	}
	return m.Version
}

// vcsStamp is ", revision R" (and ", modified" for a dirty tree) when the build stamped the
// main module's VCS state, else "".
func vcsStamp(settings []debug.BuildSetting) string {
	var rev string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if modified {
		return ", revision " + rev + ", modified"
	}
	return ", revision " + rev
}
