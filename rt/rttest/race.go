//go:build race

package rttest

// raceEnabled: the test binary runs with the race detector, so helper processes do too.
const raceEnabled = true
