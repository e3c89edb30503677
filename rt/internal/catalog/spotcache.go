package catalog

import "sync/atomic"

// spotCacheSize is the number of entries of the Spot cache: 64 KiB of pointers per node.
const spotCacheSize = 1 << 13

// spotCache is a direct-mapped cache in front of the Spot index, so that a message to an
// active Spot finds it without taking its shard's read lock, whose reader count every
// processor writes, or hashing its key a second time for the shard's map. An entry is the
// Spot itself: it was its key's Spot in the index at the shard version it records
// (owned.cachedAt), and stays so for as long as its shard's version is that one, since every
// change of the index bumps it (shard.lock). A lookup that finds no valid entry reads the
// index as before, and fills the entry if it is free or holds a Spot that has ended: two
// active Spots whose keys share an entry do not take it from each other on every message.
type spotCache struct {
	entries [spotCacheSize]atomic.Pointer[owned]
}

func (sc *spotCache) entry(h uint64) *atomic.Pointer[owned] {
	return &sc.entries[(h/shardCount)%spotCacheSize] // the shard took the low bits
}

// get returns the Spot of key, whose hash is h and whose shard is sh, if its entry holds it
// and nothing in the shard changed since it was filled.
func (sc *spotCache) get(h uint64, key spotKey, sh *shard[*slot]) ownedSpot {
	o := sc.entry(h).Load()
	if o == nil || o.id != key.id || o.typ.desc.Name != key.typ || o.cachedAt.Load() != sh.version.Load() {
		return nil
	}
	return o.self
}

// fill makes sp, its key's Spot in the index, the entry of the key whose hash is h. sh's read
// lock is held, so that its version is the one under which sp was read.
func (sc *spotCache) fill(h uint64, sp ownedSpot, sh *shard[*slot]) {
	o := sp.own()
	e := sc.entry(h)
	if cur := e.Load(); cur != nil && cur != o && cur.current() != stateClosed {
		return
	}
	o.cachedAt.Store(sh.version.Load())
	e.Store(o)
}

// forget empties sp's entry if it holds sp, which is leaving the index: its shard is
// write-locked. The version already makes the entry stale; this lets the Spot's memory go.
func (sc *spotCache) forget(h uint64, sp ownedSpot) {
	sc.entry(h).CompareAndSwap(sp.own(), nil)
}
