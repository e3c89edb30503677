// Package templates holds the application that `zlinkgen init` scaffolds, embedded in the
// binary. The files under app/ carry a .tmpl suffix so that the Go tool does not build them as
// part of this module; Init writes them without it. Go and text files are text/template
// templates of Data; the generated protobuf code (*.pb.go.tmpl) is copied as it is. The
// rendered go.mod is then edited with golang.org/x/mod/modfile to say where the SDK comes from
// (see SDK).
package templates

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

//go:embed all:app all:match
var app embed.FS

// Templates are the applications Init scaffolds: "app" (the default: a Lobby, a Player and a
// Room) and "match" (matchmaking: every object kind, both channel kinds, and a relocation).
var Templates = []string{"app", "match"}

// ErrNotEmpty is returned by Init for a directory that already holds files.
var ErrNotEmpty = errors.New("directory is not empty")

// SDKPath is the module path of the ZLink SDK, which every scaffolded application uses.
const SDKPath = "github.com/zlink-go/zlink"

// DevVersion is the version a scaffolded application requires when a replace points the SDK at
// a checkout: the zero pseudo-version, which is what go mod tidy itself writes for a module
// replaced by a directory (the version is never fetched, but go.mod needs a valid one).
const DevVersion = "v0.0.0-00010101000000-000000000000"

// SDK says where a scaffolded application's github.com/zlink-go/zlink comes from. The zero
// SDK writes neither a require nor a replace, leaving that to the user.
type SDK struct {
	// Version is the version go.mod requires; "" writes no require.
	Version string
	// Dir, when not empty, is the absolute path of a checkout of the SDK: go.mod replaces the
	// module with it. A Dir needs a Version (DevVersion when there is no better one).
	Dir string
}

// check refuses an SDK that would make an invalid or unusable go.mod.
func (s SDK) check() error {
	if s.Version != "" {
		if err := module.Check(SDKPath, s.Version); err != nil {
			return fmt.Errorf("SDK version: %w", err)
		}
		if c := module.CanonicalVersion(s.Version); c != s.Version {
			return fmt.Errorf("SDK version %q is not canonical (%q)", s.Version, c)
		}
	}
	if s.Dir != "" {
		if !filepath.IsAbs(s.Dir) {
			// A relative replace is resolved from the application's directory, not from where
			// zlinkgen ran: refuse it rather than write one that points elsewhere.
			return fmt.Errorf("SDK directory %q is not an absolute path", s.Dir)
		}
		if s.Version == "" {
			return errors.New("an SDK directory needs a version to require")
		}
	}
	return nil
}

// Data is what the templates see.
type Data struct {
	// Module is the module path of the new application.
	Module string
	// Name is the last element of Module: the command's name.
	Name string
}

// Init writes the default application into dir, as InitTemplate does with "app".
func Init(dir, module string, sdk SDK) ([]string, error) {
	return InitTemplate(dir, module, sdk, "app")
}

// InitTemplate writes the application of template tmpl (one of Templates) into dir, which must
// be missing or empty, with the module path module (default: the directory's name) and a go.mod
// that gets the SDK as sdk says. It returns the files written, relative to dir, in lexical
// order. It writes nothing when tmpl is unknown, dir is not empty, module is invalid or sdk is.
func InitTemplate(dir, module string, sdk SDK, tmpl string) ([]string, error) {
	if !slices.Contains(Templates, tmpl) {
		return nil, fmt.Errorf("unknown template %q; the templates are %s", tmpl, strings.Join(Templates, ", "))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if module == "" {
		module = filepath.Base(abs)
	}
	if err := checkModulePath(module); err != nil {
		return nil, err
	}
	if err := sdk.check(); err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(abs); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s: %w; init writes into a new or empty directory", dir, ErrNotEmpty)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	data := Data{Module: module, Name: path.Base(module)}
	files, err := render(tmpl, data)
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		if f.name == "go.mod" {
			if files[i].content, err = editGoMod(f.content, sdk); err != nil {
				return nil, err
			}
		}
	}
	if sum, err := checkoutSum(sdk); err != nil {
		return nil, err
	} else if sum != nil {
		files = append(files, file{"go.sum", sum})
	}
	var written []string
	for _, f := range files {
		dst := filepath.Join(abs, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return written, err
		}
		if err := os.WriteFile(dst, f.content, 0o644); err != nil {
			return written, err
		}
		written = append(written, filepath.FromSlash(f.name))
	}
	slices.Sort(written)
	return written, nil
}

// checkModulePath refuses a module path that go.mod would refuse.
func checkModulePath(p string) error {
	if err := module.CheckImportPath(p); err != nil {
		return fmt.Errorf("invalid module path %q: %w", p, err)
	}
	return nil
}

// checkoutSum is the go.sum of the SDK's checkout, or nil when there is no checkout or it has
// no go.sum. The application starts from it because its module graph is the checkout's plus
// its own: go mod tidy then finds the checkout's dependencies already verified, in the module
// cache when they are there, instead of asking the checksum database (and keeps only the lines
// the application needs).
func checkoutSum(sdk SDK) ([]byte, error) {
	if sdk.Dir == "" {
		return nil, nil
	}
	sum, err := os.ReadFile(filepath.Join(sdk.Dir, "go.sum"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("SDK checkout: %w", err)
	}
	return sum, nil
}

// editGoMod adds the SDK's require and replace to the rendered go.mod.
func editGoMod(src []byte, sdk SDK) ([]byte, error) {
	f, err := modfile.Parse("go.mod", src, nil)
	if err != nil {
		return nil, fmt.Errorf("template go.mod: %w", err)
	}
	if sdk.Version != "" {
		if err := f.AddRequire(SDKPath, sdk.Version); err != nil {
			return nil, err
		}
	}
	if sdk.Dir != "" {
		if err := f.AddReplace(SDKPath, "", sdk.Dir, ""); err != nil {
			return nil, err
		}
	}
	f.Cleanup()
	return f.Format()
}

type file struct {
	name    string // slash-separated, relative to the application's root
	content []byte
}

// render renders every template of root/ in lexical order (fs.WalkDir's order).
func render(root string, data Data) ([]file, error) {
	var files []file
	err := fs.WalkDir(app, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, err := app.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")
		if path.Base(name) == "gitignore" {
			name = path.Join(path.Dir(name), ".gitignore")
		}
		if strings.HasSuffix(name, ".pb.go") {
			files = append(files, file{name, src})
			return nil
		}
		t, err := template.New(p).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return fmt.Errorf("template %s: %w", p, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return fmt.Errorf("template %s: %w", p, err)
		}
		files = append(files, file{name, buf.Bytes()})
		return nil
	})
	return files, err
}
