package sdk

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIDBytes is the longest node ID, Spot type name or Spot ID accepted, in bytes.
const MaxIDBytes = 1024

// NodeID is a node's transport identity, the RID of the digest glossary. It must be unique
// among the live nodes of a mesh; the same ID may be reused by a restarted node once the old
// node's owner lease has ended.
type NodeID string

// Validate reports whether the node ID is acceptable: under the rules of ValidateID, and made
// of printable ASCII without spaces (bytes '!' to '~'), since every stream between two nodes
// names its sender in a gRPC header, which carries nothing else.
func (n NodeID) Validate() error {
	if err := ValidateID("node ID", string(n)); err != nil {
		return err
	}
	for i, r := range string(n) {
		if r < '!' || r > '~' {
			return fmt.Errorf("%w: node ID %s has %q at offset %d: a node ID is printable ASCII without spaces",
				ErrInvalidID, quotePrefix(string(n)), r, i)
		}
	}
	return nil
}

// String returns the ID as it is.
func (n NodeID) String() string { return string(n) }

// ValidateSpotID reports whether id can name a Spot: see ValidateID.
func ValidateSpotID(id string) error { return ValidateID("spot ID", id) }

// ValidateTypeName reports whether name can be a Spot type's stable name: see ValidateID.
func ValidateTypeName(name string) error { return ValidateID("spot type name", name) }

// ValidateID checks an identifier of the given kind ("spot ID", "node ID", ...). An identifier
// is refused with [ErrInvalidID], wrapped in a message that names the problem, when it is empty,
// longer than MaxIDBytes, not valid UTF-8, or contains NUL. Every other byte sequence, including
// '/', '%', spaces and non-ASCII text, is accepted and addresses the object unchanged (a node ID
// is narrower: see NodeID.Validate).
func ValidateID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidID, what)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrInvalidID, what, len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: %s %s is not valid UTF-8", ErrInvalidID, what, quotePrefix(id))
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%w: %s %s contains a NUL byte at offset %d", ErrInvalidID, what, quotePrefix(id), strings.IndexByte(id, 0))
	}
	return nil
}

// quotePrefix quotes at most the first 64 bytes of s, so that an error about a long ID stays
// readable.
func quotePrefix(s string) string {
	const max = 64
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:max])
}
