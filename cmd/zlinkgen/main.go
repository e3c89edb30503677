// Command zlinkgen generates typed ZLink references, create and create-intent calls,
// registration functions and dispatch tables from Go interfaces annotated with //zlink:
// directives. Run it with go generate inside a package:
//
//	//go:generate go run github.com/zlink-go/zlink/cmd/zlinkgen
//
// or on package patterns:
//
//	zlinkgen [-check] [-tags list] [packages]
//	zlinkgen init <dir> [module path]
//
// With no packages it works on the package in the current directory. For each input file
// room.go that declares annotated interfaces it writes room_zlink.go beside it, only when the
// bytes change. -check writes nothing and fails, naming them, when generated files are stale
// or missing. init scaffolds a runnable application into an empty directory. The work is done
// by internal/gen; see its documentation for the directives and method shapes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

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
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: zlinkgen [-check] [-tags list] [-v] [packages]\n       zlinkgen init <dir> [module path]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, "zlinkgen", gen.Version)
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

// runInit is "zlinkgen init <dir> [module path]".
func runInit(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintln(stderr, "usage: zlinkgen init <dir> [module path]")
		return 2
	}
	dir, module := args[0], ""
	if len(args) == 2 {
		module = args[1]
	}
	files, err := templates.Init(dir, module)
	if err != nil {
		fmt.Fprintf(stderr, "zlinkgen init: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, filepath.Join(dir, f))
	}
	fmt.Fprintf(stdout, "\nnext: cd %s && go mod tidy && go generate ./... && go run .\n", dir)
	return 0
}

func rel(wd, path string) string {
	if r, err := filepath.Rel(wd, path); err == nil && !filepath.IsAbs(r) && len(r) < len(path) {
		return r
	}
	return path
}
