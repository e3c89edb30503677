// Package near defines an interface from one of another package, imported under another name.
package near

import f "github.com/zlink-go/zlink/gen_test/testdata/defined_far/far"

// Relay is defined from far.Hop.
type Relay f.Hop
