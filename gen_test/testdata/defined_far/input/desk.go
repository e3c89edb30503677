// Package desk is the defined case whose chain crosses packages that it does not import: the
// declarations are read from their source, the same on a first run as on the next.
package desk

import "github.com/zlink-go/zlink/gen_test/testdata/defined_far/near"

// Desk is defined from near.Relay, which leads to an interface two packages away.
//
//zlink:spot instance
type Desk near.Relay
