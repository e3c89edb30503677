package exec

type entry struct {
	w        Work
	bytes    int64
	activity bool
	afterApp bool
}

// lane is one FIFO lane: a ring of queued entries plus the reservation of everything admitted
// and not yet completed (queued or running).
type lane struct {
	ring  []entry
	head  int
	n     int // queued entries
	count int // admitted and not completed: queued + running
	bytes int64
}

func (l *lane) empty() bool { return l.n == 0 }

func (l *lane) peek() *entry { return &l.ring[l.head] }

func (l *lane) push(e entry) {
	if l.n == len(l.ring) {
		l.grow()
	}
	l.ring[(l.head+l.n)%len(l.ring)] = e
	l.n++
}

func (l *lane) pop() entry {
	e := l.ring[l.head]
	l.ring[l.head] = entry{}
	l.head = (l.head + 1) % len(l.ring)
	l.n--
	return e
}

func (l *lane) grow() {
	size := 2 * len(l.ring)
	if size == 0 {
		size = 4
	}
	ring := make([]entry, size)
	for i := range l.n {
		ring[i] = l.ring[(l.head+i)%len(l.ring)]
	}
	l.ring, l.head = ring, 0
}

// release drops the ring of an empty lane, so an idle activation keeps no buffer.
func (l *lane) release() {
	if l.n == 0 {
		l.ring, l.head = nil, 0
	}
}

// takeAll removes every queued entry and returns their reservations.
func (l *lane) takeAll() []entry {
	out := make([]entry, 0, l.n)
	for l.n > 0 {
		e := l.pop()
		l.count--
		l.bytes -= e.bytes
		out = append(out, e)
	}
	l.release()
	return out
}
