package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// WriteStats reads a long window's totals from counts kept per minute and
// its partial minutes from the writes: whatever the window, its totals are
// those of the writes in it, before and after retention deletes some (the
// newest write of a minute among them), and for writes before 1970, which
// are not binned.
func testWriteStatsAgreesWithItsWrites(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	rng := rand.New(rand.NewPCG(7, 11))
	start := T0.Truncate(time.Minute).Add(-time.Second) // writes either side of minute boundaries
	var events []audit.Event
	for i := range 400 {
		e := audit.Event{Lock: key, Kind: audit.EventWriteAccepted, Resource: []string{"db", "cache", "queue"}[i%3],
			At: start.Add(time.Duration(rng.Int64N(int64(6 * time.Minute)))), Token: audit.Int64(int64(i))}
		if i%4 == 0 {
			e.Kind = audit.EventWriteRejected
		}
		if i%5 == 0 {
			e.Token = nil
		}
		events = append(events, e)
	}
	old := time.Unix(-90, 0).UTC() // before 1970, minutes either side of the epoch
	for i, at := range []time.Time{old, old.Add(time.Minute), time.Unix(0, 0).UTC(), time.Unix(1, 0).UTC()} {
		events = append(events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, Resource: "db", At: at, Token: audit.Int64(int64(i))})
	}
	events = append(events, audit.Event{Lock: key, Kind: audit.EventRenew, At: start.Add(time.Minute)},
		audit.Event{Lock: key, Kind: audit.EventGrant, At: start, Token: audit.Int64(1)})
	Apply(t, s, audit.Batch{Events: events, Synced: true})
	id := LockByKey(t, s, key).ID

	windows := minuteWindows(rng, start, old)
	writes := func() []audit.Event {
		t.Helper()
		stored, err := s.Events(ctx, id, audit.EventFilter{Kinds: []audit.EventKind{audit.EventWriteAccepted, audit.EventWriteRejected},
			TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
		if err != nil {
			t.Fatal(err)
		}
		return stored
	}
	check := func(when string, stored []audit.Event) {
		t.Helper()
		for _, w := range windows {
			got, err := s.WriteStats(ctx, id, w)
			if err != nil {
				t.Fatal(err)
			}
			Equal(t, fmt.Sprintf("%s: WriteStats(%s..%s)", when, w.From.Format(time.RFC3339Nano), w.To.Format(time.RFC3339Nano)),
				got, totals(stored, w))
		}
	}
	before := writes()
	check("as stored", before)

	// Retention walks the writes in the order they were stored and deletes
	// the old ones up to the first that is not old enough: minutes are left
	// partly deleted, some of them without their newest write.
	pruneWrites(t, s, start.Add(3*time.Minute+20*time.Second), 150)
	after := writes()
	if !newestGone(before, after) {
		t.Fatalf("retention deleted %d of %d writes and no minute's newest while keeping others: the test proves nothing", len(before)-len(after), len(before))
	}
	check("after retention", after)
}

// minuteWindows are windows for totals kept per minute over stored items
// from start on (six minutes of them) and a few either side of old (before
// 1970) and the epoch: whole, open at either end, of two whole minutes,
// inside one minute, and 40 more at random.
func minuteWindows(rng *rand.Rand, start, old time.Time) []audit.TimeFilter {
	windows := []audit.TimeFilter{
		{}, {From: start}, {To: start.Add(3 * time.Minute)},
		{From: start.Add(time.Second), To: start.Add(time.Second + 2*time.Minute - time.Nanosecond)}, // two whole minutes
		{From: start.Add(2 * time.Second), To: start.Add(30 * time.Second)},                          // inside one minute
		{From: old, To: time.Unix(2, 0).UTC()},
		{From: old.Add(time.Second), To: time.Unix(0, 0).UTC()},
	}
	for range 40 {
		from := start.Add(time.Duration(rng.Int64N(int64(6 * time.Minute))))
		windows = append(windows, audit.TimeFilter{From: from, To: from.Add(time.Duration(rng.Int64N(int64(4 * time.Minute))))})
	}
	return windows
}

// pruneWrites runs retention over s's write events until it is done: it
// walks them in the order they were stored, limit a step, and deletes
// those before before.
func pruneWrites(t *testing.T, s Store, before time.Time, limit int) {
	t.Helper()
	step := audit.PruneStep{Rule: audit.EventRule{Kinds: []audit.EventKind{audit.EventWriteAccepted, audit.EventWriteRejected}},
		Before: before, Limit: limit}
	for done := false; !done; {
		res, err := s.PruneEvents(context.Background(), step)
		if err != nil {
			t.Fatal(err)
		}
		step.After, done = res.Next, res.Done
	}
}

// newestGone reports whether some resource's minute lost its newest write
// but kept others from before to after.
func newestGone(before, after []audit.Event) bool {
	type minute struct {
		resource string
		kind     audit.EventKind
		at       time.Time
	}
	newest := func(writes []audit.Event) map[minute]time.Time {
		out := make(map[minute]time.Time)
		for _, e := range writes {
			m := minute{e.Resource, e.Kind, e.At.Truncate(time.Minute)}
			out[m] = audit.MaxTime(out[m], e.At)
		}
		return out
	}
	was := newest(before)
	for m, last := range newest(after) {
		if !last.Equal(was[m]) {
			return true
		}
	}
	return false
}

// totals is WriteStats computed from the writes themselves.
func totals(writes []audit.Event, w audit.TimeFilter) []audit.ResourceWrites {
	by := make(map[string]*audit.ResourceWrites)
	for _, e := range writes {
		if (!w.From.IsZero() && e.At.Before(w.From)) || (!w.To.IsZero() && e.At.After(w.To)) {
			continue
		}
		rw := by[e.Resource]
		if rw == nil {
			rw = &audit.ResourceWrites{Resource: e.Resource}
			by[e.Resource] = rw
		}
		if e.Kind == audit.EventWriteAccepted {
			rw.Accepted++
			if e.Token == nil {
				rw.Untokened++
			}
		} else {
			rw.Rejected++
		}
		rw.LastAt = audit.MaxTime(rw.LastAt, e.At)
	}
	var out []audit.ResourceWrites
	for _, rw := range by {
		out = append(out, *rw)
	}
	slices.SortFunc(out, func(a, b audit.ResourceWrites) int { return strings.Compare(a.Resource, b.Resource) })
	return out
}

// WritesBeforeBins are the rows of a lock (id 1) and its writes, as a
// database stored them before it counted writes per minute: a migration
// test inserts them at the schema before the one that adds the counts,
// then opens the store and calls CheckWritesBeforeBins.
var WritesBeforeBins = []string{
	`INSERT INTO locks (source, name) VALUES ('src', 'orders')`,
	fmt.Sprintf(`INSERT INTO events (lock_id, kind, at, resource, token) VALUES
		(1, 'write_accepted', %d, 'db', 1), (1, 'write_accepted', %d, 'db', NULL), (1, 'write_rejected', %d, 'db', 1),
		(1, 'write_accepted', %d, 'cache', 2), (1, 'grant', %[1]d, '', 1)`,
		100*int64(time.Minute)+5, 101*int64(time.Minute)+7, 101*int64(time.Minute)+9, 102*int64(time.Minute)),
	fmt.Sprintf(`INSERT INTO findings (lock_id, class, kind, severity, at) VALUES
		(1, 'lock', 'overlap', 'critical', %d), (1, 'lock', 'stale_write', 'warning', %d), (1, 'lock', 'stale_write', 'warning', %d)`,
		100*int64(time.Minute)+5, 101*int64(time.Minute)+9, 102*int64(time.Minute)),
}

// CheckWritesBeforeBins checks that the migrations counted WritesBeforeBins:
// bins is how many write_bins rows it made (one per minute, resource and
// outcome: 4), a window of whole minutes totals the writes, and its writes
// counted per tick are where they were stored, and its findings counted
// per minute too.
func CheckWritesBeforeBins(t *testing.T, s audit.Store, bins int) {
	t.Helper()
	if bins != 4 {
		t.Fatalf("write_bins rows after the upgrade = %d, want 4", bins)
	}
	minute := int64(time.Minute)
	got, err := s.WriteStats(context.Background(), 1, audit.TimeFilter{From: time.Unix(0, 100*minute), To: time.Unix(0, 103*minute-1)})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "write totals after the upgrade", got, []audit.ResourceWrites{
		{Resource: "cache", Accepted: 1, LastAt: time.Unix(0, 102*minute).UTC()},
		{Resource: "db", Accepted: 2, Untokened: 1, Rejected: 1, LastAt: time.Unix(0, 101*minute+9).UTC()},
	})
	h, err := s.WriteCounts(context.Background(), 1, audit.WriteAccepted,
		audit.BinFilter{From: time.Unix(0, 100*minute), To: time.Unix(0, 103*minute-1), Bins: 18, Ticks: true})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, 18)
	want[0], want[6], want[12] = 1, 1, 1 // minutes 100, 101 and 102
	Equal(t, "accepted writes per tick after the upgrade", h.Counts, want)
	counts, err := s.FindingCounts(context.Background(), audit.FindingCountFilter{Class: audit.ClassLock,
		TimeFilter: audit.TimeFilter{From: time.Unix(0, 100*minute), To: time.Unix(0, 103*minute-1)}})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "finding counts after the upgrade", counts, map[audit.Severity]int{audit.SeverityCritical: 1, audit.SeverityWarning: 2})
}
