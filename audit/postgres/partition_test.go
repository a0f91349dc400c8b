package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// TestRetentionDropsThePartitionsItWalkedPast stores renewals over several
// partitions of renewals, four ids wide: retention deletes the old ones and
// drops each partition it has walked past whole, which returns its space,
// while the partition of the renewals it keeps stays and reads as before.
func TestRetentionDropsThePartitionsItWalkedPast(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).Database(t)
	s := openRows(t, url, Options{RenewalSpan: 4})
	key := audit.LockKey{Source: "cache", Name: "lock:orders"}
	ten := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: at(0)}
	events := []audit.Event{{Lock: key, Kind: audit.EventGrant, At: at(0), Holder: "a", Token: audit.Int64(1)}}
	for sec := 1; sec <= 14; sec++ {
		events = append(events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(sec), Holder: "a", Token: audit.Int64(1), Seq: 1})
	}
	storetest.Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: events, Synced: true})
	l, err := s.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// The partitions of the renewals' ids, and those left once retention
	// has walked past the last renewal older than 11 s.
	all, left := map[int64]bool{}, map[int64]bool{}
	var last int64
	for _, e := range stored {
		if e.Kind == audit.EventRenew && e.At.Before(at(11)) {
			last = e.ID
		}
	}
	for _, e := range stored {
		if e.Kind == audit.EventRenew {
			from := e.ID - e.ID%4
			all[from] = true
			left[from] = left[from] || from+3 > last
		}
	}
	for from, keep := range left {
		if !keep {
			delete(left, from)
		}
	}
	if got := partitionCount(t, s); got != len(all) || len(all) < 4 {
		t.Fatalf("partitions = %d, want %d, one per four ids of 14 renewals", got, len(all))
	}
	before := size(t, s)

	r := &audit.Retainer{Store: s, Now: func() time.Time { return at(100) },
		Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: 89 * time.Second}}}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	// Renewals at 1 to 10 s are older than 11 s and go; the walk stops at
	// the renewal at 11 s, the first it keeps.
	if got := partitionCount(t, s); got != len(left) || len(left) >= len(all) {
		t.Errorf("partitions after retention = %d, want %d of the %d", got, len(left), len(all))
	}
	if after := size(t, s); after >= before {
		t.Errorf("database size %d bytes after retention, want less than %d", after, before)
	}
	got, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var secs []int
	for _, e := range got {
		secs = append(secs, int(e.At.Sub(t0)/time.Second))
	}
	storetest.Equal(t, "events left", secs, []int{0, 11, 12, 13, 14})
	tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Equal(t, "pruned renewals", tenures[0].Pruned, &audit.RenewalSummary{Renewals: 10, First: at(1), Last: at(10)})

	// A store opened again finds the partitions left, and new renewals go
	// on into them and then into new ones.
	s.Close()
	s = openRows(t, url, Options{RenewalSpan: 4})
	var more []audit.Event
	for sec := 15; sec < 23; sec++ {
		more = append(more, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(sec), Holder: "a", Token: audit.Int64(1), Seq: 1})
	}
	storetest.Apply(t, s, audit.Batch{Events: more})
	if got := partitionCount(t, s); got != len(left)+2 {
		t.Errorf("partitions after 8 more renewals = %d, want %d", got, len(left)+2)
	}
	got, err = s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5+len(more) {
		t.Errorf("events after 8 more renewals = %d, want %d", len(got), 5+len(more))
	}
	// Another span would misplace rows: refused, naming it.
	if _, err := Open(ctx, url, Options{RenewalSpan: 8}); err == nil {
		t.Error("Open with another span: no error")
	}
}

func partitionCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.reader.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_inherits WHERE inhparent = 'renewals'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
