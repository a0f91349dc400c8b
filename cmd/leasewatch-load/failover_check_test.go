package main

import (
	"testing"
	"time"
)

// matchBlinds pairs Redis handovers with the blind windows over them, as
// the stores of two real runs had them.
func TestMatchBlinds(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	gap := func(from, to int) [2]time.Time { return [2]time.Time{at(from), at(to)} }
	win := func(from, to int) blindWindow { return blindWindow{from: at(from), to: at(to)} }
	for _, tc := range []struct {
		name              string
		handovers         [][2]time.Time
		windows           []blindWindow
		uncovered, strays int
	}{
		// A kill: the old owner's last cursor before its last sample, the
		// new owner's subscription before its first.
		{"OneWindowPerHandover", [][2]time.Time{gap(0, 2500)}, []blindWindow{win(-300, 2300)}, 0, 0},
		// Handed on within a second: each window belongs to its own handover.
		{"HandoversInARow", [][2]time.Time{gap(0, 700), gap(950, 1750)}, []blindWindow{win(20, 680), win(1060, 1650)}, 0, 0},
		// An owner the samples missed recorded the first part of the gap.
		{"ThroughAMissedOwner", [][2]time.Time{gap(0, 2500)}, []blindWindow{win(30, 800), win(800, 1900)}, 0, 0},
		{"NoWindow", [][2]time.Time{gap(0, 2500)}, nil, 1, 0},
		{"WindowWithoutHandover", nil, []blindWindow{win(0, 500)}, 0, 1},
		// A window far longer than the gap does not cover it exactly.
		{"WindowTooLong", [][2]time.Time{gap(0, 2500)}, []blindWindow{win(-5000, 2300)}, 1, 1},
		{"WindowsNotInARow", [][2]time.Time{gap(0, 6000)}, []blindWindow{win(0, 500), win(3000, 5900)}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uncovered, stray := matchBlinds(tc.handovers, tc.windows)
			if len(uncovered) != tc.uncovered || len(stray) != tc.strays {
				t.Errorf("uncovered %v, stray %v; want %d uncovered and %d stray", uncovered, stray, tc.uncovered, tc.strays)
			}
		})
	}
}

// mergeGaps merges overlapping gaps, in order, and keeps the others apart.
func TestMergeGaps(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	gap := func(from, to int) [2]time.Time { return [2]time.Time{at(from), at(to)} }
	got := mergeGaps([][2]time.Time{gap(5000, 6000), gap(0, 1000), gap(500, 800), gap(900, 2000), gap(2500, 3000)})
	want := [][2]time.Time{gap(0, 2000), gap(2500, 3000), gap(5000, 6000)}
	if len(got) != len(want) {
		t.Fatalf("mergeGaps = %v, want %v", got, want)
	}
	for i := range want {
		if !got[i][0].Equal(want[i][0]) || !got[i][1].Equal(want[i][1]) {
			t.Errorf("gap %d = %v, want %v", i, got[i], want[i])
		}
	}
}
