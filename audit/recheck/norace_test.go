//go:build !race

package recheck_test

// raceEnabled says the race detector is on.
const raceEnabled = false
