package sdk

import (
	"fmt"
	"strings"
)

// SpotKind is the closed set of Spot kinds. The numeric values are part of the
// contract: Invalid = 0, Entry = 1, User = 2, Instance = 3.
type SpotKind uint8

const (
	// KindInvalid is the zero value; no Spot has it.
	KindInvalid SpotKind = 0
	// KindEntry is made when the Object Server starts, exactly one per node, and never moves.
	KindEntry SpotKind = 1
	// KindUser is made only by an explicit create call and can be relocated.
	KindUser SpotKind = 2
	// KindInstance is made by the first call that states create-intent, can be relocated and is
	// evicted when idle.
	KindInstance SpotKind = 3
)

var spotKindNames = [...]string{"Invalid", "Entry", "User", "Instance"}

// String returns the kind's name as the digest spells it.
func (k SpotKind) String() string {
	if int(k) < len(spotKindNames) {
		return spotKindNames[k]
	}
	return fmt.Sprintf("SpotKind(%d)", uint8(k))
}

// Valid reports whether k is one of Entry, User or Instance.
func (k SpotKind) Valid() bool { return k >= KindEntry && k <= KindInstance }

// ParseSpotKind parses a kind name, case-insensitively ("entry", "User", ...). Invalid and any
// unknown name are refused.
func ParseSpotKind(s string) (SpotKind, error) {
	for k := KindEntry; k <= KindInstance; k++ {
		if strings.EqualFold(s, spotKindNames[k]) {
			return k, nil
		}
	}
	return KindInvalid, fmt.Errorf("zlink: unknown spot kind %q (want entry, user or instance)", s)
}
