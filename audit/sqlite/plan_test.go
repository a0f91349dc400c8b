package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// Every read of one lock's findings of some kinds walks those kinds' range
// of findings_lock_kind_at, never the lock's whole time range: a busy lock
// has a stale write's finding for each write its fencing stopped, and a
// verdict's read of its overlaps, say, would otherwise read them all. SQLite
// plans without statistics, so a wider index elsewhere can change its
// choice; the plans are checked on the statements the reads really ran.
func TestLockFindingsOfAKindReadTheirKindOnly(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	storetest.Apply(t, s, audit.Batch{Findings: []audit.Finding{
		{Lock: key, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: storetest.At(1), Resource: "db", Tokens: []int64{1, 2}},
		{Lock: key, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: storetest.At(2), Until: storetest.At(4)},
	}})
	id := storetest.LockByKey(t, s, key).ID
	window := audit.TimeFilter{From: storetest.At(0), To: storetest.At(10), Limit: 100}
	reads := map[string]func() error{
		"a kind overlapping a window (verdicts)": func() error {
			_, err := s.Findings(ctx, audit.FindingFilter{LockID: id, Kind: audit.FindingOverlap, Overlapping: true, TimeFilter: window})
			return err
		},
		"a kind starting in a window (the findings page)": func() error {
			_, err := s.Findings(ctx, audit.FindingFilter{LockID: id, Kind: audit.FindingOverlap, TimeFilter: window})
			return err
		},
		"several kinds (incident reviews)": func() error {
			_, err := s.Findings(ctx, audit.FindingFilter{LockID: id, Kinds: []audit.FindingKind{audit.FindingOverlap, audit.FindingExposure}, TimeFilter: window})
			return err
		},
		"counts per resource": func() error {
			_, err := s.FindingsByResource(ctx, id, audit.FindingStaleWrite, window)
			return err
		},
		"write marks": func() error {
			_, err := s.WriteMarks(ctx, id, window)
			return err
		},
	}
	for name, read := range reads {
		clear(s.reader.stmts)
		if err := read(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checked := 0
		for query := range s.reader.stmts {
			if !strings.Contains(query, "FROM findings") || !strings.Contains(query, "kind") {
				continue // the lock's key, read first
			}
			checked++
			plan := queryPlan(t, s, query)
			if !strings.Contains(plan, "findings_lock_kind_at (lock_id=? AND kind") {
				t.Errorf("%s: plan\n%s\nwant a range of findings_lock_kind_at by lock and kind, for\n%s", name, plan, query)
			}
		}
		if checked == 0 {
			t.Errorf("%s: no statement on findings was kept to check", name)
		}
	}
}

// A lock's write reports are read from events_lock_writes alone: their
// rows lie among every other lock's reports, and a read of each row costs a
// page of its own (an incident review reads thousands). The index is an
// expression index for the highest token, which SQLite uses only when the
// query's expression is the index's, character for character.
func TestLockWritesReadFromTheIndexAlone(t *testing.T) {
	const writeRange = "USING COVERING INDEX events_lock_writes (lock_id=? AND kind=?"

	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{
		{Lock: key, Kind: audit.EventWriteRejected, At: storetest.At(1), Holder: "a", Token: audit.Int64(3), Resource: "db",
			Detail: map[string]any{"highest_token": int64(4)}},
	}})
	id := storetest.LockByKey(t, s, key).ID
	clear(s.reader.stmts)
	writes, err := s.WriteEvents(ctx, id, audit.WriteRejected, audit.EventFilter{TimeFilter: audit.TimeFilter{From: storetest.At(0), To: storetest.At(10)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) != 1 || writes[0].HighestToken == nil || *writes[0].HighestToken != 4 {
		t.Fatalf("write events = %+v, want the one rejected write with highest token 4", writes)
	}
	// A verdict's write totals read the writes of the window's part
	// minutes, by resource.
	stats, err := s.WriteStats(ctx, id, audit.TimeFilter{From: storetest.At(0), To: storetest.At(10)})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Resource != "db" || stats[0].Rejected != 1 {
		t.Fatalf("write stats = %+v, want db's one rejected write", stats)
	}
	checked := 0
	for query := range s.reader.stmts {
		if !strings.Contains(query, "FROM events") {
			continue // the lock's key, read first
		}
		checked++
		plan := queryPlan(t, s, query)
		if strings.Contains(query, "write_bins") {
			// The part minutes at either end: two ranges, whose kinds
			// are an IN list.
			if strings.Count(plan, writeRange) != 2 {
				t.Errorf("plan\n%s\nwant two ranges of events_lock_writes by lock and kind, from the index alone, for\n%s", plan, query)
			}
			continue
		}
		if !strings.Contains(plan, writeRange) {
			t.Errorf("plan\n%s\nwant a range of events_lock_writes by lock and kind, from the index alone, for\n%s", plan, query)
		}
	}
	if checked == 0 {
		t.Error("no statement on events was kept to check")
	}
}

// queryPlan is SQLite's plan of query, its parameters NULL, one step a
// line.
func queryPlan(t *testing.T, s *Store, query string) string {
	t.Helper()
	args := make([]any, strings.Count(query, "?"))
	rows, err := s.reader.DB.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
