package audit_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// storedWrites returns the write events of src/lock by request id.
func storedWrites(t *testing.T, st *sqlite.Store, lock string) map[string][]audit.Event {
	t.Helper()
	ctx := context.Background()
	l, err := st.LockByKey(ctx, audit.LockKey{Source: "src", Name: lock})
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return nil
	}
	if err != nil {
		t.Fatalf("lock %s: %v", lock, err)
	}
	evs, err := st.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("events of %s: %v", lock, err)
	}
	out := make(map[string][]audit.Event)
	for _, e := range evs {
		if _, ok := audit.WriteEventOf(e); ok {
			out[e.RequestID] = append(out[e.RequestID], e)
		}
	}
	return out
}

func TestRecorderRequestIDsAreScopedToLockAndResource(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	rec := startRecorder(t, st)
	ctx := context.Background()
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "")); err != nil {
		t.Fatal(err)
	}
	w := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db-1", Token: audit.Int64(41),
		Outcome: audit.WriteAccepted, At: at(time.Second), RequestID: "1"}

	t.Run("OtherResourceSameID", func(t *testing.T) {
		// Two resources that each number their requests from 1.
		other := w
		other.Resource, other.Outcome, other.Token, other.HighestToken = "db-2", audit.WriteRejected, audit.Int64(40), audit.Int64(41)
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
			t.Fatal(err)
		}
		if err := rec.ReportWrites(ctx, []audit.WriteReport{other}); err != nil {
			t.Fatalf("same id from another resource: %v", err)
		}
		got := storedWrites(t, st, "orders")["1"]
		if len(got) != 2 || got[0].Resource == got[1].Resource {
			t.Fatalf("stored under request 1: %+v, want one write of db-1 and one of db-2", got)
		}
	})

	t.Run("OtherLockSameID", func(t *testing.T) {
		other := w
		other.Lock = "carts"
		if err := rec.ReportWrites(ctx, []audit.WriteReport{other}); err != nil {
			t.Fatalf("same id for another lock: %v", err)
		}
		if got := storedWrites(t, st, "carts")["1"]; len(got) != 1 {
			t.Fatalf("stored under carts request 1: %d writes, want 1", len(got))
		}
	})

	t.Run("IdenticalRetryStoredOnce", func(t *testing.T) {
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w, w}); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if got := storedWrites(t, st, "orders")["1"]; len(got) != 2 {
			t.Fatalf("after retries, %d writes under request 1, want 2 (db-1 and db-2 once each)", len(got))
		}
	})

	t.Run("RetryWithoutItsTimeStoredOnce", func(t *testing.T) {
		// A report without at gets the time of receipt, which a retry
		// cannot repeat.
		retry := w
		retry.At, retry.AtDefaulted = at(time.Minute), true
		if err := rec.ReportWrites(ctx, []audit.WriteReport{retry}); err != nil {
			t.Fatalf("retry without at: %v", err)
		}
		if got := storedWrites(t, st, "orders")["1"]; len(got) != 2 {
			t.Fatalf("%d writes under request 1, want 2", len(got))
		}
	})

	for _, tc := range []struct {
		name   string
		change func(*audit.WriteReport)
	}{
		{"Outcome", func(w *audit.WriteReport) { w.Outcome, w.HighestToken = audit.WriteRejected, audit.Int64(42) }},
		{"Token", func(w *audit.WriteReport) { w.Token = audit.Int64(40) }},
		{"NoToken", func(w *audit.WriteReport) { w.Token = nil }},
		{"HighestToken", func(w *audit.WriteReport) { w.HighestToken = audit.Int64(41) }},
		{"Holder", func(w *audit.WriteReport) { w.Holder = "B" }},
		{"At", func(w *audit.WriteReport) { w.At = w.At.Add(time.Nanosecond) }},
	} {
		t.Run("Different"+tc.name+"Refused", func(t *testing.T) {
			changed := w
			tc.change(&changed)
			err := rec.ReportWrites(ctx, []audit.WriteReport{changed})
			if audit.ErrorCode(err) != audit.ECONFLICT || !strings.HasPrefix(audit.ErrorMessage(err), "request_id: ") {
				t.Fatalf("reused id with another %s: err = %v (%s), want %s naming request_id", tc.name, err, audit.ErrorCode(err), audit.ECONFLICT)
			}
			if got := storedWrites(t, st, "orders")["1"]; len(got) != 2 {
				t.Fatalf("%d writes under request 1, want 2: the refused one stored", len(got))
			}
		})
	}

	t.Run("ConflictInOneRequestStoresNoneOfIt", func(t *testing.T) {
		a := w
		a.RequestID = "batch-1"
		b := a
		b.Holder = "someone else"
		fresh := w
		fresh.RequestID = "batch-2"
		err := rec.ReportWrites(ctx, []audit.WriteReport{fresh, a, b})
		if audit.ErrorCode(err) != audit.ECONFLICT || !strings.HasPrefix(audit.ErrorMessage(err), "writes[2].request_id: ") {
			t.Fatalf("err = %v (%s), want %s naming writes[2].request_id", err, audit.ErrorCode(err), audit.ECONFLICT)
		}
		got := storedWrites(t, st, "orders")
		if len(got["batch-1"]) != 0 || len(got["batch-2"]) != 0 {
			t.Fatalf("a refused request stored %d and %d of its writes, want none", len(got["batch-1"]), len(got["batch-2"]))
		}
	})
}

// A conflict refuses exactly the request it is in: the other requests of
// its group commit are stored and acknowledged.
func TestRecorderConflictRefusesOnlyItsRequest(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	rec := startRecorder(t, st)
	ctx := context.Background()
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "")); err != nil {
		t.Fatal(err)
	}
	w := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(41),
		Outcome: audit.WriteAccepted, At: at(time.Second), RequestID: "taken"}
	if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
		t.Fatal(err)
	}
	conflicting := w
	conflicting.Outcome, conflicting.HighestToken = audit.WriteRejected, audit.Int64(42)

	const rounds, others = 20, 8
	for round := 0; round < rounds; round++ {
		errs := make([]error, others+1)
		var wg sync.WaitGroup
		for i := 0; i <= others; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := w
				if i < others {
					r.RequestID = fmt.Sprintf("r%d-%d", round, i)
				} else {
					r = conflicting
				}
				errs[i] = rec.ReportWrites(ctx, []audit.WriteReport{r})
			}()
		}
		wg.Wait()
		for i, err := range errs[:others] {
			if err != nil {
				t.Fatalf("round %d: request %d, beside a conflicting one: %v", round, i, err)
			}
		}
		if audit.ErrorCode(errs[others]) != audit.ECONFLICT {
			t.Fatalf("round %d: conflicting request: err = %v, want %s", round, errs[others], audit.ECONFLICT)
		}
	}
	got := storedWrites(t, st, "orders")
	for round := 0; round < rounds; round++ {
		for i := 0; i < others; i++ {
			if id := fmt.Sprintf("r%d-%d", round, i); len(got[id]) != 1 {
				t.Fatalf("request %s stored %d times, want 1", id, len(got[id]))
			}
		}
	}
	if ev := got["taken"]; len(ev) != 1 || ev[0].Kind != audit.EventWriteAccepted {
		t.Fatalf("under the taken id: %+v, want the first, accepted, write alone", ev)
	}
	if err := rec.Ready(ctx); err != nil {
		t.Fatalf("a refused request made the recorder unready: %v", err)
	}
}

// Write reports create lock rows under any name; the locks no collector has
// granted are bounded per source, across restarts.
func TestRecorderBoundsWriteOnlyLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lw.db")
	st := openStore(t, path)
	rec := startRecorder(t, st, audit.WithWriteOnlyLocks(3))
	ctx := context.Background()
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "")); err != nil {
		t.Fatal(err)
	}
	write := func(source, lock string) audit.WriteReport {
		return audit.WriteReport{Source: source, Lock: lock, Resource: "db", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: at(time.Second)}
	}
	report := func(rec *audit.Recorder, ws ...audit.WriteReport) error { return rec.ReportWrites(ctx, ws) }
	refused := func(err error, field string) {
		t.Helper()
		if audit.ErrorCode(err) != audit.EINVALID || !strings.HasPrefix(audit.ErrorMessage(err), field+": ") {
			t.Fatalf("err = %v (%s), want %s naming %s", err, audit.ErrorCode(err), audit.EINVALID, field)
		}
	}
	exists := func(lock string) bool {
		_, err := st.LockByKey(ctx, audit.LockKey{Source: "src", Name: lock})
		return err == nil
	}

	if err := report(rec, write("src", "x1"), write("src", "x2"), write("src", "x1"), write("src", "x3")); err != nil {
		t.Fatalf("three unknown locks: %v", err)
	}
	refused(report(rec, write("src", "x4")), "lock")
	refused(report(rec, write("src", "orders"), write("src", "x4")), "writes[1].lock")
	if exists("x4") || len(storedWrites(t, st, "orders")) != 0 {
		t.Fatal("a refused request stored some of its writes")
	}
	for _, w := range []audit.WriteReport{write("src", "orders"), write("src", "x1"), write("other", "y1")} {
		if err := report(rec, w); err != nil {
			t.Fatalf("write to %s (a granted lock, a known one, another source's): %v", w.Key(), err)
		}
	}

	// A grant makes x1 the collector's: room for one more.
	in := grantInput("B", 7, at(2*time.Second), "")
	in.Observations[0].Lock.Name = "x1"
	if err := rec.Observe(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := report(rec, write("src", "x4")); err != nil {
		t.Fatalf("after x1's grant: %v", err)
	}
	refused(report(rec, write("src", "x5")), "lock")

	rec.Close()
	rec = startRecorder(t, st, audit.WithWriteOnlyLocks(3))
	refused(report(rec, write("src", "x5")), "lock")
	if err := report(rec, write("src", "x2")); err != nil {
		t.Fatalf("after a restart, a known lock: %v", err)
	}
	if exists("x5") {
		t.Fatal("x5 stored")
	}
}
