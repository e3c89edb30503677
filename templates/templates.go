// Package templates holds the application that `zlinkgen init` scaffolds, embedded in the
// binary. The files under app/ carry a .tmpl suffix so that the Go tool does not build them as
// part of this module; Init writes them without it. Go and text files are text/template
// templates of Data; the generated protobuf code (*.pb.go.tmpl) is copied as it is.
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

	"golang.org/x/mod/module"
)

//go:embed all:app
var app embed.FS

// ErrNotEmpty is returned by Init for a directory that already holds files.
var ErrNotEmpty = errors.New("directory is not empty")

// Data is what the templates see.
type Data struct {
	// Module is the module path of the new application.
	Module string
	// Name is the last element of Module: the command's name.
	Name string
}

// Init writes the application into dir, which must be missing or empty, with the module path
// module (default: the directory's name). It returns the files written, relative to dir,
// in lexical order. It writes nothing when dir is not empty or module is invalid.
func Init(dir, module string) ([]string, error) {
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
	if entries, err := os.ReadDir(abs); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s: %w; init writes into a new or empty directory", dir, ErrNotEmpty)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	data := Data{Module: module, Name: path.Base(module)}
	files, err := render(data)
	if err != nil {
		return nil, err
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

type file struct {
	name    string // slash-separated, relative to the application's root
	content []byte
}

// render renders every template of app/ in lexical order (fs.WalkDir's order).
func render(data Data) ([]file, error) {
	var files []file
	err := fs.WalkDir(app, "app", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, err := app.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(p, "app/"), ".tmpl")
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
