package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/mod/modfile"
	gomodule "golang.org/x/mod/module"

	"github.com/zlink-go/zlink/templates"
)

// sdkNone is the -sdk value that writes neither a require nor a replace.
const sdkNone = "none"

// sdkFor decides where a scaffolded application's SDK comes from. flag is -sdk: "none", a
// checkout's directory, or "" to decide from bi, how this zlinkgen was built. A zlinkgen built
// from the module cache (a released version: it has a checksum and no replace) requires its
// own version. Any other build was made from source on this machine, so the SDK is the
// checkout found by walking up from each of starts in turn. The generator and the SDK must
// match (generated code names sdk.SupportPackageIsVersionN), which is why the checkout is the
// one zlinkgen itself was built from, not any other.
func sdkFor(flag string, bi *debug.BuildInfo, starts []string) (templates.SDK, error) {
	switch flag {
	case sdkNone:
		return templates.SDK{}, nil
	case "":
	default:
		dir, err := sdkDir(flag)
		if err != nil {
			return templates.SDK{}, err
		}
		return templates.SDK{Version: templates.DevVersion, Dir: dir}, nil
	}
	if m := sdkModule(bi); m != nil && m.Replace == nil && m.Sum != "" && gomodule.Check(m.Path, m.Version) == nil {
		return templates.SDK{Version: m.Version}, nil
	}
	for _, start := range starts {
		if dir, ok := findCheckout(start); ok {
			return templates.SDK{Version: templates.DevVersion, Dir: dir}, nil
		}
	}
	return templates.SDK{}, fmt.Errorf("this zlinkgen was built from source, but no %s checkout was found above %s; "+
		"run it inside the checkout (go run ./cmd/zlinkgen init ...), or give -sdk DIR (the checkout) or -sdk none",
		templates.SDKPath, strings.Join(starts, " or "))
}

// sdkModule is the SDK's module in bi: the main module when zlinkgen is built in the SDK's own
// module, else one of its dependencies (zlinkgen run as a tool of an application).
func sdkModule(bi *debug.BuildInfo) *debug.Module {
	if bi == nil {
		return nil
	}
	if bi.Main.Path == templates.SDKPath {
		return &bi.Main
	}
	for _, d := range bi.Deps {
		if d.Path == templates.SDKPath {
			return d
		}
	}
	return nil
}

// sdkStarts are the directories to look for the checkout above: the directory of this source
// file as it was compiled (so that a zlinkgen built from a checkout finds it from anywhere;
// the path is not absolute under -trimpath, and then skipped), then the working directory.
func sdkStarts() []string {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	return starts
}

// findCheckout walks up from start to the directory whose go.mod declares the SDK's module.
// It passes over other modules' go.mod files on the way (bench/peers is a module of its own
// inside the checkout).
func findCheckout(start string) (string, bool) {
	dir := filepath.Clean(start)
	for {
		if modulePath(dir) == templates.SDKPath {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// modulePath is the module path declared by dir/go.mod, or "" when there is none.
func modulePath(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return ""
	}
	return modfile.ModulePath(data)
}

// sdkDir checks that -sdk DIR names the root of an SDK checkout and returns its absolute path.
func sdkDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("-sdk %s: %w", dir, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("-sdk %s: no such directory; -sdk wants the root of a %s checkout, or %s", dir, templates.SDKPath, sdkNone)
	case err != nil:
		return "", fmt.Errorf("-sdk %s: %w", dir, err)
	case !st.IsDir():
		return "", fmt.Errorf("-sdk %s: not a directory; -sdk wants the root of a %s checkout, or %s", dir, templates.SDKPath, sdkNone)
	}
	switch got := modulePath(abs); got {
	case templates.SDKPath:
		return abs, nil
	case "":
		return "", fmt.Errorf("-sdk %s: no go.mod with a module line there; -sdk wants the root of a %s checkout, or %s", dir, templates.SDKPath, sdkNone)
	default:
		return "", fmt.Errorf("-sdk %s: its go.mod is module %s, not %s; -sdk wants the root of a %s checkout, or %s",
			dir, got, templates.SDKPath, templates.SDKPath, sdkNone)
	}
}

// sdkNote is the line of the next steps that says what go.mod got.
func sdkNote(sdk templates.SDK) string {
	switch {
	case sdk.Dir != "":
		return fmt.Sprintf("go.mod: %s comes from the checkout %s (replace, require %s)", templates.SDKPath, sdk.Dir, sdk.Version)
	case sdk.Version != "":
		return fmt.Sprintf("go.mod: requires %s %s", templates.SDKPath, sdk.Version)
	default:
		return fmt.Sprintf("go.mod: no require of %s (-sdk %s); add one before go mod tidy, e.g.\n"+
			"  go mod edit -require=%s@%s -replace=%s=/path/to/checkout", templates.SDKPath, sdkNone,
			templates.SDKPath, templates.DevVersion, templates.SDKPath)
	}
}
