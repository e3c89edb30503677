package exec

import (
	"context"
	"math/bits"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/zlink-go/zlink/sdk"
)

// entry is a queued item: its work, or, without one, its message's context, request and
// method. It is 64 bytes, one cache line, so that a sender's push and the runner's pop each
// touch one line of the ring: the ring's allocation class starts it on a line.
type entry struct {
	w    Work
	ctx  context.Context
	req  proto.Message
	md   *sdk.MethodDesc
	meta meta
}

// meta is an entry's reserved bytes in its low bits and its flags in the top byte.
type meta uint64

const (
	metaBytes    meta = 1<<56 - 1
	metaActivity meta = 1 << 56
	metaAfterApp meta = 1 << 57
	metaCompany  meta = 1 << 58 // Item.Company
	metaReserved meta = 1 << 59 // Message.Reserved
)

// maxItemBytes is the most bytes one item may reserve: what meta holds.
const maxItemBytes = int64(metaBytes)

// entryOf is the entry of an admitted item with work w or message m that reserves bytes.
func entryOf(it Item, w Work, m *Message, bytes int64) entry {
	mt := meta(bytes)
	if it.Activity {
		mt |= metaActivity
	}
	if it.AfterApplication {
		mt |= metaAfterApp
	}
	if it.Company {
		mt |= metaCompany
	}
	if w != nil {
		return entry{w: w, meta: mt}
	}
	if m.Reserved {
		mt |= metaReserved
	}
	return entry{ctx: m.Ctx, req: m.Req, md: m.Method, meta: mt}
}

func (e *entry) bytes() int64   { return int64(e.meta & metaBytes) }
func (e *entry) activity() bool { return e.meta&metaActivity != 0 }
func (e *entry) afterApp() bool { return e.meta&metaAfterApp != 0 }
func (e *entry) company() bool  { return e.meta&metaCompany != 0 }
func (e *entry) message() Message {
	return Message{Ctx: e.ctx, Method: e.md, Req: e.req, Reserved: e.meta&metaReserved != 0}
}

// lane is one FIFO lane: a ring of queued entries plus the reservation of everything admitted
// and not yet completed (queued or running).
type lane struct {
	ring []entry // its length is zero or a power of two
	// box is ring's pooled box, so that returning ring to its pool allocates nothing; ring is
	// kept beside it so that push and pop take no second hop.
	box *[]entry
	// head, n and peak are int32: a lane would wrap them only past 2³¹ queued entries, over
	// 64 GiB of entries, far beyond any byte or count bound of a queue.
	head int32
	n    int32 // queued entries
	// peak is the most entries queued at once since the ring was taken, and start the size
	// class of the ring that the next run of work takes: a lane that was busy starts where
	// its last run needed, not from minRing, and a lane whose runs need less halves it per
	// run. (The fields are narrow so that the lane stays on one cache line.)
	peak  int32
	start uint8
	count int // admitted and not completed: queued + running
	bytes int64
}

func (l *lane) empty() bool { return l.n == 0 }

func (l *lane) peek() *entry { return &l.ring[l.head] }

func (l *lane) push(e entry) {
	if int(l.n) == len(l.ring) {
		l.grow()
	}
	l.ring[int(l.head+l.n)&(len(l.ring)-1)] = e
	if l.n++; l.n > l.peak {
		l.peak = l.n
	}
}

func (l *lane) pop() entry {
	e := l.ring[l.head]
	l.ring[l.head] = entry{}
	l.head = (l.head + 1) & int32(len(l.ring)-1)
	l.n--
	return e
}

func (l *lane) grow() {
	size := 2 * len(l.ring)
	if size == 0 {
		size = minRing << l.start
	}
	box := getRing(size)
	ring := *box
	for i := range l.n {
		ring[i] = l.ring[int(l.head+i)&(len(l.ring)-1)]
		l.ring[int(l.head+i)&(len(l.ring)-1)] = entry{}
	}
	putRing(l.box)
	l.ring, l.box, l.head = ring, box, 0
}

// release returns the ring of an empty lane to the pool, so an idle activation keeps no
// buffer and a busy one does not allocate one for every burst of work. It remembers the size
// the next run starts with: the least that held this run's peak, but no less than half the
// ring's size, so that one burst costs the runs after it a few halvings and no regrowth
// from minRing; and no more than maxStartRing, so that a burst long ago does not make every
// Spot's next single message take a large ring.
func (l *lane) release() {
	if l.n != 0 || l.ring == nil {
		return
	}
	need := ringClass(ceilPow2(max(int(l.peak), minRing)))
	l.start = uint8(min(max(need, ringClass(len(l.ring))-1), ringClass(maxStartRing)))
	putRing(l.box)
	l.ring, l.box, l.head, l.peak = nil, nil, 0, 0
}

// ceilPow2 is the least power of two of at least n, for n ≥ 1.
func ceilPow2(n int) int { return 1 << bits.Len(uint(n-1)) }

// Rings are pooled by size: minRing << class entries for class < len(ringPools). A run of
// work starts with at most maxStartRing entries (4 KiB) and grows from there.
const (
	minRing      = 4
	maxStartRing = 64
)

var ringPools [12]sync.Pool

func ringClass(size int) int { return bits.TrailingZeros(uint(size / minRing)) }

// getRing returns an empty ring of size entries, a power of two of at least minRing, in its
// box.
func getRing(size int) *[]entry {
	if c := ringClass(size); c < len(ringPools) {
		if r, ok := ringPools[c].Get().(*[]entry); ok {
			return r
		}
	}
	r := make([]entry, size)
	return &r
}

// putRing pools the ring in box, whose entries are all zero (popped), so it holds no work. No
// box, or a ring beyond the classes, falls outside them and is left to the collector.
func putRing(box *[]entry) {
	if box == nil {
		return
	}
	if c := ringClass(len(*box)); c < len(ringPools) {
		ringPools[c].Put(box)
	}
}

// takeAll removes every queued entry and returns their reservations.
func (l *lane) takeAll() []entry {
	out := make([]entry, 0, l.n)
	for l.n > 0 {
		e := l.pop()
		l.count--
		l.bytes -= e.bytes()
		out = append(out, e)
	}
	l.release()
	return out
}
