//go:build !race

package rttest

// RaceEnabled reports that the test binary runs with the race detector.
const RaceEnabled = false
