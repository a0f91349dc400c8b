package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// tickWrites stores writes of a lock around the ticks from base (a whole
// tick): accepted at -1 s, 3 s, 10 s less 1 ns, 10 s, 25 s, 59 s and 61 s,
// rejected at 5 s, and a renewal and another lock's write at 5 s. It
// returns the lock's id.
func tickWrites(t *testing.T, s Store, base time.Time) int64 {
	t.Helper()
	key := audit.LockKey{Source: "src", Name: "orders"}
	other := audit.LockKey{Source: "src", Name: "other"}
	var b audit.Batch
	for _, d := range []time.Duration{-time.Second, 3 * time.Second, 10*time.Second - 1, 10 * time.Second, 25 * time.Second, 59 * time.Second, 61 * time.Second} {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: base.Add(d)})
	}
	b.Events = append(b.Events,
		audit.Event{Lock: key, Kind: audit.EventWriteRejected, At: base.Add(5 * time.Second)},
		audit.Event{Lock: key, Kind: audit.EventRenew, At: base.Add(5 * time.Second)},
		audit.Event{Lock: other, Kind: audit.EventWriteAccepted, At: base.Add(5 * time.Second)})
	Apply(t, s, b)
	return LockByKey(t, s, key).ID
}

// WriteCounts with Ticks counts from the counts per tick: stretches of
// whole ticks from the tick that holds the window's start, exact whatever
// the limit, and only the lock's writes of the outcome in the window.
func testWriteCountsInTicks(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	base := time.Unix(1_800_000_000, 0).UTC() // a whole tick
	id := tickWrites(t, s, base)

	// 56 s in 3 stretches of 18.7 s: 2 ticks wide, from the tick at base.
	f := audit.BinFilter{From: base.Add(2 * time.Second), To: base.Add(58 * time.Second), Bins: 3, Limit: 1, Ticks: true}
	h, err := s.WriteCounts(ctx, id, audit.WriteAccepted, f)
	if err != nil {
		t.Fatal(err)
	}
	// The writes at -1 s and 59 s are in the ticks shown, not in the window.
	Equal(t, "accepted in ticks", h, audit.Histogram{From: base, Width: 2 * audit.WriteTick, Counts: []int{3, 1, 0}})
	h, err = s.WriteCounts(ctx, id, audit.WriteRejected, f)
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "rejected in ticks", h.Counts, []int{1, 0, 0})

	// Stretches under half a tick are counted from the writes.
	f = audit.BinFilter{From: base.Add(2 * time.Second), To: base.Add(58 * time.Second), Bins: 20, Ticks: true}
	fine, err := s.WriteCounts(ctx, id, audit.WriteAccepted, f)
	if err != nil {
		t.Fatal(err)
	}
	f.Ticks = false
	exact, err := s.WriteCounts(ctx, id, audit.WriteAccepted, f)
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "narrow stretches", fine, exact)

	// Within a tick of the latest time there is no next tick to end one:
	// counted from the writes.
	f = audit.BinFilter{From: audit.LatestTime.Add(-6 * time.Second), To: audit.LatestTime, Bins: 1, Ticks: true}
	last, err := s.WriteCounts(ctx, id, audit.WriteAccepted, f)
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "the last seconds", last, audit.Histogram{From: f.From, Width: 6 * time.Second, Counts: []int{0}})

	f = audit.BinFilter{From: base, To: base.Add(time.Minute), Bins: 3, Ticks: true}
	if _, err := s.WriteCounts(ctx, 999, audit.WriteAccepted, f); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("WriteCounts(missing lock, ticks) err = %v, want ENOTFOUND", err)
	}
	f.Bins = 0
	if _, err := s.WriteCounts(ctx, id, audit.WriteAccepted, f); audit.ErrorCode(err) != audit.EINVALID {
		t.Errorf("WriteCounts(no bins, ticks) err = %v, want EINVALID", err)
	}
}

// WriteTicks returns the counts per tick that WriteCounts with Ticks counts
// from: the lock's writes of the outcome only, of the ticks that start
// within the window.
func testWriteTicks(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	base := time.Unix(1_800_000_000, 0).UTC()
	id := tickWrites(t, s, base)
	ticks, err := s.WriteTicks(ctx, id, audit.WriteAccepted, audit.TimeFilter{From: base.Add(-audit.WriteTick), To: base.Add(50 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "accepted per tick", ticks, []audit.TickCount{
		{Start: base.Add(-audit.WriteTick), N: 1}, {Start: base, N: 2}, {Start: base.Add(audit.WriteTick), N: 1},
		{Start: base.Add(2 * audit.WriteTick), N: 1}, {Start: base.Add(50 * time.Second), N: 1}})
	ticks, err = s.WriteTicks(ctx, id, audit.WriteRejected, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "rejected per tick", ticks, []audit.TickCount{{Start: base, N: 1}})
	if _, err := s.WriteTicks(ctx, 999, audit.WriteAccepted, audit.TimeFilter{}); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("WriteTicks(missing lock) err = %v, want ENOTFOUND", err)
	}
	if _, err := s.WriteTicks(ctx, id, "maybe", audit.TimeFilter{}); audit.ErrorCode(err) != audit.EINVALID {
		t.Errorf("WriteTicks(outcome maybe) err = %v, want EINVALID", err)
	}
}

// WriteCounts with Ticks agrees with binning every write's time in Go, in
// windows of any length and start, before and after retention deletes some
// of the writes, and for writes before 1970, which have no tick; and so
// do the counts per tick, WriteTicks.
func testWriteCountsInTicksAgreeWithItsWrites(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	rng := rand.New(rand.NewPCG(3, 5))
	start := tickOf(T0).Add(-time.Second) // writes either side of tick boundaries
	var events []audit.Event
	for i := range 3000 {
		kind := audit.EventWriteAccepted
		if i%4 == 0 {
			kind = audit.EventWriteRejected
		}
		events = append(events, audit.Event{Lock: key, Kind: kind, Resource: "db", At: start.Add(time.Duration(rng.Int64N(int64(30 * time.Minute))))})
	}
	for _, sec := range []int64{-25, -9, 0, 4, 12} {
		events = append(events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, Resource: "db", At: time.Unix(sec, 0).UTC()})
	}
	Apply(t, s, audit.Batch{Events: events, Synced: true})
	id := LockByKey(t, s, key).ID

	type window struct {
		from, to time.Time
		bins     int
	}
	windows := []window{
		{start, start.Add(30 * time.Minute), 85},
		{start.Add(time.Second), start.Add(time.Second + 15*time.Minute), 85},
		{time.Unix(-30, 0).UTC(), time.Unix(20, 0).UTC(), 3}, // from before 1970: no ticks
		{time.Unix(0, 0).UTC(), time.Unix(20, 0).UTC(), 2},
	}
	for range 40 {
		from := start.Add(time.Duration(rng.Int64N(int64(30 * time.Minute))))
		windows = append(windows, window{from, from.Add(time.Duration(rng.Int64N(int64(20 * time.Minute)))), []int{1, 7, 40, 85}[rng.IntN(4)]})
	}
	stored := func(kind audit.EventKind) []audit.Event {
		t.Helper()
		evs, err := s.Events(ctx, id, audit.EventFilter{Kind: kind, TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	check := func(when string) {
		t.Helper()
		for _, outcome := range []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected} {
			kind := audit.EventWriteAccepted
			if outcome == audit.WriteRejected {
				kind = audit.EventWriteRejected
			}
			writes := stored(kind)
			for _, w := range windows {
				what := fmt.Sprintf("%s: %s in %d stretches of %s..%s", when, outcome, w.bins, w.from.Format(time.RFC3339Nano), w.to.Format(time.RFC3339Nano))
				h, err := s.WriteCounts(ctx, id, outcome, audit.BinFilter{From: w.from, To: w.to, Bins: w.bins, Ticks: true})
				if err != nil {
					t.Fatal(err)
				}
				Equal(t, what, h, tickHistogram(writes, w.from, w.to, w.bins))
			}
			checkWriteTicks(t, s, id, outcome, writes, tickOf(start), when)
		}
	}
	check("as stored")
	before := len(stored(audit.EventWriteAccepted))

	pruneWrites(t, s, start.Add(12*time.Minute+3*time.Second), 700)
	if after := len(stored(audit.EventWriteAccepted)); after == before || after == 0 {
		t.Fatalf("retention left %d of %d accepted writes: the test proves nothing", after, before)
	}
	check("after retention")
}

// tickHistogram is what WriteCounts with Ticks returns for writes, computed
// from their times: the writes from from to to, in stretches whole ticks
// wide from the tick that holds from when they are at least half a tick
// wide and from is not before 1970, else as without Ticks.
func tickHistogram(writes []audit.Event, from, to time.Time, bins int) audit.Histogram {
	width := (to.Sub(from) + time.Duration(bins) - 1) / time.Duration(bins)
	h := audit.Histogram{From: from, Width: max(1, width), Counts: make([]int, bins)}
	if width >= audit.WriteTick/2 && from.UnixNano() >= 0 {
		ticks := max(1, (width+audit.WriteTick/2)/audit.WriteTick)
		h.From, h.Width = tickOf(from), ticks*audit.WriteTick
		h.Counts = make([]int, (tickOf(to).Add(audit.WriteTick).Sub(h.From)+h.Width-1)/h.Width)
	}
	for _, e := range writes {
		if !e.At.Before(from) && !e.At.After(to) {
			h.Counts[min(len(h.Counts)-1, int(e.At.Sub(h.From)/h.Width))]++
		}
	}
	return h
}

// checkWriteTicks checks the lock's counts per tick of outcome against its
// writes: of every tick, and of the ticks that start within a window from
// 5 to 20 ticks after first (its ends on tick starts, inclusive).
func checkWriteTicks(t *testing.T, s Store, id int64, outcome audit.WriteOutcome, writes []audit.Event, first time.Time, when string) {
	t.Helper()
	ctx := context.Background()
	ticks, err := s.WriteTicks(ctx, id, outcome, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, when+": "+string(outcome)+" per tick", ticks, tickCounts(writes, time.Unix(0, 0), audit.LatestTime))
	from, to := first.Add(5*audit.WriteTick), first.Add(20*audit.WriteTick)
	ticks, err = s.WriteTicks(ctx, id, outcome, audit.TimeFilter{From: from, To: to, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, when+": "+string(outcome)+" per tick in a window", ticks, tickCounts(writes, from, to.Add(audit.WriteTick-1)))
}

// tickCounts counts writes per tick, of the ticks that start from from to
// to, as WriteTicks returns them: those before 1970 in none.
func tickCounts(writes []audit.Event, from, to time.Time) []audit.TickCount {
	var out []audit.TickCount
	for _, e := range writes {
		if e.At.UnixNano() < 0 || e.At.Before(from) || e.At.After(to) {
			continue
		}
		tick := tickOf(e.At)
		if n := len(out); n > 0 && out[n-1].Start.Equal(tick) {
			out[n-1].N++
		} else {
			out = append(out, audit.TickCount{Start: tick, N: 1})
		}
	}
	return out
}

// tickOf is the start of the tick that holds t (t not before 1970).
func tickOf(t time.Time) time.Time {
	n := t.UnixNano()
	return time.Unix(0, n-n%int64(audit.WriteTick)).UTC()
}
