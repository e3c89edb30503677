package gen

import (
	"cmp"
	"fmt"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
)

// Error is one problem with the input, at a position.
type Error struct {
	// Pos is where the problem is. Generate makes Filename relative to Config.Dir when the
	// file is under it.
	Pos token.Position
	// Where names the Spot interface and method concerned ("Room.Join", "Room"), or is empty.
	Where string
	// Msg says what is wrong.
	Msg string
}

// Error renders the problem as "file:line:col: zlinkgen: Where: Msg".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.IsValid() || e.Pos.Filename != "" {
		b.WriteString(e.Pos.String())
		b.WriteString(": ")
	}
	b.WriteString("zlinkgen: ")
	if e.Where != "" {
		b.WriteString(e.Where)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem of one run, sorted by position. It is the error Generate returns
// when the input has problems.
type ErrorList []*Error

// Error renders one problem per line.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so that errors.As finds each *Error.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// errorCollector gathers the problems of a run; nothing stops at the first one.
type errorCollector struct {
	errs []*Error
}

// add records a problem at pos concerning where.
func (c *errorCollector) add(pos token.Position, where, format string, args ...any) {
	c.errs = append(c.errs, &Error{Pos: pos, Where: where, Msg: fmt.Sprintf(format, args...)})
}

// finish makes the file names of errs relative to dir where they are under it, and returns
// them sorted by file, line, column and text, exact duplicates removed (a package matched by
// two patterns reports its compile errors once).
func finish(errs []*Error, dir string) ErrorList {
	l := ErrorList(slices.Clone(errs))
	relativize(l, dir)
	slices.SortStableFunc(l, compareErrors)
	return slices.CompactFunc(l, func(a, b *Error) bool { return compareErrors(a, b) == 0 })
}

func compareErrors(a, b *Error) int {
	return cmp.Or(
		cmp.Compare(a.Pos.Filename, b.Pos.Filename),
		cmp.Compare(a.Pos.Line, b.Pos.Line),
		cmp.Compare(a.Pos.Column, b.Pos.Column),
		cmp.Compare(a.Where, b.Where),
		cmp.Compare(a.Msg, b.Msg),
	)
}

// relativize makes the file names of l relative to dir where they are under it.
func relativize(l ErrorList, dir string) {
	if dir == "" {
		return
	}
	for _, e := range l {
		e.Pos.Filename = relPath(dir, e.Pos.Filename)
	}
}

// relPath returns path relative to dir when it is under dir, else path unchanged.
func relPath(dir, path string) string {
	if path == "" || !filepath.IsAbs(path) {
		return path
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}
