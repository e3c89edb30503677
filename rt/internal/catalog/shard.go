package catalog

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// spotKey is a Spot's identity inside one node: type name and ID.
type spotKey struct {
	typ, id string
}

const shardCount = 64

var shardSeed = maphash.MakeSeed()

// shards is a map of Spot keys split over independently locked shards, so that lookups of
// different Spots do not contend.
type shards[V any] struct {
	s [shardCount]shard[V]
}

type shard[V any] struct {
	mu sync.RWMutex
	m  map[spotKey]V
	// version counts the write-locked sections (lock), so that what was read under a read
	// lock can be known still true later without taking it (spotCache).
	version atomic.Uint64
	// A read lock writes the lock's reader count, and two shards on one cache line would
	// contend between processors as one. A stride of two lines keeps a shard's lock and map
	// off every line its neighbours' own fields use, however the table is aligned.
	_ [128 - 40]byte
}

// keyHash is the hash of k that places it: its shard, and its entry of the Spot cache.
func keyHash(k spotKey) uint64 { return maphash.String(shardSeed, k.id) }

func (s *shards[V]) of(k spotKey) *shard[V] { return s.at(keyHash(k)) }

// at is the shard of the key whose hash is h.
func (s *shards[V]) at(h uint64) *shard[V] { return &s.s[h%shardCount] }

// lock write-locks the shard. Every change of its map or of what its values hold is made under
// it, and a read under the read lock that was made before it is stale after it.
func (sh *shard[V]) lock() {
	sh.mu.Lock()
	sh.version.Add(1)
}

func (s *shards[V]) get(k spotKey) (V, bool) {
	sh := s.of(k)
	sh.mu.RLock()
	v, ok := sh.m[k]
	sh.mu.RUnlock()
	return v, ok
}

// put stores v under k with the shard locked.
func (sh *shard[V]) put(k spotKey, v V) {
	if sh.m == nil {
		sh.m = make(map[spotKey]V)
	}
	sh.m[k] = v
}

// eachLocked calls fn for every value with its shard read-locked, so that fn may read what the
// shard's lock guards (a slot's fields). fn must be quick and must not lock a shard.
func (s *shards[V]) eachLocked(fn func(V)) {
	for i := range s.s {
		sh := &s.s[i]
		sh.mu.RLock()
		for _, v := range sh.m {
			fn(v)
		}
		sh.mu.RUnlock()
	}
}
