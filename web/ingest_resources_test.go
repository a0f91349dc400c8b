package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// writesTo is an ingest body of one accepted write to each of resources
// of the lock lock:res of source cache.
func writesTo(resources ...string) string {
	reports := make([]string, len(resources))
	for i, r := range resources {
		reports[i] = fmt.Sprintf(`{"source":"cache","lock":"lock:res","resource":%q,"outcome":"accepted","token":7}`, r)
	}
	return "[" + strings.Join(reports, ",") + "]"
}

// A lock keeps at most audit.DefaultMaxResources resources: one request
// naming that many new ones is taken, and at once; a report naming one
// more is refused with a 400 naming resource, and nothing of its request
// is stored.
func TestIngestBoundsResourcesPerLock(t *testing.T) {
	f := newFixture(t)
	names := make([]string, audit.DefaultMaxResources)
	for i := range names {
		names[i] = fmt.Sprintf("shard-%04d", i)
	}
	start := time.Now()
	if res, m := f.post(t, writesTo(names...), bearer); res.StatusCode != http.StatusAccepted {
		t.Fatalf("%d new resources: status %d %v, want 202", len(names), res.StatusCode, m)
	}
	t.Logf("one request naming %d new resources: %s", len(names), time.Since(start).Round(time.Millisecond))

	for _, tc := range []struct{ name, body, want string }{
		{"Object", `{"source":"cache","lock":"lock:res","resource":"one-more","outcome":"accepted","token":7}`, "resource: "},
		{"Array", writesTo("shard-0001", "one-more", "two-more"), "writes[1].resource: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, m := f.post(t, tc.body, bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d %v, want 400", res.StatusCode, m)
			}
			msg, _ := m["error"].(string)
			if !strings.HasPrefix(msg, tc.want) || !strings.Contains(msg, fmt.Sprint(audit.DefaultMaxResources)) {
				t.Errorf("error = %q, want it to start %q and name the bound", msg, tc.want)
			}
		})
	}
	if n := f.storedWrites(t); n != audit.DefaultMaxResources {
		t.Fatalf("stored %d writes, want the first request's %d only", n, audit.DefaultMaxResources)
	}
	// The resources the lock has still report.
	if res, m := f.post(t, writesTo("shard-0001", "shard-1023"), bearer); res.StatusCode != http.StatusAccepted {
		t.Fatalf("writes of known resources: status %d %v, want 202", res.StatusCode, m)
	}
}

// storedWrites counts the write events of lock:res.
func (f *fixture) storedWrites(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	l, err := f.store.LockByKey(ctx, audit.LockKey{Source: "cache", Name: "lock:res"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := f.store.Events(ctx, l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}, Kind: audit.EventWriteAccepted})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}
