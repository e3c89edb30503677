package rttest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

// WorkerType is the stable type name of the test Worker, an Instance Spot that writes every
// turn it starts to a Journal outside the runtime: the evidence that fault tests read to prove
// which node ran what, and when.
const WorkerType = "rttest.Worker"

// Worker methods: Work is one-way and takes a while (the Worker's delay), so that messages
// queue behind it; Ping answers at once. Both journal the message ID. Every Worker also runs a
// periodic timer that journals "tick".
const (
	WorkerWork = "Work"
	WorkerPing = "Ping"
)

// WorkerDesc describes the Worker type.
var WorkerDesc = sdk.SpotDesc{Name: WorkerType, Kind: sdk.KindInstance, Methods: []sdk.MethodDesc{
	{
		Name:       WorkerWork,
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			w := impl.(*worker)
			w.j.Record(w.sc.TurnStart(), w.sc.ID(), req.(*wrapperspb.StringValue).GetValue())
			select {
			case <-time.After(w.delay):
			case <-ctx.Done():
			}
			return nil, nil
		},
	},
	{
		Name:       WorkerPing,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			w := impl.(*worker)
			id := req.(*wrapperspb.StringValue).GetValue()
			w.j.Record(w.sc.TurnStart(), w.sc.ID(), id)
			return wrapperspb.String(id), nil
		},
	},
}}

// Journal records the turns Workers start.
type Journal interface {
	// Record notes that the Spot spot started a turn for what at at: the turn's TurnStart, the
	// instant the runtime found the Spot's owner lease valid and let the turn start.
	Record(at time.Time, spot, what string)
}

type worker struct {
	sc    sdk.SpotContext
	j     Journal
	delay time.Duration
}

// RegisterWorker registers the Worker type: its Work turns take delay, and each Worker journals
// a "tick" every tick (none when tick is 0).
func RegisterWorker(r sdk.Registrar, j Journal, delay, tick time.Duration) error {
	return r.RegisterSpot(&WorkerDesc, func(sc sdk.SpotContext) (any, error) {
		w := &worker{sc: sc, j: j, delay: delay}
		if tick > 0 {
			sc.Every(tick, func(context.Context) { j.Record(sc.TurnStart(), sc.ID(), "tick") })
		}
		return w, nil
	})
}

// FileJournal appends one line per turn to a file: the wall-clock time in Unix nanoseconds,
// the node, the Spot and what ran. Each line is one write(2) on a file opened for appending,
// so the file is current the moment a turn starts, whatever happens to the process next.
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
func (j *FileJournal) Record(at time.Time, spot, what string) {
	line := strconv.FormatInt(at.UnixNano(), 10) + " " + j.node + " " + spot + " " + what + "\n"
	_, _ = j.f.WriteString(line)
}

// Close closes the file.
func (j *FileJournal) Close() error { return j.f.Close() }

// Turn is one line of a journal.
type Turn struct {
	At   time.Time
	Node string
	Spot string
	What string
}

// ReadJournal reads every turn of the journal file at path; a missing file has none.
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
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) != 4 {
			return nil, fmt.Errorf("rttest: %s: malformed journal line %q", path, sc.Text())
		}
		ns, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("rttest: %s: %w", path, err)
		}
		out = append(out, Turn{At: time.Unix(0, ns), Node: parts[1], Spot: parts[2], What: parts[3]})
	}
	return out, sc.Err()
}
