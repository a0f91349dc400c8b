package web

import (
	"html"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// page GETs an HTML page and checks its status and content type.
func (f *fixture) page(t *testing.T, target string, wantStatus int) string {
	t.Helper()
	res, body := f.do(t, http.MethodGet, target, nil)
	if res.StatusCode != wantStatus {
		t.Fatalf("GET %s = %d, want %d; body:\n%s", target, res.StatusCode, wantStatus, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET %s: Content-Type %q, want text/html", target, ct)
	}
	return string(body)
}

func wantContains(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

func wantNotContains(t *testing.T, what, body string, nots ...string) {
	t.Helper()
	for _, n := range nots {
		if strings.Contains(body, n) {
			t.Errorf("%s contains %q", what, n)
		}
	}
}

// escapedXSS is how the hostile name must appear in a page.
var escapedXSS = html.EscapeString(xss)

func TestLocksPage(t *testing.T) {
	f := newFixture(t)
	body := f.page(t, "/locks", http.StatusOK)
	wantContains(t, "/locks", body,
		"/locks/orders", "worker-2", ">42<", "prod-etcd",
		`href="/locks/`+itoa(f.orders.ID)+`"`,
		"near expiry", // 1s of a 10s lease left, margin 0.25
		"2025-03-01 10:10:00.123Z",
		escapedXSS,
		`href="/static/style.css"`,
	)
	wantNotContains(t, "/locks", body, xss, "kube-node-lease/node-1")

	t.Run("Heartbeats", func(t *testing.T) {
		for _, class := range []string{"heartbeat", "all"} {
			body := f.page(t, "/locks?class="+class, http.StatusOK)
			wantContains(t, "class="+class, body, "kube-node-lease/node-1")
		}
		body := f.page(t, "/locks?class=heartbeat", http.StatusOK)
		wantNotContains(t, "class=heartbeat", body, "/locks/orders")
	})
	t.Run("Filters", func(t *testing.T) {
		body := f.page(t, "/locks?q=orders&state=held&source=prod-etcd", http.StatusOK)
		wantContains(t, "filtered", body, "/locks/orders", `value="orders"`)
		wantNotContains(t, "filtered", body, escapedXSS)
	})
	t.Run("BadClass", func(t *testing.T) {
		body := f.page(t, "/locks?class=mutex", http.StatusBadRequest)
		wantContains(t, "bad class page", body, "class: must be")
	})
	t.Run("BadState", func(t *testing.T) {
		f.page(t, "/locks?state=%3Cscript%3E", http.StatusBadRequest)
	})
	t.Run("HostileQueryEchoed", func(t *testing.T) {
		body := f.page(t, "/locks?q=%22%3E%3Cscript%3Ealert(1)%3C/script%3E", http.StatusOK)
		wantNotContains(t, "echoed q", body, xss)
	})
}

func TestLockPage(t *testing.T) {
	f := newFixture(t)
	body := f.page(t, "/locks/"+itoa(f.orders.ID), http.StatusOK)
	wantContains(t, "orders page", body,
		"/locks/orders", "worker-2", "worker-1", ">42<", ">41<", "10s", // lease duration
		"Tenures", "(first seen)", "expired", "held",
		"Findings", "lease_expired", "stale_write", "orders-db rejected token 41", "warning", "info",
		"Events", "write_rejected", "orders-db", "694d7f1a2b3c4d5e", ">180<",
		"near expiry",
	)

	t.Run("Hostile", func(t *testing.T) {
		body := f.page(t, "/locks/"+itoa(f.hostile.ID), http.StatusOK)
		wantNotContains(t, "hostile page", body, xss)
		wantContains(t, "hostile page", body, escapedXSS, "unfenced_lock", "release")
		if n := strings.Count(body, escapedXSS); n < 4 {
			t.Errorf("escaped name/holder appears %d times, want it in title, heading, holder, events and detail", n)
		}
	})
	t.Run("PrunedRenewals", func(t *testing.T) {
		f := newFixture(t)
		f.pruneRenewals(t)
		body := f.page(t, "/locks/"+itoa(f.orders.ID), http.StatusOK)
		wantContains(t, "orders page", body, "(3 pruned, least margin 30%)")
	})
	t.Run("EventKind", func(t *testing.T) {
		body := f.page(t, "/locks/"+itoa(f.orders.ID)+"?kind=grant", http.StatusOK)
		wantContains(t, "kind=grant", body, `<option value="grant" selected>`)
		wantNotContains(t, "kind=grant", body, `badge kind-write_rejected`)
	})
	t.Run("Errors", func(t *testing.T) {
		wantContains(t, "missing lock", f.page(t, "/locks/999999", http.StatusNotFound), "999999")
		wantContains(t, "bad id", f.page(t, "/locks/abc", http.StatusBadRequest), "id: must be a positive integer")
		f.page(t, "/locks/"+itoa(f.orders.ID)+"?kind=nope", http.StatusBadRequest)
		f.page(t, "/locks/"+itoa(f.orders.ID)+"?from=nope", http.StatusBadRequest)
	})
}

func TestFindingsPage(t *testing.T) {
	f := newFixture(t)
	body := f.page(t, "/findings", http.StatusOK)
	wantContains(t, "/findings", body,
		"lease_expired", "stale_write", "unfenced_lock", "prod-etcd//locks/orders",
		"orders-db", "41, 42", "worker-1, worker-2", "1.5s",
		escapedXSS, "grant to "+escapedXSS+" carries no token",
	)
	wantNotContains(t, "/findings", body, xss)

	t.Run("Filter", func(t *testing.T) {
		body := f.page(t, "/findings?severity=info", http.StatusOK)
		wantContains(t, "severity=info", body, "stale_write")
		wantNotContains(t, "severity=info", body, "badge sev-warning")
		body = f.page(t, "/findings?kind=lease_expired&lock="+itoa(f.orders.ID), http.StatusOK)
		wantContains(t, "kind=lease_expired", body, "worker-1 stopped renewing")
		wantNotContains(t, "kind=lease_expired", body, "orders-db rejected")
	})
	t.Run("Errors", func(t *testing.T) {
		f.page(t, "/findings?severity=high", http.StatusBadRequest)
		f.page(t, "/findings?kind=gap", http.StatusBadRequest)
		f.page(t, "/findings?lock=999999", http.StatusNotFound)
	})
}

func TestSourcesPage(t *testing.T) {
	f := newFixture(t)
	body := f.page(t, "/sources", http.StatusOK)
	wantContains(t, "/sources", body, "prod-etcd", "cluster-a", "connection refused", "src-down", "src-up")
}

func TestUnknownPage(t *testing.T) {
	f := newFixture(t)
	wantContains(t, "unknown page", f.page(t, "/nope", http.StatusNotFound), "Not Found")
}

func TestStatic(t *testing.T) {
	f := newFixture(t)
	res, body := f.do(t, http.MethodGet, "/static/style.css", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") {
		t.Fatalf("GET /static/style.css = %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if !strings.Contains(string(body), "table.grid") {
		t.Fatalf("style.css body unexpected")
	}
	if res, _ := f.do(t, http.MethodGet, "/static/../server.go", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /static/../server.go = %d, want 404", res.StatusCode)
	}
}

func TestPagesLoadOnlyTheirOwnScripts(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"/", "/locks?class=all", "/locks/" + itoa(f.hostile.ID), "/findings", "/sources"} {
		res, body := f.do(t, http.MethodGet, p, nil)
		doc := htmlDoc(t, p, string(body))
		doc.Find("script").Each(func(_ int, s *goquery.Selection) {
			src, ok := s.Attr("src")
			if !ok || !strings.HasPrefix(src, "/static/") || strings.TrimSpace(s.Text()) != "" {
				t.Errorf("%s: script %q (src %q): want only empty scripts from /static/", p, s.Text(), src)
			}
		})
		if n := doc.Find(`script[src="/static/htmx.min.js"]`).Length(); n != 1 {
			t.Errorf("%s loads htmx %d times, want once", p, n)
		}
		if doc.Find("[style]").Length() > 0 || doc.Find("style").Length() > 0 {
			t.Errorf("%s has inline styles, which the CSP refuses", p)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "style-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", p, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q allows unsafe sources", p, csp)
		}
	}
}
