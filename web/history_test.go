package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/web/present"
)

// atQuery is the ?t= (or another name's) parameter of an instant.
func atQuery(name string, at time.Time) string {
	return url.Values{name: {at.Format(time.RFC3339Nano)}}.Encode()
}

// addBlindWindow records that prod-etcd's collector was blind from from
// to to.
func (f *fixture) addBlindWindow(t *testing.T, from, to time.Time) {
	t.Helper()
	if err := f.store.Apply(context.Background(), audit.Batch{Findings: []audit.Finding{{Lock: f.orders.Key(),
		Kind: audit.FindingBlindWindow, Severity: audit.SeverityWarning, At: from, Until: to, Summary: "watch lost"}}}); err != nil {
		t.Fatal(err)
	}
}

func TestAPILockAt(t *testing.T) {
	f := newFixture(t)
	f.addBlindWindow(t, t0.Add(20*time.Minute), t0.Add(25*time.Minute))
	at := func(d time.Duration) map[string]any {
		t.Helper()
		return f.getJSON(t, "/api/v1/locks/"+itoa(f.orders.ID)+"/at?"+atQuery("t", t0.Add(d)), http.StatusOK)
	}
	t.Run("Held", func(t *testing.T) {
		m := at(5 * time.Second)
		wantKeys(t, "moment", m, "lock_id", "at", "state", "holder", "token", "tenure", "previous", "free_since", "blind")
		if m["state"] != "held" || m["holder"] != "worker-1" {
			t.Errorf("at 5s: state %v, holder %v; want held by worker-1", m["state"], m["holder"])
		}
		wantNumber(t, "token", m["token"], 41)
		wantTime(t, "at", m["at"], t0.Add(5*time.Second))
		ten := m["tenure"].(map[string]any)
		wantNumber(t, "tenure.seq", ten["seq"], 1)
		wantTime(t, "tenure.ended_at", ten["ended_at"], t0.Add(13*time.Second))
		if ten["end"] != "expired" {
			t.Errorf("tenure.end = %v, want expired", ten["end"])
		}
		wantNull(t, "previous", m["previous"])
		wantNull(t, "blind", m["blind"])
	})
	t.Run("FreeSinceAnExpiry", func(t *testing.T) {
		m := at(time.Minute)
		if m["state"] != "free" || m["holder"] != "" {
			t.Errorf("at 1m: state %v, holder %q; want free, no holder", m["state"], m["holder"])
		}
		wantNull(t, "token", m["token"])
		wantNull(t, "tenure", m["tenure"])
		wantTime(t, "free_since", m["free_since"], t0.Add(13*time.Second))
		wantNumber(t, "previous.seq", m["previous"].(map[string]any)["seq"], 1)
	})
	t.Run("BlindSaysBlindAndStillGivesTheTenure", func(t *testing.T) {
		m := at(22 * time.Minute)
		if m["state"] != "blind" || m["holder"] != "worker-2" {
			t.Errorf("at 22m: state %v, holder %v; want blind, with worker-2's tenure as recorded", m["state"], m["holder"])
		}
		b := m["blind"].(map[string]any)
		wantTime(t, "blind.from", b["from"], t0.Add(20*time.Minute))
		wantTime(t, "blind.to", b["to"], t0.Add(25*time.Minute))
		wantNull(t, "tenure.end", m["tenure"].(map[string]any)["end"])
	})
	t.Run("BadInput", func(t *testing.T) {
		base := "/api/v1/locks/" + itoa(f.orders.ID) + "/at"
		wantError(t, f.getJSON(t, base, http.StatusBadRequest), "t: required")
		wantError(t, f.getJSON(t, base+"?t=yesterday", http.StatusBadRequest), "t: must be an RFC 3339 time")
		wantError(t, f.getJSON(t, "/api/v1/locks/999999/at?"+atQuery("t", t0), http.StatusNotFound), "not found")
		wantError(t, f.getJSON(t, "/api/v1/locks/x/at?"+atQuery("t", t0), http.StatusBadRequest), "id:")
	})
}

func TestAPIHolderTenures(t *testing.T) {
	f := newFixture(t)
	// A holder with a slash and a per cent sign, on a second lock.
	podKey := audit.LockKey{Source: "cluster-a", Name: "kube-system/scheduler"}
	pod := "kube-system/pod-1 100%"
	if err := f.store.Apply(context.Background(), audit.Batch{Tenures: []audit.Tenure{
		{Lock: podKey, Seq: 1, Holder: pod, Token: audit.Int64(3), GrantedAt: t0.Add(time.Minute), EndedAt: t0.Add(2 * time.Minute), End: audit.EndReleased},
		{Lock: podKey, Seq: 2, Holder: "worker-2", Token: audit.Int64(4), GrantedAt: t0.Add(3 * time.Minute), EndedAt: t0.Add(4 * time.Minute), End: audit.EndReleased},
	}}); err != nil {
		t.Fatal(err)
	}
	tenures := func(holder, query string) map[string]any {
		t.Helper()
		return f.getJSON(t, "/api/v1"+present.HolderURL(holder)+"/tenures"+query, http.StatusOK)
	}
	t.Run("NewestFirstWithFindings", func(t *testing.T) {
		m := tenures("worker-2", "")
		if m["holder"] != "worker-2" {
			t.Errorf("holder = %v", m["holder"])
		}
		wantNull(t, "next", m["next"])
		ts := list(t, m, "tenures")
		if len(ts) != 2 {
			t.Fatalf("tenures = %v, want 2", ts)
		}
		// Newest first: orders (granted at 10m, held), then the scheduler.
		wantNumber(t, "first lock_id", ts[0]["lock_id"], float64(f.orders.ID))
		if ts[0]["source"] != "prod-etcd" || ts[0]["lock_name"] != "/locks/orders" || ts[1]["lock_name"] != podKey.Name {
			t.Errorf("locks = %v/%v then %v", ts[0]["source"], ts[0]["lock_name"], ts[1]["lock_name"])
		}
		// The stale write at 11m falls in worker-2's tenure of orders.
		wantNumber(t, "orders findings", ts[0]["findings"], 1)
		wantNumber(t, "scheduler findings", ts[1]["findings"], 0)
		wantNull(t, "held end", ts[0]["end"])
		wantNumber(t, "token", ts[0]["token"], 42)
	})
	t.Run("Pages", func(t *testing.T) {
		first := tenures("worker-2", "?limit=1")
		next, ok := first["next"].(string)
		if !ok || len(list(t, first, "tenures")) != 1 {
			t.Fatalf("first page of one: %v", first)
		}
		rest := list(t, tenures("worker-2", "?limit=1&before="+url.QueryEscape(next)), "tenures")
		if len(rest) != 1 || rest[0]["lock_name"] != podKey.Name {
			t.Errorf("second page = %v, want the scheduler's tenure", rest)
		}
	})
	t.Run("EscapedHolders", func(t *testing.T) {
		for _, h := range []string{pod, xss} {
			m := tenures(h, "")
			if m["holder"] != h || len(list(t, m, "tenures")) != 1 {
				t.Errorf("holder %q: %v, want its one tenure", h, m)
			}
		}
		if got := list(t, tenures("nobody", ""), "tenures"); len(got) != 0 {
			t.Errorf("an unknown holder has tenures: %v", got)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		long := "/api/v1/holders/" + strings.Repeat("é", maxHolder+1) + "/tenures"
		wantError(t, f.getJSON(t, long, http.StatusBadRequest), "holder: must be at most 1024 characters")
		wantError(t, f.getJSON(t, "/api/v1/holders/%FF%FE/tenures", http.StatusBadRequest), "holder: must be valid UTF-8")
		wantError(t, f.getJSON(t, "/api/v1/holders/w/tenures?before=12", http.StatusBadRequest), "before:")
		wantError(t, f.getJSON(t, "/api/v1/holders/w/tenures?from=x", http.StatusBadRequest), "from:")
	})
}

func TestHolderPage(t *testing.T) {
	f := newFixture(t)
	doc := htmlDoc(t, "holder page", f.page(t, present.HolderURL("worker-2"), http.StatusOK))
	if h := text(doc.Find("h1")); h != "Holder worker-2" {
		t.Errorf("heading = %q", h)
	}
	rows := doc.Find("table.holder-tenures tbody tr")
	if rows.Length() != 1 {
		t.Fatalf("rows = %d, want worker-2's one tenure", rows.Length())
	}
	lockHref := rows.Find("td.name a").AttrOr("href", "")
	want := "/locks/" + itoa(f.orders.ID) + "?" + atQuery("at", t0.Add(10*time.Minute)) + "#at"
	if lockHref != want {
		t.Errorf("lock link = %q, want %q", lockHref, want)
	}
	findings := rows.Find(`a[href^="/findings?"]`)
	if text(findings) != "1" {
		t.Errorf("findings during the tenure = %q, want 1", text(findings))
	}
	fq, _ := url.Parse(findings.AttrOr("href", ""))
	if fq.Query().Get("lock") != itoa(f.orders.ID) || fq.Query().Get("from") != t0.Add(10*time.Minute).Format(time.RFC3339Nano) ||
		fq.Query().Get("to") != now.Format(time.RFC3339Nano) {
		t.Errorf("findings link = %s, want the lock's findings from the grant to now", fq)
	}
	// The findings page behind the link lists the one the count counted.
	if n := htmlDoc(t, "findings", f.page(t, fq.String(), http.StatusOK)).Find("table.findings tbody tr").Length(); n != 1 {
		t.Errorf("the findings link lists %d findings, want 1", n)
	}

	t.Run("HostileHolder", func(t *testing.T) {
		body := f.page(t, present.HolderURL(xss), http.StatusOK)
		noElementsFromData(t, "holder page of "+xss, body)
		if !strings.Contains(htmlDoc(t, "holder", body).Find("h1").Text(), xss) {
			t.Errorf("the holder page lacks the holder %q as text", xss)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		f.page(t, "/holders/"+strings.Repeat("x", maxHolder+1), http.StatusBadRequest)
		f.page(t, "/holders/%C3", http.StatusBadRequest)
		f.page(t, "/holders/w?before=nope", http.StatusBadRequest)
	})
	t.Run("HolderNamesLinkHere", func(t *testing.T) {
		lock := htmlDoc(t, "lock", f.page(t, "/locks/"+itoa(f.orders.ID)+"?"+windowQuery(t0.Add(-time.Minute), now), http.StatusOK))
		for _, sel := range []string{"dl.summary dd.holder a", "table.grid tbody td.holder a"} {
			if href := lock.Find(sel).AttrOr("href", ""); !strings.HasPrefix(href, "/holders/worker-") {
				t.Errorf("lock page %s links to %q, want a holder page", sel, href)
			}
		}
		review := htmlDoc(t, "review", f.page(t, "/review?"+windowQuery(t0.Add(-time.Minute), now)+"&lock="+itoa(f.orders.ID), http.StatusOK))
		for _, h := range []string{"worker-1", "worker-2"} {
			if review.Find(`td.holder a[href="/holders/`+h+`"]`).Length() == 0 {
				t.Errorf("the review's handover does not link %s to its page", h)
			}
		}
		locks := htmlDoc(t, "locks", f.page(t, "/locks?q=orders", http.StatusOK))
		if href := locks.Find("td.holder a").AttrOr("href", ""); href != "/holders/worker-2" {
			t.Errorf("locks list holder link = %q", href)
		}
	})
}

func TestLockPageAt(t *testing.T) {
	f := newFixture(t)
	lockPath := "/locks/" + itoa(f.orders.ID)
	t.Run("HeldHighlightsTheTenure", func(t *testing.T) {
		at := t0.Add(5 * time.Second)
		doc := htmlDoc(t, "lock at", f.page(t, lockPath+"?"+atQuery("at", at), http.StatusOK))
		banner := text(doc.Find("#at"))
		if !strings.Contains(banner, "At 2025-03-01 10:00:05.123Z: held by worker-1 with token 41 (tenure #1 first seen 2025-03-01 10:00:00.123Z, ended 2025-03-01 10:00:13.123Z, expired)") {
			t.Errorf("banner = %q", banner)
		}
		if href := doc.Find(`#at a[href^="/holders/"]`).AttrOr("href", ""); href != "/holders/worker-1" {
			t.Errorf("banner holder link = %q", href)
		}
		current := doc.Find("tr.at-current")
		if current.Length() != 1 || text(current.Find("td").First()) != "1" {
			t.Errorf("highlighted tenure rows = %d (%q), want tenure 1", current.Length(), text(current))
		}
		if n := doc.Find("svg.timeline a.tenure.at").Length(); n != 1 {
			t.Errorf("highlighted timeline bars = %d, want 1", n)
		}
		if doc.Find("svg.timeline line.at-line").Length() != 1 {
			t.Error("the timeline does not mark the instant")
		}
		// With no window given, the window is the instant ± an hour.
		from, to := doc.Find("div.window time").First().AttrOr("datetime", ""), doc.Find("div.window time").Eq(1).AttrOr("datetime", "")
		if from != at.Add(-time.Hour).Format(time.RFC3339Nano) || to != at.Add(time.Hour).Format(time.RFC3339Nano) {
			t.Errorf("window %s → %s, want the instant ± 1h", from, to)
		}
		// Window links keep the instant.
		if href := doc.Find(`nav.window-nav a[title^="earlier"]`).AttrOr("href", ""); !strings.Contains(href, "at=") {
			t.Errorf("the earlier link %q drops at=", href)
		}
	})
	t.Run("Free", func(t *testing.T) {
		doc := htmlDoc(t, "lock at", f.page(t, lockPath+"?"+atQuery("at", t0.Add(time.Minute)), http.StatusOK))
		banner := text(doc.Find("#at"))
		if !strings.Contains(banner, "nobody held it (expired 2025-03-01 10:00:13.123Z: the lease of worker-1 with token 41 ran out)") {
			t.Errorf("banner = %q", banner)
		}
		if doc.Find("tr.at-current").Length() != 0 || doc.Find("svg.timeline a.tenure.at").Length() != 0 {
			t.Error("a tenure is highlighted while nobody held the lock")
		}
	})
	t.Run("Blind", func(t *testing.T) {
		f.addBlindWindow(t, t0.Add(20*time.Minute), t0.Add(25*time.Minute))
		doc := htmlDoc(t, "lock at", f.page(t, lockPath+"?"+atQuery("at", t0.Add(22*time.Minute)), http.StatusOK))
		banner := text(doc.Find("#at"))
		if !strings.Contains(banner, "the collector was blind (blind window from 2025-03-01 10:20:00.123Z to 2025-03-01 10:25:00.123Z)") ||
			!strings.Contains(banner, "as recorded, held by worker-2") {
			t.Errorf("banner = %q", banner)
		}
	})
	t.Run("NoAtNoBanner", func(t *testing.T) {
		if htmlDoc(t, "lock", f.page(t, lockPath, http.StatusOK)).Find("#at").Length() != 0 {
			t.Error("a banner without at=")
		}
	})
	t.Run("BadAt", func(t *testing.T) {
		f.page(t, lockPath+"?at=soon", http.StatusBadRequest)
	})
}
