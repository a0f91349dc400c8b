package renewallog

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

var t0 = time.Date(2026, 3, 1, 8, 30, 0, 0, time.UTC) // half an hour before a window ends

func renewal(lock string, i int) audit.Event {
	return audit.Event{Lock: audit.LockKey{Source: "s", Name: lock}, Kind: audit.EventRenew, At: t0.Add(time.Duration(i) * time.Second),
		TTL: 10 * time.Second, Position: "1", Seq: 1, Detail: map[string]any{"margin_ratio": 0.8}}
}

// A commit's renewals become a commit row per run window, folded into a
// row per bucket and run window, packed and sealed back whole; the events
// the log does not keep stay, in order.
func TestSplitRebucketAndPack(t *testing.T) {
	ids := map[string]int64{"a": 1, "b": 257, "c": 2} // a and b share bucket 1
	var events []audit.Event
	for i := range 3000 {
		events = append(events, renewal([]string{"a", "b", "c"}[i%3], i))
	}
	grant := audit.Event{Lock: audit.LockKey{Source: "s", Name: "a"}, Kind: audit.EventGrant, At: t0, Holder: "h"}
	odd := renewal("c", 5)
	odd.Position = "007" // not canonical: no run holds it
	events = append(events, grant, odd)
	commit, rest, err := Split(events, func(k audit.LockKey) (int64, error) { return ids[k.Name], nil })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(rest, []audit.Event{grant, odd}, func(a, b audit.Event) bool { return a.Kind == b.Kind && a.Position == b.Position }) {
		t.Errorf("events left for rows: %+v, want the grant and the renewal no run holds", rest)
	}
	// 3,000 s span a window boundary: a commit row in each window, which
	// fold into bucket 1 and 2 in each window; bucket 1's 2,000 renewals
	// of the first window fit one row.
	var logged []runcodec.Logged
	for i, r := range commit {
		if r.Bucket != runcodec.CommitBucket {
			t.Errorf("commit row %d: bucket %d", i, r.Bucket)
		}
		var err error
		if logged, err = (Stored{ID: int64(i + 1), Data: r.Data}).appendLogged(logged); err != nil {
			t.Fatal(err)
		}
	}
	if len(commit) != 2 || len(logged) != 3000 {
		t.Errorf("%d commit rows of %d renewals, want 2 of 3000", len(commit), len(logged))
	}
	rows, err := rowsOf(logged, runcodec.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	var stored []Stored
	renewals := 0
	for i, r := range rows {
		if r.Bucket != 1 && r.Bucket != 2 {
			t.Errorf("row %d: bucket %d", i, r.Bucket)
		}
		if runcodec.WindowOf(r.FirstAt) != runcodec.WindowOf(r.LastAt) {
			t.Errorf("row %d spans windows", i)
		}
		renewals += r.Renewals
		stored = append(stored, Stored{ID: int64(i + 1), Data: r.Data})
	}
	if len(rows) != 4 || renewals != 3000 {
		t.Errorf("%d rows of %d renewals, want 4 of 3000", len(rows), renewals)
	}
	runs, sealed, err := Pack(stored)
	if err != nil || sealed != 3000 {
		t.Fatalf("Pack: %d sealed, %v", sealed, err)
	}
	for _, r := range runs {
		if r.LockID != 1 && r.LockID != 257 && r.LockID != 2 {
			t.Errorf("a run of lock %d", r.LockID)
		}
	}
}

// BenchmarkSplit measures the write side's cost of a renewal: a commit of
// the ingest benchmark's shape (1,000 renewals of 1,000 locks, with margin
// and backend time) split into its log rows.
func BenchmarkSplit(b *testing.B) {
	events := make([]audit.Event, 1000)
	for i := range events {
		events[i] = renewal(strconv.Itoa(i), 0)
		events[i].Detail["renewed_at"] = t0.Add(-time.Duration(i) * time.Microsecond).Format(time.RFC3339Nano)
	}
	ids := make(map[audit.LockKey]int64, len(events))
	for i, e := range events {
		ids[e.Lock] = int64(i + 1)
	}
	lockID := func(k audit.LockKey) (int64, error) { return ids[k], nil }
	for b.Loop() {
		if _, _, err := Split(events, lockID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/renewal")
}

// BenchmarkFold measures the CPU side of a writer's fold (the SQL aside):
// 64 commit rows of 1,024 renewals each decoded and written again as rows
// of the locks' buckets. At a 65,000-node cluster's 6,500 renewals a
// second a fold covers about 10 s, so each of 65,536 locks has one renewal
// in it: a group of one renewal per lock, the fold's costliest shape.
func BenchmarkFold(b *testing.B) {
	const commits, perCommit = 64, 1024
	var stored []Stored
	for c := range commits {
		events := make([]audit.Event, perCommit)
		for i := range events {
			n := c*perCommit + i
			events[i] = renewal(strconv.Itoa(n), 0)
			events[i].At = t0.Add(time.Duration(n) * 150 * time.Microsecond)
			events[i].Detail["renewed_at"] = events[i].At.Add(-80 * time.Millisecond).Format(time.RFC3339Nano)
		}
		rows, _, err := Split(events, func(k audit.LockKey) (int64, error) { n, err := strconv.Atoi(k.Name); return int64(n + 1), err })
		if err != nil || len(rows) != 1 {
			b.Fatalf("%d rows, %v", len(rows), err)
		}
		stored = append(stored, Stored{ID: int64(c + 1), Data: rows[0].Data})
	}
	for b.Loop() {
		if _, err := bucketRows(stored, commits*perCommit); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*commits*perCommit), "ns/renewal")
}
