package catalog

import "sync"

// group owns the catalog's goroutines: each is started through it and Close waits for them.
// Once sealed it starts no more, so that a close requested while the catalog stops cannot
// start a goroutine nobody waits for; only Close itself starts some after that (goSealed).
type group struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	sealed bool
}

// goRun runs fn on a goroutine of the group's; it reports false, running nothing, once the
// group is sealed.
func (g *group) goRun(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sealed {
		return false
	}
	// Go adds to the group before it returns, so the add stays under the lock seal takes.
	g.wg.Go(fn)
	return true
}

// seal makes goRun refuse from now on; the goroutines already started go on.
func (g *group) seal() {
	g.mu.Lock()
	g.sealed = true
	g.mu.Unlock()
}

// goSealed runs fn on a goroutine of the group's even though it is sealed. Only Close calls
// it, once its wait for every goroutine of the group has returned and before it waits for the
// group again, so that fn is waited for as the others were.
func (g *group) goSealed(fn func()) bool {
	g.wg.Go(fn)
	return true
}
