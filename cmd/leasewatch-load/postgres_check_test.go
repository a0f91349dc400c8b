package main

import (
	"testing"
	"time"
)

// checkChanges compares the database's log of lease-table changes with
// leasewatch's events one by one: a duplicate does not hide a miss.
func TestCheckChanges(t *testing.T) {
	at := func(us int64) time.Time { return time.UnixMicro(1_800_000_000_000_000 + us) }
	grant := rowChange{"shedlock/job-1", "grant", "node-0", at(0)}
	renew := rowChange{"shedlock/job-1", "renew", "node-0", at(700)}
	release := rowChange{"shedlock/job-1", "release", "node-0", at(1400)}
	logged := []rowChange{grant, renew, release}
	for _, tc := range []struct {
		name                             string
		stored                           []rowChange
		matched, missed, twice, unlogged int
	}{
		{"EveryChangeOnce", []rowChange{grant, renew, release}, 3, 0, 0, 0},
		{"RenewalMissed", []rowChange{grant, release}, 2, 1, 0, 0},
		{"MissAndDuplicate", []rowChange{grant, release, release}, 2, 1, 1, 0},
		// The store keeps nanoseconds; PostgreSQL commits to the microsecond.
		{"SameMicrosecond", []rowChange{grant, renew, {release.lock, release.kind, release.holder, release.at.Add(999)}}, 3, 0, 0, 0},
		{"OtherCommitTime", []rowChange{grant, renew, {release.lock, release.kind, release.holder, release.at.Add(time.Microsecond)}}, 2, 1, 0, 1},
		{"OtherHolder", []rowChange{grant, renew, {release.lock, release.kind, "node-1", release.at}}, 2, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkChanges(logged, tc.stored)
			if c.matched != tc.matched || c.missed != tc.missed || c.twice != tc.twice || c.unlogged != tc.unlogged {
				t.Errorf("%s; want %d matched, %d missed, %d twice, %d never made", c.summary(), tc.matched, tc.missed, tc.twice, tc.unlogged)
			}
		})
	}
}

// matchHolds and seenByLength: which of a session's holds some poll saw,
// and the shortest length from which every hold was seen.
func TestHoldsSeen(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	between := func(from, to int) span { return span{at(from), at(to)} }
	// Each hold's calls took 10 ms; the third's unlock 300 ms (a busy client).
	hold := func(from, to, unlocked int) advisoryHold {
		return advisoryHold{inner: between(from, to), outer: between(from-10, unlocked)}
	}
	holds := []advisoryHold{hold(0, 1500, 1510), hold(3000, 3400, 3410), hold(5000, 5600, 5900), hold(9000, 9200, 9210)}
	holds[3].cut = true // the load stopped during it
	tenures := []span{
		between(1000, 2000), // a poll at 1000 saw the first hold, the next at 2000 its end
		between(5800, 6800), // the third, late in its unlock; the second fell between polls
		between(9100, 10100),
		between(12000, 13000), // no hold of the session's
	}
	got := matchHolds(holds, tenures, 50*time.Millisecond)
	want := []heldSeen{{length: 1500 * time.Millisecond, seen: true}, {length: 400 * time.Millisecond}, {length: 600 * time.Millisecond, seen: true}, {stray: true}}
	if len(got) != len(want) {
		t.Fatalf("matchHolds = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hold %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	s := seenByLength(got, 200*time.Millisecond, 1600*time.Millisecond)
	if s.made != 3 || s.seen != 2 || s.falseTenures != 1 {
		t.Errorf("made %d, seen %d, stray tenures %d; want 3, 2, 1", s.made, s.seen, s.falseTenures)
	}
	if s.shortestAllSeenAt != 400*time.Millisecond || s.shortestMissed != 400*time.Millisecond {
		t.Errorf("every hold longer than %s seen, shortest missed %s; want 400ms for both", s.shortestAllSeenAt, s.shortestMissed)
	}
}
