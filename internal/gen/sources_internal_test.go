package gen

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// An unnamed import is first looked for among the imports whose path ends in the qualifier,
// a major version suffix left out, so that a chain's step lists one package, not every import
// of its file.
func TestAnImportPathsLastElementIsItsPackagesUsualName(t *testing.T) {
	for path, want := range map[string]string{
		"io":                       "io",
		"example.com/m/far":        "far",
		"example.com/m/v2":         "m",
		"gopkg.in/yaml.v3":         "yaml",
		"example.com/m/far/v10":    "far",
		"example.com/m/version/v2": "version",
	} {
		assert.Equal(t, want, lastElement(path), path)
	}
}
