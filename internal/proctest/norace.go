//go:build !race

package proctest

// RaceEnabled reports that the test binary runs with the race detector.
const RaceEnabled = false
