//go:build !race

package rttest

const raceEnabled = false
