package transport

// callTable holds the calls in flight on one stream by call ID. A link numbers its calls 1, 2,
// 3, ..., so a call's slot is its ID modulo the table's size: no hashing, and a call's entry
// and its removal touch one slot, where a map churned with an insert and a delete per call. A
// peer chooses the IDs it sends, though, and any pattern must work in bounded memory: the
// slots grow with the calls in flight, not with the IDs, and an ID whose slot another call
// holds goes into a map beside them.
//
// The zero value is an empty table. It is not safe for concurrent use.
type callTable[V any] struct {
	slots []callSlot[V] // a power of two in length, or nil
	n     int           // entries, in slots and in extra
	extra map[uint64]V  // entries whose slot was held by another
	// high is the most entries the table has held since it was last made anew.
	high int
}

type callSlot[V any] struct {
	id   uint64
	v    V
	used bool
}

const (
	// minCallSlots is the size of a table's first slots: room for the calls of a few dozen
	// callers at once without growing.
	minCallSlots = 64
	// maxCallSlots bounds the slots; beyond, a call whose slot is held goes to the map.
	maxCallSlots = 1 << 14
	// shrinkAfter is the most entries past which a table is made anew when it empties, so
	// that it does not keep the memory of a burst.
	shrinkAfter = 1024
)

// len is the number of entries.
func (t *callTable[V]) len() int { return t.n }

// put enters v under id, and reports false, changing nothing, when id is already in.
func (t *callTable[V]) put(id uint64, v V) bool {
	if _, ok := t.get(id); ok {
		return false
	}
	if t.slots == nil {
		t.slots = make([]callSlot[V], minCallSlots)
	}
	if 2*(t.n+1) > len(t.slots) && len(t.slots) < maxCallSlots {
		t.grow()
	}
	if s := &t.slots[id&uint64(len(t.slots)-1)]; !s.used {
		*s = callSlot[V]{id: id, v: v, used: true}
	} else {
		// A call that outlived as many later ones as there are slots, or an ID a peer chose,
		// holds the slot.
		if t.extra == nil {
			t.extra = make(map[uint64]V)
		}
		t.extra[id] = v
	}
	t.n++
	t.high = max(t.high, t.n)
	return true
}

// grow doubles the slots and enters every entry of the old slots again. Two entries never
// meet in the new slots: an ID's old slot is its new one's low bits.
func (t *callTable[V]) grow() {
	old := t.slots
	t.slots = make([]callSlot[V], 2*len(old))
	for _, s := range old {
		if s.used {
			t.slots[s.id&uint64(len(t.slots)-1)] = s
		}
	}
}

// at returns the slot that holds id, or nil.
func (t *callTable[V]) at(id uint64) *callSlot[V] {
	if t.slots == nil {
		return nil
	}
	if s := &t.slots[id&uint64(len(t.slots)-1)]; s.used && s.id == id {
		return s
	}
	return nil
}

// get returns the entry under id. Every new call's ID is looked up (put): the map is read only
// when it holds calls.
func (t *callTable[V]) get(id uint64) (v V, ok bool) {
	if s := t.at(id); s != nil {
		return s.v, true
	}
	if len(t.extra) > 0 {
		v, ok = t.extra[id]
	}
	return v, ok
}

// remove deletes the entry under id and returns it. A table that empties after it grew large
// is made anew, so that a burst long ago does not keep its memory.
func (t *callTable[V]) remove(id uint64) (v V, ok bool) {
	if s := t.at(id); s != nil {
		v, *s = s.v, callSlot[V]{}
	} else if v, ok = t.extra[id]; ok {
		delete(t.extra, id)
	} else {
		return v, false
	}
	t.n--
	if t.n == 0 && t.high > shrinkAfter {
		*t = callTable[V]{}
	}
	return v, true
}

// each calls f with every entry, in no particular order.
func (t *callTable[V]) each(f func(id uint64, v V)) {
	for _, s := range t.slots {
		if s.used {
			f(s.id, s.v)
		}
	}
	for id, v := range t.extra {
		f(id, v)
	}
}
