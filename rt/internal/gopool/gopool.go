// Package gopool runs short tasks on goroutines that outlive them.
//
// A new goroutine starts with a small stack and grows it by copying each time a call needs
// more. A task that calls deep, as a Spot's creation does through the etcd client and gRPC,
// grows a fresh goroutine's stack two or three times; run on a goroutine that ran such a task
// before, it finds the stack grown. A worker that finds no task for a while ends, and only a
// bounded number wait at once, so that a burst of tasks leaves no crowd of idle stacks behind.
//
// Tasks run without profiler labels (runtime/pprof), rather than with those of the goroutine
// that gave them: a worker would otherwise carry the labels of the goroutine that started it,
// or those a task set, into every later task, whoever gave it.
package gopool

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of New.
const (
	DefaultMaxIdle  = 64
	DefaultIdleTime = 5 * time.Second
)

// Pool runs tasks on its workers. New makes one; Close or Stop ends its workers. The tasks
// are their callers' to wait for.
type Pool struct {
	handoff  chan func()
	stop     chan struct{}
	maxIdle  int32
	idleTime time.Duration
	idle     atomic.Int32 // workers waiting for a task, or about to

	mu      sync.Mutex
	stopped bool
	workers sync.WaitGroup
}

// New returns a pool of which at most maxIdle workers wait for tasks at once, each for
// idleTime at most (DefaultMaxIdle and DefaultIdleTime if not positive).
func New(maxIdle int, idleTime time.Duration) *Pool {
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdle
	}
	if idleTime <= 0 {
		idleTime = DefaultIdleTime
	}
	return &Pool{handoff: make(chan func()), stop: make(chan struct{}), maxIdle: int32(min(maxIdle, 1<<30)), idleTime: idleTime}
}

// Go runs fn on a worker that waits for a task, or on a new one. Once the pool has stopped it
// runs fn on a goroutine of its own, which only fn's caller waits for.
func (p *Pool) Go(fn func()) {
	select {
	case p.handoff <- fn:
		return
	default:
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		go fn()
		return
	}
	// Added under the lock that Stop takes: no Add races Close's Wait.
	p.workers.Add(1)
	p.mu.Unlock()
	go p.work(fn)
}

// work runs fn, then each task handed to it, until it has waited idleTime for one, the pool
// already has maxIdle workers waiting, or the pool stops.
func (p *Pool) work(fn func()) {
	defer p.workers.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// No labels of the goroutine that started the worker, nor of the task before.
		pprof.SetGoroutineLabels(context.Background())
		fn()
		fn = nil // lets go of the task while waiting
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		if timer == nil {
			timer = time.NewTimer(p.idleTime)
		} else {
			// Drained first: a program may keep timers' channels as they were before Go 1.23
			// (asynctimerchan=1), where a tick sent during the task would stay after Reset.
			// One sent just as Stop runs can still arrive: the worker then ends early.
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(p.idleTime)
		}
		select {
		case fn = <-p.handoff:
			p.idle.Add(-1)
		case <-timer.C:
			p.idle.Add(-1)
			return
		case <-p.stop:
			p.idle.Add(-1)
			return
		}
	}
}

// Stop ends the workers that wait for a task and makes each busy one end with its task;
// tasks given to Go from then on run on goroutines of their own. It does not wait.
func (p *Pool) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
}

// Close stops the pool and waits for every worker to end: for the busy ones, until their
// tasks return. Call it once the tasks have ended, or Stop.
func (p *Pool) Close() {
	p.Stop()
	p.workers.Wait()
}
