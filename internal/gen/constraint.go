package gen

import (
	"path/filepath"
	"slices"
	"strings"
)

// The GOOS and GOARCH values that a file name suffix constrains a file to (go/build's lists).
var (
	knownOS = []string{"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js",
		"linux", "nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos"}
	knownArch = []string{"386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64", "mips",
		"mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le", "riscv",
		"riscv64", "s390", "s390x", "sparc", "sparc64", "wasm"}
)

// outputConstraint returns the //go:build line of the output of source, whose own //go:build
// line is goBuild (or ""): the output must build exactly when its input does. A file name
// suffix such as _linux or _linux_arm64 constrains the input, but the output's name ends in
// _zlink, so the suffix becomes part of the output's //go:build line. A cgo input (one that
// imports "C") builds only with cgo, and its output imports no "C": cgo is a term too.
func outputConstraint(source, goBuild string, cgo bool) string {
	var terms []string
	if cgo {
		terms = append(terms, "cgo")
	}
	parts := strings.Split(strings.TrimSuffix(filepath.Base(source), ".go"), "_")
	if n := len(parts); n >= 3 && slices.Contains(knownOS, parts[n-2]) && slices.Contains(knownArch, parts[n-1]) {
		terms = append(terms, parts[n-2], parts[n-1])
	} else if n >= 2 && (slices.Contains(knownOS, parts[n-1]) || slices.Contains(knownArch, parts[n-1])) {
		terms = append(terms, parts[n-1])
	}
	if len(terms) == 0 {
		return goBuild
	}
	if expr := strings.TrimSpace(strings.TrimPrefix(goBuild, "//go:build")); expr != "" {
		terms = append(terms, "("+expr+")")
	}
	return "//go:build " + strings.Join(terms, " && ")
}
