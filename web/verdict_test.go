package web

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/web/present"
)

func TestAPIVerdict(t *testing.T) {
	f := newFixture(t)
	path := "/api/v1/locks/" + itoa(f.orders.ID) + "/verdict"

	// The orders lock's whole history: two fenced grants, and the one late
	// write orders-db rejected.
	v := f.getJSON(t, path, http.StatusOK)
	wantKeys(t, "verdict", v, "lock_id", "from", "to", "purpose", "verdict", "reasons", "grants", "tokened_grants",
		"token_share", "resources", "overlaps", "overlap_ms", "blind_ms", "blind_share", "longest_gap_ms",
		"longest_gap_after_seq", "notes")
	if v["verdict"] != "fenced" || v["purpose"] != "correctness" {
		t.Errorf("verdict %v for %v, want fenced for correctness", v["verdict"], v["purpose"])
	}
	wantNumber(t, "grants", v["grants"], 2)
	wantNumber(t, "token share", v["token_share"], 1)
	wantTime(t, "from", v["from"], t0)
	wantTime(t, "to", v["to"], now)
	reasons := list(t, v, "reasons")
	if len(reasons) != 2 || reasons[0]["code"] != "all_fenced" || reasons[0]["decides"] != true || reasons[1]["code"] != "stale_stopped" {
		t.Fatalf("reasons = %v, want all_fenced, then stale_stopped", reasons)
	}
	wantKeys(t, "reason", reasons[1], "code", "decides", "text", "findings", "count", "resource")
	// The API's verdict lists the stale writes' findings, which the pages
	// only count.
	if reasons[1]["resource"] != "orders-db" || len(reasons[1]["findings"].([]any)) != 1 {
		t.Errorf("stale_stopped = %v, want orders-db with its finding", reasons[1])
	}
	wantNumber(t, "stale_stopped count", reasons[1]["count"], 1)
	resources := list(t, v, "resources")
	if len(resources) != 1 {
		t.Fatalf("resources = %v, want orders-db alone", resources)
	}
	wantKeys(t, "resource", resources[0], "resource", "accepted", "rejected", "untokened", "stale_stopped",
		"unfenced_landed", "max_exposure_ms", "total_exposure_ms", "last_report_at")
	wantNumber(t, "rejected", resources[0]["rejected"], 1)
	wantNumber(t, "stale stopped", resources[0]["stale_stopped"], 1)
	wantTime(t, "last report", resources[0]["last_report_at"], t0.Add(11*time.Minute))
	// worker-1's lease expired at 13 s; worker-2 was granted at 10 min.
	wantNumber(t, "longest gap", v["longest_gap_ms"], float64((10*time.Minute - 13*time.Second).Milliseconds()))
	wantNumber(t, "gap after", v["longest_gap_after_seq"], 1)

	// Before the late write, nobody had reported one.
	v = f.getJSON(t, path+"?from="+url.QueryEscape(t0.Format(time.RFC3339))+"&to="+url.QueryEscape(t0.Add(time.Minute).Format(time.RFC3339)), http.StatusOK)
	if v["verdict"] != "unverified" || list(t, v, "reasons")[0]["code"] != "no_writes" {
		t.Errorf("first minute: %v, want unverified for no writes", v)
	}
	// A grant without a token is a hint.
	if v := f.getJSON(t, "/api/v1/locks/"+itoa(f.hostile.ID)+"/verdict", http.StatusOK); v["verdict"] != "unverified" || list(t, v, "reasons")[0]["code"] != "no_tokens" {
		t.Errorf("hostile lock: %v, want unverified for no tokens", v)
	}

	for _, c := range []struct{ query, field string }{
		{"?from=yesterday", "from"},
		{"?to=soon", "to"},
		{"?from=" + url.QueryEscape(t0.Format(time.RFC3339)) + "&to=" + url.QueryEscape(t0.Add(-time.Hour).Format(time.RFC3339)), "to"},
	} {
		wantError(t, f.getJSON(t, path+c.query, http.StatusBadRequest), c.field)
	}
	wantError(t, f.getJSON(t, "/api/v1/locks/999999/verdict", http.StatusNotFound), "999999")
}

// A lock declared for efficiency says so, whatever its writes show.
func TestAPIVerdictPurpose(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Purposes = verdict.Purposes{{Selector: audit.Selector{Source: "prod-etcd", Lock: "/locks/*"}, Purpose: verdict.PurposeEfficiency}}
	})
	v := f.getJSON(t, "/api/v1/locks/"+itoa(f.orders.ID)+"/verdict", http.StatusOK)
	if v["verdict"] != "efficiency" || v["purpose"] != "efficiency" {
		t.Errorf("verdict %v for %v, want efficiency", v["verdict"], v["purpose"])
	}
}

// The lock page opens with the verdict of its window, its reasons linked to
// their findings, and links to the last 24 hours and the whole history.
func TestLockPageVerdictPanel(t *testing.T) {
	f := newFixture(t)
	base := "/locks/" + itoa(f.orders.ID)
	// In its first minute, before the late write at 11 min, nobody had
	// reported a write.
	body := f.page(t, base+"?from="+url.QueryEscape(t0.Format(time.RFC3339))+"&to="+url.QueryEscape(t0.Add(time.Minute).Format(time.RFC3339)), http.StatusOK)
	wantContains(t, "orders page", body, `id="verdict"`, `verdict-unverified`, "in this window, for correctness",
		"no resource reported a write")

	body = f.page(t, base+"?verdict=all", http.StatusOK)
	wantContains(t, "whole history", body, `verdict-fenced`, "over the whole history",
		"every reported write (1) carried the newest token or was rejected",
		"orders-db rejected 1 write from an ended or superseded tenure: fencing stopped them",
		"kind=stale_write", "resource=orders-db", "the finding →",
		"Grants with a token", "2 of 2 (100%)", "Resources that reported writes", "orders-db")
	wantContains(t, "scope links", body, `<strong aria-current="true">whole history</strong>`, "verdict=24h")

	body = f.page(t, "/locks/"+itoa(f.hostile.ID)+"?verdict=all", http.StatusOK)
	wantContains(t, "hostile page", body, "verdict-unverified", "a hint, not a guarantee")
	wantNotContains(t, "hostile page", body, xss)

	wantContains(t, "bad scope", f.page(t, base+"?verdict=week", http.StatusBadRequest), "verdict: want 24h or all")
}

// TestLockPageVerdictJudgedOncePerRound: the lock page judges a lock's
// verdict at most once per query.VerdictFresh, however often it is asked for, and
// says when it was judged; past that it judges again and sees what came
// meanwhile. htmx's refresh of the live region gets the region alone, with
// its verdict.
func TestLockPageVerdictJudgedOncePerRound(t *testing.T) {
	clock := now
	f := newFixture(t, func(c *Config) { c.Now = func() time.Time { return clock } })
	base := "/locks/" + itoa(f.orders.ID) + "?verdict=all"
	judged := func(at time.Time) string { return `Judged <time datetime="` + at.UTC().Format(time.RFC3339Nano) + `"` }
	before := `<td class="holder">orders-db</td><td>0</td><td>1</td>` // accepted 0, rejected 1
	after := `<td class="holder">orders-db</td><td>1</td><td>1</td>`
	wantContains(t, "first", f.page(t, base, http.StatusOK), before, judged(now))

	res, _ := f.post(t, `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,"outcome":"accepted","request_id":"w-1"}`, "Bearer "+ingestToken)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST a write: %d", res.StatusCode)
	}
	clock = now.Add(query.VerdictFresh - time.Second)
	body := f.page(t, base, http.StatusOK)
	wantContains(t, "within the round", body, before, judged(now))
	wantNotContains(t, "within the round", body, after)

	clock = now.Add(query.VerdictFresh)
	wantContains(t, "next round", f.page(t, base, http.StatusOK), after, judged(clock))

	_, live := f.do(t, http.MethodGet, base+"&window=1h", nil, "HX-Request", "true", "HX-Target", present.LockLiveID)
	wantContains(t, "live refresh", string(live), `id="lock-live"`, `id="verdict"`, `id="timeline"`)
	wantNotContains(t, "live refresh", string(live), "<html", "Leadership health", `id="events"`)
	wantContains(t, "whole page", f.page(t, base+"&window=1h", http.StatusOK), "<html", `id="lock-live"`, `id="events"`)
}
