package catalog

import "sync"

// group owns the catalog's goroutines: each is started through it and Close waits for them.
// Once sealed it starts no more, so that a close requested while the catalog stops cannot
// start a goroutine nobody waits for.
type group struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	sealed bool
}

// goRun runs fn on a goroutine of the group's; it reports false, running nothing, once the
// group is sealed.
func (g *group) goRun(fn func()) bool {
	g.mu.Lock()
	if g.sealed {
		g.mu.Unlock()
		return false
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

// seal makes goRun refuse from now on; the goroutines already started go on.
func (g *group) seal() {
	g.mu.Lock()
	g.sealed = true
	g.mu.Unlock()
}
