package rttest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// Journal records the turns that the test Spots start.
type Journal interface {
	// Record notes that the Spot of sc runs a turn for what, as the handler's first act.
	Record(sc sdk.SpotContext, what string)
}

// FileJournal appends one line per turn to a file: the turn's start (its TurnStart, the
// instant the runtime's lease check let it start), the handler's own clock reading, both in
// Unix nanoseconds, the activation's epoch, the node, the Spot and what ran. Each line is one
// write(2) on a file opened for appending, so the file is current the moment a turn starts,
// whatever happens to the process next.
type FileJournal struct {
	f    *os.File
	node string
}

// OpenFileJournal opens (creating it) the journal file at path for node.
func OpenFileJournal(path, node string) (*FileJournal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &FileJournal{f: f, node: node}, nil
}

// Record implements Journal.
func (j *FileJournal) Record(sc sdk.SpotContext, what string) {
	ran := time.Now()
	start := int64(0) // no turn start: CheckTurnStarts reports it
	if ts := sc.TurnStart(); !ts.IsZero() {
		start = ts.UnixNano()
	}
	line := strconv.FormatInt(start, 10) + " " + strconv.FormatInt(ran.UnixNano(), 10) + " " +
		strconv.FormatInt(sc.Fence().Epoch, 10) + " " + j.node + " " + sc.ID() + " " + what + "\n"
	_, _ = j.f.WriteString(line)
}

// Close closes the file.
func (j *FileJournal) Close() error { return j.f.Close() }

// Turn is one line of a journal.
type Turn struct {
	// Start is when the runtime let the turn start (zero if the journal had none); Ran is
	// when its handler journalled it. A pause of the process between the two moves Ran only.
	Start, Ran time.Time
	Epoch      int64 // the activation's Fence epoch
	Node       string
	Spot       string
	What       string
}

// ReadJournal reads every turn of the journal file at path, in the order they were journalled;
// a missing file has none.
func ReadJournal(path string) ([]Turn, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Turn
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 6)
		if len(parts) != 6 {
			return nil, fmt.Errorf("rttest: %s: malformed journal line %q", path, sc.Text())
		}
		var nums [3]int64
		for i := range nums {
			n, err := strconv.ParseInt(parts[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("rttest: %s: journal line %q: %w", path, sc.Text(), err)
			}
			nums[i] = n
		}
		t := Turn{Ran: time.Unix(0, nums[1]), Epoch: nums[2], Node: parts[3], Spot: parts[4], What: parts[5]}
		if nums[0] != 0 {
			t.Start = time.Unix(0, nums[0])
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// CheckTurnStarts reports the turns whose Start is not the instant of a lease check of their
// own, so that a check that judges turns by their Start cannot be fooled by a turn that started
// without one: a turn with no Start, a Start after its handler ran, or, since an activation's
// turns run one at a time, a Start not after the previous turn of the same activation ran (the
// Start of an earlier turn, left over). turns are in journal order. Starts and handler readings
// are wall-clock readings of one host, compared to the nanosecond: the check needs a clock
// that does not step back during the run and resolves the microseconds between a turn's handler
// and the next turn's check (Linux's does).
func CheckTurnStarts(turns []Turn) []string {
	type activation struct {
		node, spot string
		epoch      int64
	}
	lastRan := map[activation]time.Time{}
	var problems []string
	for _, t := range turns {
		a := activation{t.Node, t.Spot, t.Epoch}
		prev, seen := lastRan[a]
		switch {
		case t.Start.IsZero():
			problems = append(problems, fmt.Sprintf("%s on %s: turn %q has no start", t.Spot, t.Node, t.What))
		case t.Start.After(t.Ran):
			problems = append(problems, fmt.Sprintf("%s on %s: turn %q started at %v, after its handler ran at %v",
				t.Spot, t.Node, t.What, t.Start.Format(time.StampMicro), t.Ran.Format(time.StampMicro)))
		case seen && !t.Start.After(prev):
			problems = append(problems, fmt.Sprintf("%s on %s: turn %q started at %v, not after the previous turn ran at %v",
				t.Spot, t.Node, t.What, t.Start.Format(time.StampMicro), prev.Format(time.StampMicro)))
		}
		lastRan[a] = t.Ran
	}
	return problems
}
