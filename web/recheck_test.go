package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/recheck"
)

// GET /api/v1/locks/{id}/recheck serves the lock's history as Porcupine
// operations that recheck.Decode reads, as the OpenAPI document says; its
// Lease check breaks exactly when the verdict over the same window is
// unsafe, before and after a resource accepts a stale token; limit bounds
// it and says so; a bad id, window or limit answers 400 naming it, a
// missing lock 404.
func TestRecheckAPI(t *testing.T) {
	f := newFixture(t)
	// A lock the recorder follows: worker-1 holds 41 and releases it,
	// worker-2 is granted 42.
	ctx := context.Background()
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/recheck"}
	for _, ob := range []audit.Observation{
		{Kind: audit.EventGrant, At: now.Add(-10 * time.Minute), Holder: "worker-1", Token: audit.Int64(41), LeaseDuration: 10 * time.Second},
		{Kind: audit.EventRelease, At: now.Add(-9 * time.Minute), Holder: "worker-1", Token: audit.Int64(41)},
		{Kind: audit.EventGrant, At: now.Add(-8 * time.Minute), Holder: "worker-2", Token: audit.Int64(42), LeaseDuration: 10 * time.Second},
	} {
		ob.Lock = key
		if err := f.rec.Record(ctx, audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.rec.ReportWrites(ctx, []audit.WriteReport{
		{Source: key.Source, Lock: key.Name, Resource: "db", Holder: "worker-1", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: now.Add(-9*time.Minute - time.Second)},
		{Source: key.Source, Lock: key.Name, Resource: "db", Holder: "worker-2", Token: audit.Int64(42), Outcome: audit.WriteAccepted, At: now.Add(-7 * time.Minute)},
		{Source: key.Source, Lock: key.Name, Resource: "db", Holder: "worker-1", Token: audit.Int64(41), Outcome: audit.WriteRejected, At: now.Add(-6 * time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	lock, err := f.store.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	id := itoa(lock.ID)
	v := openAPIValidator(t, openAPIJSON)
	get := func(t *testing.T, target string, want int) []byte {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, req)
		res := rec.Result()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			t.Fatalf("GET %s: %d %s, want %d", target, res.StatusCode, body, want)
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		if ok, errs := v.ValidateHttpResponse(req, res); !ok {
			for _, e := range errs {
				t.Errorf("GET %s: not as the OpenAPI document says: %s: %s", target, e.Message, e.Reason)
			}
		}
		return body
	}
	agree := func(t *testing.T, wantUnsafe bool) recheck.History {
		t.Helper()
		h, err := recheck.Decode(bytes.NewReader(get(t, "/api/v1/locks/"+id+"/recheck", 200)))
		if err != nil {
			t.Fatal(err)
		}
		var verdict struct{ Verdict string }
		if err := json.Unmarshal(get(t, "/api/v1/locks/"+id+"/verdict", 200), &verdict); err != nil {
			t.Fatal(err)
		}
		if unsafe := verdict.Verdict == "unsafe"; unsafe != wantUnsafe || recheck.Check(h, recheck.Lease) == unsafe {
			t.Fatalf("verdict %s, Lease holds: %v; want unsafe %v and Lease holding exactly when not", verdict.Verdict, recheck.Check(h, recheck.Lease), wantUnsafe)
		}
		return h
	}

	h := agree(t, false)
	if h.LockID != lock.ID || h.Property != recheck.Lease || h.Truncated || len(h.Operations) != 6 || !h.To.Equal(now) || len(h.Clients) != 2 {
		t.Errorf("history: lock %d, property %s, truncated %v, %d operations, to %v, clients %q; want lock %d, lease, whole, 6 (two grants, an end, three writes), to now, two clients",
			h.LockID, h.Property, h.Truncated, len(h.Operations), h.To, h.Clients, lock.ID)
	}

	// worker-1, whose tenure ended, writes under 41 and the cache takes it.
	report := `{"source":"prod-etcd","lock":"/locks/recheck","resource":"cache","holder":"worker-1","token":41,"outcome":"accepted","at":"` +
		now.Add(-time.Minute).Format(time.RFC3339) + `","request_id":"recheck-1"}`
	if res, body := f.do(t, http.MethodPost, "/api/v1/writes", strings.NewReader(report), "Authorization", "Bearer "+ingestToken, "Content-Type", "application/json"); res.StatusCode != http.StatusAccepted {
		t.Fatalf("report the write: %d %s", res.StatusCode, body)
	}
	h = agree(t, true)
	if i, why := recheck.Explain(h, recheck.Lease); i < 0 || h.Operations[i].Input.Holder != "worker-1" {
		t.Errorf("Explain: %d %q, want worker-1's write", i, why)
	}

	var capped recheck.History
	if err := json.Unmarshal(get(t, "/api/v1/locks/"+id+"/recheck?limit=2", 200), &capped); err != nil {
		t.Fatal(err)
	}
	if !capped.Truncated || capped.MaxOperations != 2 || len(capped.Operations) > 2 || capped.CompleteFrom == nil || len(capped.Notes) == 0 {
		t.Errorf("limit=2: truncated %v, max %d, %d operations, complete from %v, notes %q; want truncated at 2, saying from when",
			capped.Truncated, capped.MaxOperations, len(capped.Operations), capped.CompleteFrom, capped.Notes)
	}

	for _, c := range []struct {
		query, name string
	}{
		{"from=tomorrow", "from"},
		{"to=2025-03-01T10:00:00", "to"},
		{"from=" + url.QueryEscape(now.Format(time.RFC3339)) + "&to=" + url.QueryEscape(t0.Format(time.RFC3339)), "to"},
		{"limit=0", "limit"},
		{"limit=ten", "limit"},
	} {
		body := get(t, "/api/v1/locks/"+id+"/recheck?"+c.query, 400)
		if !strings.Contains(string(body), `"`+c.name+`:`) {
			t.Errorf("?%s: %s, want an error naming %s", c.query, body, c.name)
		}
	}
	if body := get(t, "/api/v1/locks/abc/recheck", 400); !strings.Contains(string(body), "id:") {
		t.Errorf("/locks/abc/recheck: %s, want an error naming id", body)
	}
	get(t, "/api/v1/locks/999999/recheck", 404)
}

// The lock page links to its history to re-check, which answers.
func TestRecheckLinkOnTheLockPage(t *testing.T) {
	f := newFixture(t)
	href := "/api/v1/locks/" + itoa(f.orders.ID) + "/recheck"
	res, body := f.do(t, http.MethodGet, "/locks/"+itoa(f.orders.ID), nil)
	if link := `href="` + href + `"`; res.StatusCode != http.StatusOK || !strings.Contains(string(body), link) {
		t.Fatalf("lock page: %d, has %s: %v", res.StatusCode, link, strings.Contains(string(body), link))
	}
	if res, body := f.do(t, http.MethodGet, href, nil); res.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %d %s", href, res.StatusCode, body)
	}
}
