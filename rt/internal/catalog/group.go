package catalog

import (
	"sync"

	"github.com/zlink-go/zlink/rt/internal/gopool"
)

// group owns the catalog's goroutines: each is started through it and Close waits for them.
// Once sealed it starts no more, so that a close requested while the catalog stops cannot
// start a goroutine nobody waits for; only Close itself starts some after that (goSealed).
// They run on a pool's workers: a creation or a close calls through the etcd client, which
// would grow a new goroutine's stack by copying, two or three times each.
type group struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	sealed bool
	pool   *gopool.Pool // set by New
}

// goRun runs fn on a goroutine of the group's; it reports false, running nothing, once the
// group is sealed.
func (g *group) goRun(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sealed {
		return false
	}
	// Added under the lock seal takes.
	g.start(fn)
	return true
}

// goRunAlso is goRun of fn, which also counts in also until it returns.
func (g *group) goRunAlso(also *sync.WaitGroup, fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sealed {
		return false
	}
	also.Add(1)
	g.start(func() {
		defer also.Done()
		fn()
	})
	return true
}

// start runs fn on a worker of the pool, counted in wg until it returns.
func (g *group) start(fn func()) {
	g.wg.Add(1)
	g.pool.Go(func() {
		defer g.wg.Done()
		fn()
	})
}

// seal makes goRun refuse from now on; the goroutines already started go on.
func (g *group) seal() {
	g.mu.Lock()
	g.sealed = true
	g.mu.Unlock()
}

// goSealed runs fn on a goroutine of the group's even though it is sealed. Only Close calls
// it, once the creations have ended and before it waits for the group, so that fn is waited
// for as the others are.
func (g *group) goSealed(fn func()) bool {
	g.start(fn)
	return true
}

// end ends the pool's workers once the group's goroutines have ended (ended), or, when some
// are still running, lets each of their workers end with it.
func (g *group) end(ended bool) {
	if ended {
		g.pool.Close()
	} else {
		g.pool.Stop()
	}
}

// builders own the goroutines that run factories and OnActivate callbacks, which the
// creations and spawns waiting for them abandon after OperationTimeout. Once Close waits for
// them (close), none starts any more: a spawn from a handler that a forced stop left running
// fails rather than start one that nobody waits for.
type builders struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	closed bool
}

// goRun runs fn on a goroutine of its own, counted until it returns; it reports false,
// running nothing, once the builders are closed.
func (b *builders) goRun(fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Go(fn)
	return true
}

// close makes goRun refuse from now on, and returns what to wait on for the goroutines
// already started.
func (b *builders) close() *sync.WaitGroup {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return &b.wg
}
