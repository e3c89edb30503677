package sdk

import (
	"fmt"
	"strings"
)

// SpotKind is the closed set of object kinds. The numeric values are part of the contract:
// Invalid = 0, Entry = 1, User = 2, Instance = 3 are the Spot kinds, and Actor = 4 marks an
// Actor, an object that lives inside a Spot.
type SpotKind uint8

const (
	// KindInvalid is the zero value; no object has it.
	KindInvalid SpotKind = 0
	// KindEntry is made when the Object Server starts, exactly one per node, and never moves.
	KindEntry SpotKind = 1
	// KindUser is made only by an explicit create call and can be relocated.
	KindUser SpotKind = 2
	// KindInstance is made by the first call that states create-intent, can be relocated and is
	// evicted when idle.
	KindInstance SpotKind = 3
	// KindActor is an Actor, not a Spot: an addressable object that is a member of exactly one
	// Spot at a time and runs on that Spot's serial queue. A Spot's handler spawns it into that
	// Spot; no call creates one by stating create-intent. It moves with its Spot, or on its own
	// into another Spot, and is never idle-evicted on its own.
	KindActor SpotKind = 4
)

var spotKindNames = [...]string{"Invalid", "Entry", "User", "Instance", "Actor"}

// String returns the kind's name as the digest spells it.
func (k SpotKind) String() string {
	if int(k) < len(spotKindNames) {
		return spotKindNames[k]
	}
	return fmt.Sprintf("SpotKind(%d)", uint8(k))
}

// Valid reports whether k is one of Entry, User, Instance or Actor: the kind of some object.
func (k SpotKind) Valid() bool { return k >= KindEntry && k <= KindActor }

// IsSpot reports whether k is one of the Spot kinds Entry, User or Instance. An Actor is not a
// Spot.
func (k SpotKind) IsSpot() bool { return k >= KindEntry && k <= KindInstance }

// ParseSpotKind parses a Spot kind name, case-insensitively ("entry", "User", ...). Invalid,
// Actor, which is not a Spot kind, and any unknown name are refused.
func ParseSpotKind(s string) (SpotKind, error) {
	for k := KindEntry; k <= KindInstance; k++ {
		if strings.EqualFold(s, spotKindNames[k]) {
			return k, nil
		}
	}
	return KindInvalid, fmt.Errorf("zlink: unknown spot kind %q (want entry, user or instance)", s)
}
