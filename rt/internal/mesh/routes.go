package mesh

import (
	"sync"

	"github.com/zlink-go/zlink/sdk"
)

type routeKey struct{ typ, id string }

// routeCache is the positive route cache: only Ready routes enter it (B6). An entry goes when
// its owner refuses a message (C3), its connection fails, its owner's lease ends, or a
// message's hops end at their bound.
type routeCache struct {
	mu  sync.RWMutex
	max int
	m   map[routeKey]sdk.NodeID
}

func (c *routeCache) init(max int) {
	c.max = max
	c.m = make(map[routeKey]sdk.NodeID)
}

func (c *routeCache) get(t sdk.Target) (sdk.NodeID, bool) {
	c.mu.RLock()
	owner, ok := c.m[routeKey{t.Type(), t.ID()}]
	c.mu.RUnlock()
	return owner, ok
}

// put records that owner holds t Ready. A full cache forgets an arbitrary entry. Every reply
// from a Spot's owner confirms its route, so a route already recorded is only read: callers of
// one Spot do not queue for the write lock.
func (c *routeCache) put(t sdk.Target, owner sdk.NodeID) {
	k := routeKey{t.Type(), t.ID()}
	c.mu.RLock()
	cur, ok := c.m[k]
	c.mu.RUnlock()
	if ok && cur == owner {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for victim := range c.m {
			delete(c.m, victim)
			break
		}
	}
	c.m[k] = owner
}

// drop forgets t's route if it still names owner.
func (c *routeCache) drop(t sdk.Target, owner sdk.NodeID) {
	k := routeKey{t.Type(), t.ID()}
	c.mu.Lock()
	if c.m[k] == owner {
		delete(c.m, k)
	}
	c.mu.Unlock()
}

// dropOwner forgets every route to owner.
func (c *routeCache) dropOwner(owner sdk.NodeID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, o := range c.m {
		if o == owner {
			delete(c.m, k)
		}
	}
}

func (c *routeCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
