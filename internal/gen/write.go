package gen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write puts results on disk: a file is rewritten only when its bytes change, and a result
// marked Remove is deleted. It writes nothing at all when any result has errors. It returns
// the paths it changed, in the order of results.
func Write(results []Result) (changed []string, err error) {
	for _, r := range results {
		if len(r.Errors) > 0 {
			return nil, fmt.Errorf("zlinkgen: %s has errors; nothing written", r.Source)
		}
		if !r.Remove && r.Content == nil {
			return nil, fmt.Errorf("zlinkgen: %s has no content; nothing written", r.Path)
		}
	}
	for _, r := range results {
		stale, err := isStale(r)
		if err != nil {
			return changed, err
		}
		if !stale {
			continue
		}
		if r.Remove {
			if err := os.Remove(r.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return changed, fmt.Errorf("zlinkgen: %w", err)
			}
		} else if err := writeFile(r.Path, r.Content); err != nil {
			return changed, err
		}
		changed = append(changed, r.Path)
	}
	return changed, nil
}

// Check compares results with the disk and returns the paths that are stale: missing,
// different, or present although they must be removed. It writes nothing.
func Check(results []Result) (stale []string, err error) {
	for _, r := range results {
		if len(r.Errors) > 0 {
			return nil, fmt.Errorf("zlinkgen: %s has errors", r.Source)
		}
		s, err := isStale(r)
		if err != nil {
			return nil, err
		}
		if s {
			stale = append(stale, r.Path)
		}
	}
	return stale, nil
}

// isStale reports whether the disk differs from what r says.
func isStale(r Result) (bool, error) {
	have, err := os.ReadFile(r.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return !r.Remove, nil
	case err != nil:
		return false, fmt.Errorf("zlinkgen: %w", err)
	case r.Remove:
		return true, nil
	}
	return !bytes.Equal(have, r.Content), nil
}

// writeFile replaces path with content through a temporary file in the same directory, so a
// reader never sees half a file.
func writeFile(path string, content []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("zlinkgen: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return fmt.Errorf("zlinkgen: write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("zlinkgen: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("zlinkgen: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("zlinkgen: %w", err)
	}
	return nil
}
