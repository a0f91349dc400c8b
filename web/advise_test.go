package web

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/leasewatch/leasewatch/audit"
)

// stallsBase is when recordStalls' story starts, within the fixture's hour.
var stallsBase = t0.Add(30 * time.Minute)

// recordStalls records through the fixture's recorder a leader lock with a
// 2 s lease: worker-1 renews every 500 ms, stalls 4 s (its lease expires at
// 3.5 s) and takes the lock again at 5.5 s, renews twice and releases it;
// worker-2 takes it at 8 s and renews every 400 ms. It returns the lock.
func (f *fixture) recordStalls(t *testing.T) audit.Lock {
	t.Helper()
	ctx := context.Background()
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/leader"}
	observe := func(kind audit.EventKind, ms int, holder string, token int64) {
		t.Helper()
		in := audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: key, Kind: kind, At: stallsBase.Add(time.Duration(ms) * time.Millisecond), Holder: holder,
			Token: audit.Int64(token), LeaseDuration: 2 * time.Second}}}
		if err := f.rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	observe(audit.EventGrant, 0, "worker-1", 501)
	for _, ms := range []int{500, 1000, 1500} {
		observe(audit.EventRenew, ms, "worker-1", 501)
	}
	observe(audit.EventExpire, 3500, "worker-1", 501)
	observe(audit.EventGrant, 5500, "worker-1", 502)
	observe(audit.EventRenew, 6000, "worker-1", 502)
	observe(audit.EventRenew, 6500, "worker-1", 502)
	observe(audit.EventRelease, 7000, "worker-1", 502)
	observe(audit.EventGrant, 8000, "worker-2", 503)
	observe(audit.EventRenew, 8400, "worker-2", 503)
	observe(audit.EventRenew, 8800, "worker-2", 503)
	l, err := f.store.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The advice over recordStalls' story: gaps 0.4 0.4 0.5 0.5 0.5 0.5 0.5
// and the 4 s stall across worker-1's expiry, longer than the 2 s lease; at
// a margin of 0.5 and 5 retries the lease needs 4 × 1.5 × 6/5 = 7.2 s, with
// a 1.2 s retry period and a 6 s renew deadline: 0.833 writes/s where the
// holders make 2.
func TestAPIAdvice(t *testing.T) {
	f := newFixture(t)
	l := f.recordStalls(t)
	path := "/api/v1/locks/" + itoa(l.ID) + "/advice"
	window := url.Values{"from": {stallsBase.Format(time.RFC3339Nano)}, "to": {stallsBase.Add(time.Minute).Format(time.RFC3339Nano)}}

	a := f.getJSON(t, path+"?"+window.Encode(), http.StatusOK)
	wantKeys(t, "advice", a, "lock_id", "source", "lock", "from", "to", "renewals_from", "capped", "renewals", "margin", "retries",
		"jitter_factor", "rule", "gaps", "holders", "current", "suggested", "needed_lease_ms", "short", "cost_factor", "costly")
	wantNumber(t, "renewals", a["renewals"], 7)
	wantGaps(t, "lock", a["gaps"], 8, 500, 4000, 4000, 4000)
	wantTime(t, "longest stall's end", a["gaps"].(map[string]any)["max_at"], stallsBase.Add(5500*time.Millisecond))
	holders := list(t, a, "holders")
	if len(holders) != 2 || holders[0]["holder"] != "worker-1" || holders[1]["holder"] != "worker-2" {
		t.Fatalf("holders = %v, want worker-1 and worker-2", holders)
	}
	wantGaps(t, "worker-1", holders[0]["gaps"], 6, 500, 4000, 4000, 4000)
	wantGaps(t, "worker-2", holders[1]["gaps"], 2, 400, 400, 400, 400)
	wantNumber(t, "worker-2's lease needed", holders[1]["needed_lease_ms"], 720)
	if holders[0]["short"] != true || holders[1]["short"] != false || a["short"] != true || a["costly"] != false {
		t.Errorf("short %v (worker-1 %v, worker-2 %v), costly %v; want the lease shorter than worker-1's stall only, not costly",
			a["short"], holders[0]["short"], holders[1]["short"], a["costly"])
	}
	wantSettings(t, "current", a["current"], 2000, -1, 500, 2)
	wantSettings(t, "suggested", a["suggested"], 7200, 6000, 1200, 0.833)
	wantNumber(t, "needed", a["needed_lease_ms"], 7200)
	wantNumber(t, "cost", a["cost_factor"], 2.4)

	// No margin and two retries: 4 s × 3/2.
	window.Set("margin", "0")
	window.Set("retries", "2")
	a = f.getJSON(t, path+"?"+window.Encode(), http.StatusOK)
	wantSettings(t, "suggested without a margin", a["suggested"], 6000, 4000, 2000, 0.5)

	// By default, the day up to now: the same renewals.
	if a := f.getJSON(t, path, http.StatusOK); a["renewals"] != 7.0 {
		t.Errorf("default window: %v renewals, want 7", a["renewals"])
	}
	// A lock without renewals has nothing to size.
	a = f.getJSON(t, "/api/v1/locks/"+itoa(f.hostile.ID)+"/advice", http.StatusOK)
	wantNull(t, "suggested without renewals", a["suggested"])
	wantNull(t, "cost without renewals", a["cost_factor"])

	for _, c := range []struct{ query, field string }{
		{"from=yesterday", "from"},
		{"to=soon", "to"},
		{"from=" + url.QueryEscape(now.Format(time.RFC3339)) + "&to=" + url.QueryEscape(t0.Format(time.RFC3339)), "to"},
		{"from=" + url.QueryEscape(now.Add(-93*24*time.Hour).Format(time.RFC3339)), "from"},
		{"margin=half", "margin"},
		{"margin=-1", "margin"},
		{"margin=11", "margin"},
		{"retries=1", "retries"},
		{"retries=many", "retries"},
	} {
		wantError(t, f.getJSON(t, path+"?"+c.query, http.StatusBadRequest), c.field)
	}
	wantError(t, f.getJSON(t, "/api/v1/locks/999999/advice", http.StatusNotFound), "999999")
}

// The lock page shows the same advice from what it reads for its health
// panel, and flags the lease shorter than the stall.
func TestLockPageAdvice(t *testing.T) {
	f := newFixture(t)
	l := f.recordStalls(t)
	window := url.Values{"from": {stallsBase.Format(time.RFC3339Nano)}, "to": {stallsBase.Add(time.Minute).Format(time.RFC3339Nano)}}
	body := f.page(t, "/locks/"+itoa(l.ID)+"?"+window.Encode(), http.StatusOK)
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	panel := doc.Find("#advice")
	var rows []string
	panel.Find("tr").Each(func(_ int, tr *goquery.Selection) {
		var cells []string
		tr.Find("th, td").Each(func(_ int, c *goquery.Selection) {
			cells = append(cells, strings.Join(strings.Fields(c.Text()), " "))
		})
		rows = append(rows, strings.Join(cells, " | "))
	})
	for _, want := range []string{
		"every holder | 8 | 500ms | 4s | 4s | 4s longer than the lease | 7.2s",
		"worker-1 | 6 | 500ms | 4s | 4s | 4s longer than the lease | 7.2s",
		"worker-2 | 2 | 400ms | 400ms | 400ms | 400ms | 720ms",
		"current | 2s | not shown by the backend | 500ms (the median gap) | 2.000",
		"suggested | 7.2s | 6s | 1.2s | 0.833",
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("advice panel lacks the row %q:\n%s", want, strings.Join(rows, "\n"))
		}
	}
	if flag := panel.Find("p.warn").Text(); !strings.HasPrefix(flag, "The lease (2s) is shorter than the longest stall (4s, ended at ") {
		t.Errorf("advice panel flags %q, want the lease shorter than the stall", flag)
	}
	if href, _ := panel.Find("a").Attr("href"); href != "/api/v1/locks/"+itoa(l.ID)+"/advice" {
		t.Errorf("advice panel links to %q, want the API's advice", href)
	}
}

func wantGaps(t *testing.T, what string, v any, count, p50, p90, p99, longest float64) {
	t.Helper()
	g, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s gaps = %#v, want an object", what, v)
	}
	wantNumber(t, what+" count", g["count"], count)
	wantNumber(t, what+" p50", g["p50_ms"], p50)
	wantNumber(t, what+" p90", g["p90_ms"], p90)
	wantNumber(t, what+" p99", g["p99_ms"], p99)
	wantNumber(t, what+" longest", g["max_ms"], longest)
}

// wantSettings checks settings in milliseconds; a negative deadline wants
// null (unknown).
func wantSettings(t *testing.T, what string, v any, lease, deadline, retry, writes float64) {
	t.Helper()
	s, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s = %#v, want an object", what, v)
	}
	wantNumber(t, what+" lease", s["lease_duration_ms"], lease)
	if deadline < 0 {
		wantNull(t, what+" renew deadline", s["renew_deadline_ms"])
	} else {
		wantNumber(t, what+" renew deadline", s["renew_deadline_ms"], deadline)
	}
	wantNumber(t, what+" retry period", s["retry_period_ms"], retry)
	wantNumber(t, what+" writes/s", s["writes_per_second"], writes)
}
