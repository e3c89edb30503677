package gopool

// IdleWorkers is how many workers wait for a task.
func (p *Pool) IdleWorkers() int { return int(p.idle.Load()) }
