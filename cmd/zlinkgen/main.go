// Command zlinkgen generates typed ZLink references, create and create-intent calls,
// registration functions and dispatch tables from Go interfaces annotated with //zlink:
// directives. Run it with go generate inside a package:
//
//	//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen
//
// or on package patterns:
//
//	zlinkgen [-check] [-tags list] [-v] [packages]
//	zlinkgen -version
//	zlinkgen init [-template app|match] [-sdk DIR|none] <dir> [module path]
//
// With no packages it works on the package in the current directory. For each input file
// room.go that declares annotated interfaces it writes room_zlink.go beside it, only when the
// bytes change. -check writes nothing and fails, naming them, when generated files are stale
// or missing. init scaffolds a runnable application into an empty directory; its go.mod requires
// the SDK this zlinkgen belongs to: the released version, or, for a zlinkgen run from a checkout
// (go run ./cmd/zlinkgen), a replace of the module with that checkout; -sdk DIR names the
// checkout, -sdk none writes neither. -version prints the version of zlinkgen and of the SDK
// it was built with (one module: "(devel)" from a checkout), and what generated code pins. The
// work is done by internal/gen; see its documentation for the directives and method shapes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/zlink-go/zlink/internal/gen"
	"github.com/zlink-go/zlink/templates"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command: it returns the exit status (0 done, 1 problems or stale files, 2 usage).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "init" {
		return runInit(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("zlinkgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "write nothing; fail, naming them, if generated files are stale or missing")
	tags := fs.String("tags", "", "comma-separated build tags to load the packages with")
	verbose := fs.Bool("v", false, "name every file written or removed")
	version := fs.Bool("version", false, "print the versions of zlinkgen and of the SDK it was built with, and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: zlinkgen [-check] [-tags list] [-v] [packages]\n       zlinkgen -version\n       %s\n\n", initUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprint(stdout, versionText(bi))
		return 0
	}
	cfg := gen.Config{}
	if *tags != "" {
		cfg.BuildFlags = []string{"-tags=" + *tags}
	}
	results, err := gen.Generate(ctx, cfg, fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	wd, _ := os.Getwd()
	if *check {
		stale, err := gen.Check(results)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		for _, p := range stale {
			fmt.Fprintf(stderr, "zlinkgen: %s is stale or missing; run go generate (make gen)\n", rel(wd, p))
		}
		if len(stale) > 0 {
			return 1
		}
		return 0
	}
	changed, err := gen.Write(results)
	if *verbose {
		for _, p := range changed {
			fmt.Fprintln(stdout, rel(wd, p))
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// runInit is "zlinkgen init [-template app|match] [-sdk DIR|none] <dir> [module path]".
func runInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("zlinkgen init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sdkFlag := fs.String("sdk", "", "where the application's "+templates.SDKPath+" comes from: a checkout's directory\n"+
		"(go.mod replaces the module with it), or none (go.mod gets neither require nor replace).\n"+
		"Default: a released zlinkgen's own version, or the checkout a zlinkgen built from source comes from")
	tmpl := fs.String("template", "app", "the application to scaffold: "+strings.Join(templates.Templates, " or ")+
		"\n(app: a Lobby, a Player and a Room; match: matchmaking with every object kind and both channel kinds)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n\n", initUsage)
		fs.PrintDefaults()
	}
	// Flags may come before or after the arguments: parse, take one argument, parse the rest.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return 2
	}
	dir, module := pos[0], ""
	if len(pos) == 2 {
		module = pos[1]
	}
	bi, _ := debug.ReadBuildInfo()
	sdk, err := sdkFor(*sdkFlag, bi, sdkStarts())
	if err != nil {
		fmt.Fprintf(stderr, "zlinkgen init: %v\n", err)
		return 1
	}
	files, err := templates.InitTemplate(dir, module, sdk, *tmpl)
	if err != nil {
		fmt.Fprintf(stderr, "zlinkgen init: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, filepath.Join(dir, f))
	}
	fmt.Fprintf(stdout, "\n%s\nnext: cd %s && go mod tidy && make run\n", sdkNote(sdk), dir)
	return 0
}

const initUsage = "zlinkgen init [-template app|match] [-sdk DIR|none] <dir> [module path]"

func rel(wd, path string) string {
	if r, err := filepath.Rel(wd, path); err == nil && !filepath.IsAbs(r) && len(r) < len(path) {
		return r
	}
	return path
}
