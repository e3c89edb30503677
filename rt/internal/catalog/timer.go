package catalog

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/sdk"
)

// timerRetry is how soon a one-shot timer tries again when its run met its Spot's admission
// paused, or an Entry Spot's node between two registrations.
const timerRetry = 100 * time.Millisecond

// spotTimer runs a function on its Spot's own queue after a delay, once or periodically.
type spotTimer struct {
	a *activation
	// member, when set, is the Actor whose timer this is: it runs while the Actor is a member of
	// a, and stops when the Actor leaves or closes.
	member    *actor
	fn        func(context.Context)
	period    time.Duration // 0: one-shot
	keepAlive bool

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	queued  bool // a run is on the Spot's queue
}

// AfterFunc implements sdk.SpotContext.
func (a *activation) AfterFunc(d time.Duration, fn func(context.Context), opts ...sdk.TimerOption) sdk.Timer {
	return a.startTimer(d, 0, fn, opts)
}

// Every implements sdk.SpotContext. A period below one millisecond is raised to it.
func (a *activation) Every(d time.Duration, fn func(context.Context), opts ...sdk.TimerOption) sdk.Timer {
	d = max(d, time.Millisecond)
	return a.startTimer(d, d, fn, opts)
}

func (a *activation) startTimer(d, period time.Duration, fn func(context.Context), opts []sdk.TimerOption) sdk.Timer {
	t := newTimer(a, nil, period, fn, opts)
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.current(); st != stateActive && st != stateRelocating || fn == nil {
		t.stopped = true
		return t
	}
	if a.timers == nil {
		a.timers = make(map[*spotTimer]struct{})
	}
	a.timers[t] = struct{}{}
	t.arm(d)
	return t
}

// startMemberTimer starts a timer of the Actor act on a, act's host.
func (a *activation) startMemberTimer(act *actor, d, period time.Duration, fn func(context.Context), opts []sdk.TimerOption) sdk.Timer {
	t := newTimer(a, act, period, fn, opts)
	act.mu.Lock()
	defer act.mu.Unlock()
	if st := act.current(); fn == nil || st == actorGone || st == actorClosing || a.current() != stateActive && a.current() != stateRelocating {
		t.stopped = true
		return t
	}
	if act.timers == nil {
		act.timers = make(map[*spotTimer]struct{})
	}
	act.timers[t] = struct{}{}
	t.arm(d)
	return t
}

func newTimer(a *activation, member *actor, period time.Duration, fn func(context.Context), opts []sdk.TimerOption) *spotTimer {
	o := sdk.ApplyTimerOptions(opts)
	return &spotTimer{a: a, member: member, fn: fn, period: period, keepAlive: o.KeepAlive}
}

// arm starts the timer's clock.
func (t *spotTimer) arm(d time.Duration) {
	t.mu.Lock()
	t.t = time.AfterFunc(max(d, 0), t.fire)
	t.mu.Unlock()
}

// fire puts one run on the Spot's application lane. A periodic tick that finds the previous
// run still queued is skipped; a tick refused by a full lane is dropped, and a one-shot refused
// by a paused one tries again.
func (t *spotTimer) fire() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	skip := t.queued
	if t.period > 0 {
		t.t.Reset(t.period)
	}
	if !skip {
		t.queued = true
	}
	t.mu.Unlock()
	if skip {
		return
	}
	// Timer runs are application work on the Spot's queue; by default they are not activity,
	// so they do not keep an Instance Spot from idle eviction (D2).
	err := t.a.exec.Submit(exec.Item{Lane: sdk.LaneApplication, Activity: t.keepAlive}, t)
	if err != nil {
		t.mu.Lock()
		t.queued = false
		if err == exec.ErrAdmissionClosed && t.period == 0 && !t.stopped {
			// Admission is paused (a close or a relocation being decided, an arrival not yet
			// settled): a one-shot tries again soon; the Spot's end stops it for good.
			t.t.Reset(timerRetry)
		}
		t.mu.Unlock()
	}
}

// Run implements exec.Work. A timer runs only while its Spot may take turns (C1): an owned
// Spot's timer stops for good once the owner lease has ended; an Entry Spot's skips the run
// and fires again after its node registers again.
func (t *spotTimer) Run() {
	checked, allowed := t.a.checkTurn()
	memberGone := false
	if m := t.member; m != nil {
		switch m.current() {
		case actorActive, actorMoving, actorClosing:
			// An Actor whose lease ended is gone for its timers: it runs no more.
			memberGone = !m.leaseHeld()
		case actorGone:
			memberGone = true
		default:
			// Its Actor is moving: the run is skipped; a one-shot timer tries again soon, and
			// stops for good if the Actor leaves.
			t.mu.Lock()
			t.queued = false
			if t.period == 0 && !t.stopped {
				t.t.Reset(timerRetry)
			}
			t.mu.Unlock()
			return
		}
	}
	if !allowed && !memberGone && t.a.guard == nil {
		t.mu.Lock()
		t.queued = false
		if t.period == 0 && !t.stopped {
			t.t.Reset(timerRetry) // a periodic timer fires again on its own
		}
		t.mu.Unlock()
		return
	}
	allowed = allowed && !memberGone
	t.mu.Lock()
	t.queued = false
	stopped := t.stopped
	if t.period == 0 || !allowed {
		t.stopped = true
		if t.t != nil {
			t.t.Stop()
		}
	}
	t.mu.Unlock()
	if stopped {
		return
	}
	if !allowed {
		t.forget()
		return
	}
	if t.period == 0 {
		t.forget()
	}
	defer func() {
		if v := recover(); v != nil {
			t.a.cat.log.Error("spot timer panicked", "spot", t.a.typ.desc.Name, "id", t.a.id, "panic", v, "stack", string(debug.Stack()))
		}
	}()
	t.a.beginTurn(checked)
	t.fn(t.a.spotContext(context.Background()))
}

// Drop implements exec.Work.
func (t *spotTimer) Drop(error) {}

// Stop implements sdk.Timer.
func (t *spotTimer) Stop() bool {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return false
	}
	t.stopped = true
	cancelled := t.t != nil && t.t.Stop()
	t.mu.Unlock()
	t.forget()
	return cancelled || t.period > 0
}

func (t *spotTimer) forget() {
	if m := t.member; m != nil {
		m.mu.Lock()
		delete(m.timers, t)
		m.mu.Unlock()
		return
	}
	t.a.mu.Lock()
	delete(t.a.timers, t)
	t.a.mu.Unlock()
}
