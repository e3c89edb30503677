package capacity

// QueuedJobWaiters is how many jobs wait in the job queue for a wakeup now.
func (m *Meter) QueuedJobWaiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.jobQueue)
}
