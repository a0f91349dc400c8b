//go:build race

package recheck_test

// raceEnabled says the race detector is on: it slows SQLite in pure Go
// about tenfold, so the agreement test generates fewer histories.
const raceEnabled = true
