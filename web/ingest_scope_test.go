package web

import (
	"net/http"
	"strings"
	"testing"
)

// writesUnder counts the write events of cache/lock with the given request id.
func (f *fixture) writesUnder(t *testing.T, lock, id string) int {
	t.Helper()
	n := 0
	for _, e := range f.writeEvents(t, "cache", lock) {
		if e.RequestID == id {
			n++
		}
	}
	return n
}

func TestIngestRequestIDScope(t *testing.T) {
	f := newFixture(t)
	report := func(resource, outcome string) string {
		return `{"source":"cache","lock":"lock:scope","resource":"` + resource + `","token":7,"outcome":"` + outcome +
			`","highest_token":7,"at":"2025-03-01T11:00:00Z","request_id":"1"}`
	}

	t.Run("SameIDOtherResource", func(t *testing.T) {
		for _, body := range []string{report("db-1", "accepted"), report("db-2", "rejected")} {
			if res, m := f.post(t, body, bearer); res.StatusCode != http.StatusAccepted {
				t.Fatalf("POST %s = %d %v, want 202", body, res.StatusCode, m)
			}
		}
		if n := f.writesUnder(t, "lock:scope", "1"); n != 2 {
			t.Fatalf("stored %d writes under request 1, want 2: one resource's write lost", n)
		}
	})

	t.Run("IdenticalRetry", func(t *testing.T) {
		res, m := f.post(t, report("db-1", "accepted"), bearer)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("retry = %d %v, want 202", res.StatusCode, m)
		}
		wantNumber(t, "accepted", m["accepted"], 1)
		if n := f.writesUnder(t, "lock:scope", "1"); n != 2 {
			t.Fatalf("stored %d writes under request 1 after a retry, want 2", n)
		}
	})

	t.Run("DifferentContentConflicts", func(t *testing.T) {
		_, before := f.do(t, http.MethodGet, "/metrics", nil)
		res, m := f.post(t, report("db-1", "rejected"), bearer)
		if res.StatusCode != http.StatusConflict {
			t.Fatalf("reused id with another outcome = %d %v, want 409", res.StatusCode, m)
		}
		wantKeys(t, "response", m, "error")
		if msg, _ := m["error"].(string); !strings.HasPrefix(msg, "request_id: ") {
			t.Errorf("error = %q, want it to name request_id", msg)
		}
		if n := f.writesUnder(t, "lock:scope", "1"); n != 2 {
			t.Fatalf("stored %d writes under request 1, want 2: the refused one stored", n)
		}
		_, after := f.do(t, http.MethodGet, "/metrics", nil)
		if a, b := grepLines(before, "leasewatch_ingest_writes_total"), grepLines(after, "leasewatch_ingest_writes_total"); a != b {
			t.Errorf("a refused report was counted:\n%s\nthen\n%s", a, b)
		}
	})

	t.Run("ConflictInOneBody", func(t *testing.T) {
		body := `[{"source":"cache","lock":"lock:batch","resource":"r","outcome":"accepted","request_id":"fresh"},
			{"source":"cache","lock":"lock:batch","resource":"r","outcome":"accepted","request_id":"twice","token":1},
			{"source":"cache","lock":"lock:batch","resource":"r","outcome":"accepted","request_id":"twice","token":2}]`
		res, m := f.post(t, body, bearer)
		if res.StatusCode != http.StatusConflict {
			t.Fatalf("POST = %d %v, want 409", res.StatusCode, m)
		}
		if msg, _ := m["error"].(string); !strings.HasPrefix(msg, "writes[2].request_id: ") {
			t.Errorf("error = %q, want it to name writes[2].request_id", msg)
		}
		if ev := f.writeEvents(t, "cache", "lock:batch"); len(ev) != 0 {
			t.Fatalf("a refused body stored %d writes, want none", len(ev))
		}
	})
}
