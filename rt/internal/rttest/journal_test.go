package rttest_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/rttest"
	"github.com/zlink-go/zlink/sdk"
)

// turnContext is what a journal reads of a Spot's context: its ID, its Fence and the start of
// its turn.
type turnContext struct {
	sdk.SpotContext
	id    string
	epoch int64
	start time.Time
}

func (c *turnContext) ID() string           { return c.id }
func (c *turnContext) Fence() sdk.Fence     { return sdk.Fence{Epoch: c.epoch} }
func (c *turnContext) TurnStart() time.Time { return c.start }

// A journal line keeps the turn's start, its handler's clock reading and its activation, and
// reads back as written; a turn with no start reads back with none.
func TestFileJournalKeepsEachTurnsStartAndRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j, err := rttest.OpenFileJournal(path, "node-1")
	require.NoError(t, err)
	start := time.Now().Add(-time.Millisecond)
	before := time.Now()
	j.Record(&turnContext{id: "w-1", epoch: 7, start: start}, "m 1")
	j.Record(&turnContext{id: "w-1", epoch: 7}, "m2")
	after := time.Now()
	require.NoError(t, j.Close())

	turns, err := rttest.ReadJournal(path)
	require.NoError(t, err)
	require.Len(t, turns, 2)
	assert.True(t, turns[0].Start.Equal(start))
	assert.False(t, turns[0].Ran.Before(before))
	assert.False(t, after.Before(turns[1].Ran))
	assert.Equal(t, rttest.Turn{Start: turns[0].Start, Ran: turns[0].Ran, Epoch: 7, Node: "node-1", Spot: "w-1", What: "m 1"}, turns[0])
	assert.True(t, turns[1].Start.IsZero())
}

// C1: a turn is judged by its start, so CheckTurnStarts reports every line whose start cannot
// be its own lease check's: none, one after its handler ran, or one not after the previous
// turn of the same activation ran (left over from it). Other activations are judged apart.
func TestC1_CheckTurnStartsReportsStartsThatAreNotTheTurnsOwn(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1_000, 0).Add(time.Duration(ms) * time.Millisecond) }
	turn := func(epoch int64, start, ran int) rttest.Turn {
		tr := rttest.Turn{Ran: at(ran), Epoch: epoch, Node: "node-1", Spot: "w-1", What: "op"}
		if start >= 0 {
			tr.Start = at(start)
		}
		return tr
	}
	for _, c := range []struct {
		name  string
		turns []rttest.Turn
		want  int
	}{
		{"serial turns, each checked", []rttest.Turn{turn(1, 0, 1), turn(1, 5, 6), turn(1, 7, 9)}, 0},
		{"a pause between check and handler", []rttest.Turn{turn(1, 0, 1), turn(1, 2, 30_000)}, 0},
		{"no start", []rttest.Turn{turn(1, 0, 1), turn(1, -1, 2)}, 1},
		{"start after the handler", []rttest.Turn{turn(1, 3, 2)}, 1},
		{"the previous turn's start again", []rttest.Turn{turn(1, 0, 1), turn(1, 0, 30_000)}, 1},
		{"a start before the previous turn ran", []rttest.Turn{turn(1, 0, 10), turn(1, 5, 12)}, 1},
		{"activations apart", []rttest.Turn{turn(1, 0, 10), turn(2, 5, 12), turn(1, 11, 13)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Len(t, rttest.CheckTurnStarts(c.turns), c.want)
		})
	}
}
