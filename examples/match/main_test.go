package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The default run: three nodes, 200 players, a rolling update of node-1 to node-2 midway and
// node-1's shutdown; every match that formed finished, no message was lost or ran twice.
func TestMatchRunsClean(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	err := run(ctx, nil, &out, &errs)
	t.Log(out.String())
	require.NoError(t, err, errs.String())
	field := func(name string) int {
		m := regexp.MustCompile(`(?m)^` + name + `\s+(\d+)`).FindStringSubmatch(out.String())
		require.NotNil(t, m, "no %q in the summary", name)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	assert.Zero(t, field("lost messages"))
	assert.Zero(t, field("duplicate executions"))
	assert.Zero(t, field("incomplete histories"))
	formed := field("matches formed")
	assert.Positive(t, formed)
	assert.Equal(t, formed, field("matches played"), "every match finished")
	assert.Equal(t, formed, field("results heard by node-2's leaderboard"))
	assert.Positive(t, field("objects relocated"))
	assert.Contains(t, out.String(), "(Relocated/None)")
	assert.Regexp(t, `node-1\s+runtime Stopped`, out.String())
	assert.Regexp(t, `node-2\s+runtime Serving\s+mesh Ready`, out.String())
}

// Bad flags get one clear line and change nothing.
func TestMatchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-players", "3"}, "a match takes 4 players"},
		{[]string{"-players", "x"}, `invalid value "x"`},
		{[]string{"-play", "10ms"}, "at least 1s"},
		{[]string{"-rounds", "0"}, "between 1 and 1000"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-log", "LOUD"}, `invalid value "LOUD"`},
	} {
		var out, errs bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errs)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error()+errs.String(), tc.want, "%v", tc.args)
		assert.Empty(t, out.String(), "%v started nothing", tc.args)
	}
}
