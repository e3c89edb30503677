//go:build race

package proctest

// RaceEnabled: the test binary runs with the race detector, so helper processes do too.
const RaceEnabled = true
