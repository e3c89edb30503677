// Package far declares interfaces defined from another package's, which the defined case
// defines its own from in turn: their declarations are read from source, not loaded.
package far

import b "github.com/zlink-go/zlink/gen_test/testdata/embedded/base"

// Relay is defined from base.Pinger, imported under another name.
type Relay b.Pinger

// Hop is defined from Relay.
type Hop Relay
