package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// The incident the review and browser tests share, recorded through the real
// recorder into a real SQLite store.
const (
	incidentSource = "demo-etcd"
	// incidentHostile is a holder as hostile as a backend can make it.
	incidentHostile = "worker-9 <img src=x onerror=alert(1)> | [x](javascript:alert(1)) `"
)

var (
	incidentOrders   = audit.LockKey{Source: incidentSource, Name: "/locks/orders"}
	incidentBilling  = audit.LockKey{Source: incidentSource, Name: "/locks/billing"}
	incidentElection = audit.LockKey{Source: incidentSource, Name: "/election/scheduler"}
	incidentSources  = map[string]audit.SourceKind{incidentSource: audit.KindEtcd, "cluster-a": audit.KindKubernetes}
)

// incident is a store with a realistic incident starting at base, and a
// recorder that keeps taking writes.
type incident struct {
	store *sqlite.Store
	rec   *audit.Recorder
	base  time.Time
}

func (in *incident) at(d time.Duration) time.Time { return in.base.Add(d) }

func (in *incident) lock(t *testing.T, key audit.LockKey) audit.Lock {
	t.Helper()
	l, err := in.store.LockByKey(context.Background(), key)
	if err != nil {
		t.Fatalf("lock %s: %v", key, err)
	}
	return l
}

// recordIncident plays, from base:
//
//   - /locks/orders: worker-1 (token 41, lease 2 s) renews once and stops;
//     its lease expires; 1.4 s later worker-2 takes token 42; the ledger
//     learns it 180 ms later; worker-1 wakes and writes with token 41: the
//     ledger rejects it (stale_write), the cache accepts it (unfenced_write).
//     worker-2 releases; a hostile-named holder takes token 43.
//   - /locks/billing: worker-4 (token 50) is superseded by worker-5 (token
//     51) while its lease is valid (overlap).
//   - /election/scheduler: worker-6 leads (token 60).
//   - cluster-a's kube-node-lease/node-1: a heartbeat.
func recordIncident(t *testing.T, base time.Time) *incident {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	rec := audit.NewRecorder(store, audit.TrackerConfig{SourceKinds: incidentSources}, slog.New(slog.DiscardHandler))
	if err := rec.Start(ctx); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(rec.Close)
	in := &incident{store: store, rec: rec, base: base}

	observe := func(key audit.LockKey, kind audit.EventKind, d time.Duration, holder string, token int64, lease time.Duration) {
		t.Helper()
		ob := audit.Observation{Lock: key, Kind: kind, At: in.at(d), Holder: holder, Token: audit.Int64(token), LeaseDuration: lease}
		if err := rec.Record(ctx, audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}); err != nil {
			t.Fatalf("observe %s %s: %v", key, kind, err)
		}
	}
	write := func(key audit.LockKey, d time.Duration, resource, holder string, token int64, outcome audit.WriteOutcome) {
		t.Helper()
		w := audit.WriteReport{Source: key.Source, Lock: key.Name, Resource: resource, Token: audit.Int64(token),
			Outcome: outcome, Holder: holder, At: in.at(d), RequestID: fmt.Sprintf("%s-%d", resource, d)}
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	ms := time.Millisecond

	observe(incidentElection, audit.EventGrant, 500*ms, "worker-6", 60, 5*time.Second)
	observe(incidentOrders, audit.EventGrant, 0, "worker-1", 41, 2*time.Second)
	write(incidentOrders, 100*ms, "ledger", "worker-1", 41, audit.WriteAccepted)
	write(incidentOrders, 150*ms, "cache", "worker-1", 41, audit.WriteAccepted)
	observe(incidentOrders, audit.EventRenew, time.Second, "worker-1", 41, 2*time.Second)
	observe(incidentBilling, audit.EventGrant, time.Second, "worker-4", 50, 5*time.Second)
	write(incidentBilling, 1200*ms, "ledger", "worker-4", 50, audit.WriteAccepted)
	observe(incidentOrders, audit.EventExpire, 3*time.Second, "worker-1", 41, 0)
	observe(incidentOrders, audit.EventGrant, 4400*ms, "worker-2", 42, 5*time.Second)
	write(incidentOrders, 4580*ms, "ledger", "worker-2", 42, audit.WriteAccepted)
	observe(incidentBilling, audit.EventGrant, 5200*ms, "worker-5", 51, 5*time.Second)
	write(incidentBilling, 5300*ms, "ledger", "worker-5", 51, audit.WriteAccepted)
	write(incidentOrders, 6100*ms, "ledger", "worker-1", 41, audit.WriteRejected)
	write(incidentOrders, 6150*ms, "cache", "worker-1", 41, audit.WriteAccepted)
	observe(incidentOrders, audit.EventRelease, 10*time.Second, "worker-2", 42, 0)
	observe(incidentOrders, audit.EventGrant, 10*time.Second, incidentHostile, 43, 5*time.Second)
	write(incidentOrders, 10100*ms, "ledger", incidentHostile, 43, audit.WriteAccepted)

	hb := audit.Observation{Lock: audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-1"}, Kind: audit.EventGrant,
		At: in.at(time.Second), Holder: "node-1", LeaseDuration: 40 * time.Second, Class: audit.ClassHeartbeat}
	if err := rec.Record(ctx, audit.Input{Source: "cluster-a", Kind: audit.KindKubernetes, Observations: []audit.Observation{hb}}); err != nil {
		t.Fatal(err)
	}
	return in
}

// reviewServer is a Server over the incident whose clock reads now.
func reviewServer(t *testing.T, in *incident, now time.Time) http.Handler {
	t.Helper()
	srv, err := New(Config{
		Store: in.rec.Fresh(in.store), Writes: in.rec, KnownSources: incidentSources,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv.Handler()
}

// get serves one GET and returns the response and its body.
func get(t *testing.T, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, target, nil))
	res := rr.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func getOK(t *testing.T, h http.Handler, target, contentType string) (*http.Response, string) {
	t.Helper()
	res, body := get(t, h, target)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, want 200; body:\n%s", target, res.StatusCode, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, contentType) {
		t.Fatalf("GET %s: Content-Type %q, want %s", target, ct, contentType)
	}
	return res, body
}

func parseHTML(t *testing.T, body string) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse page: %v", err)
	}
	return doc
}

var reviewBase = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

func windowQuery(from, to time.Time) string {
	v := url.Values{}
	v.Set("from", from.Format(time.RFC3339Nano))
	v.Set("to", to.Format(time.RFC3339Nano))
	return v.Encode()
}

func TestReviewPage(t *testing.T) {
	in := recordIncident(t, reviewBase)
	h := reviewServer(t, in, reviewBase.Add(time.Hour))
	orders := in.lock(t, incidentOrders)
	q := windowQuery(reviewBase.Add(-time.Minute), reviewBase.Add(time.Minute))
	_, body := getOK(t, h, "/review?"+q, "text/html")
	doc := parseHTML(t, body)

	if got := doc.Find("h1").First().Text(); got != "Incident review" {
		t.Errorf("h1 = %q, want Incident review", got)
	}
	form := doc.Find(`form[name="review"]`)
	for _, name := range []string{"from", "to", "source", "lock"} {
		if form.Find(`input[name="`+name+`"]`).Length() != 1 {
			t.Errorf("review form lacks input %q", name)
		}
	}
	if v, _ := form.Find(`input[name="from"]`).Attr("value"); v != "2026-03-14T09:59:00Z" {
		t.Errorf("from input = %q, want the window's start", v)
	}

	articles := doc.Find("article.handover")
	if articles.Length() != 3 { // orders 41→42, 42→43; billing 50→51
		t.Fatalf("%d handovers on the page, want 3", articles.Length())
	}
	narrative := doc.Find("article.handover p.narrative").FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.Contains(s.Text(), "(token 41)")
	}).Text()
	for _, want := range []string{
		"worker-1 (token 41) stopped renewing; its lease expired 2.0 s after the last renewal",
		"1.4 s later worker-2 took the lock with token 42",
		"The ledger learned token 42 180 ms after the grant",
		"was rejected by the ledger: fencing held",
		"was accepted by the cache: fencing did not protect it",
	} {
		if !strings.Contains(narrative, want) {
			t.Errorf("narrative of 41 → 42 lacks %q:\n%s", want, narrative)
		}
	}
	if doc.Find(".badge.sev-critical:contains('overlap')").Length() == 0 {
		t.Errorf("billing's overlap is not marked")
	}
	if doc.Find("td:contains('unfenced write accepted')").Length() == 0 || doc.Find("td:contains('stale write rejected')").Length() == 0 {
		t.Errorf("the late writes are not marked stale and unfenced")
	}

	// Each lock's safety verdict over the window, linked to its panel:
	// orders' cache accepted a late write.
	badge := doc.Find(`section.review-lock h2 a.verdict-badge[href^="/locks/` + strconv.FormatInt(orders.ID, 10) + `?"]`)
	if got := strings.TrimSpace(badge.First().Text()); got != "✖ unsafe" {
		t.Errorf("orders' verdict badge = %q, want ✖ unsafe", got)
	}
	if href, _ := badge.Attr("href"); !strings.HasSuffix(href, "#verdict") {
		t.Errorf("orders' verdict links to %q, want its panel", href)
	}

	// Links: each lock's timeline over the window, each handover's timeline
	// around it, and the exports with the same window.
	wantHref := "/locks/" + strconv.FormatInt(orders.ID, 10) + "?" + q
	if doc.Find(`a[href="`+wantHref+`"]`).Length() == 0 {
		t.Errorf("no link to the orders timeline %s", wantHref)
	}
	if doc.Find(`article.handover a[href^="/locks/`+strconv.FormatInt(orders.ID, 10)+`?from="]`).Length() != 2 {
		t.Errorf("orders' handovers do not link to their timeline")
	}
	for _, path := range []string{"/review.md?", "/review.json?"} {
		href, ok := doc.Find(`a[href^="` + path + `"]`).Attr("href")
		if !ok || !strings.Contains(href, q) {
			t.Errorf("export link %s = %q, want the page's window %s", path, href, q)
		}
	}

	// The hostile holder is text, never markup.
	if !strings.Contains(doc.Find("article.handover").Text(), incidentHostile) {
		t.Errorf("hostile holder not shown as text")
	}
	if doc.Find("img").Length() > 0 || strings.Contains(body, "<img") || strings.Contains(body, `href="javascript`) {
		t.Errorf("hostile holder became markup")
	}
}

func TestReviewDefaultWindowIsTheLastHour(t *testing.T) {
	in := recordIncident(t, reviewBase)
	h := reviewServer(t, in, reviewBase.Add(30*time.Minute))
	_, body := getOK(t, h, "/review", "text/html")
	doc := parseHTML(t, body)
	if v, _ := doc.Find(`input[name="from"]`).Attr("value"); v != "2026-03-14T09:30:00Z" {
		t.Errorf("default from = %q, want an hour before now", v)
	}
	if v, _ := doc.Find(`input[name="to"]`).Attr("value"); v != "2026-03-14T10:30:00Z" {
		t.Errorf("default to = %q, want now", v)
	}
	if n := doc.Find("article.handover").Length(); n != 3 {
		t.Errorf("%d handovers in the last hour, want 3", n)
	}

	// An hour later the incident is out of the default window.
	h = reviewServer(t, in, reviewBase.Add(2*time.Hour))
	_, body = getOK(t, h, "/review", "text/html")
	if !strings.Contains(body, "No handovers in this window.") {
		t.Errorf("empty window does not say so")
	}
}

func TestReviewFilters(t *testing.T) {
	in := recordIncident(t, reviewBase)
	h := reviewServer(t, in, reviewBase.Add(time.Hour))
	orders := in.lock(t, incidentOrders)
	win := windowQuery(reviewBase.Add(-time.Minute), reviewBase.Add(time.Minute))

	count := func(target string) int {
		t.Helper()
		_, body := getOK(t, h, target, "text/html")
		return parseHTML(t, body).Find("article.handover").Length()
	}
	tests := []struct {
		name  string
		query string
		want  int
	}{
		{"LockByID", "lock=" + strconv.FormatInt(orders.ID, 10), 2},
		{"LockByKey", "lock=" + url.QueryEscape(incidentOrders.String()), 2},
		{"TwoLocks", "lock=" + url.QueryEscape(incidentOrders.String()) + "&lock=" + url.QueryEscape(incidentBilling.String()), 3},
		{"Source", "source=" + incidentSource, 3},
		{"OtherSource", "source=cluster-a", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := count("/review?" + win + "&" + tt.query); got != tt.want {
				t.Errorf("%d handovers, want %d", got, tt.want)
			}
		})
	}

	errs := []struct {
		name   string
		query  string
		status int
		msg    string
	}{
		{"MissingLock", win + "&lock=" + url.QueryEscape("demo-etcd/nope"), http.StatusNotFound, "demo-etcd/nope"},
		{"BadLock", win + "&lock=orders", http.StatusBadRequest, "SOURCE/NAME"},
		{"BadFrom", "from=yesterday", http.StatusBadRequest, "from: must be an RFC 3339 time"},
		{"Backwards", windowQuery(reviewBase, reviewBase.Add(-time.Minute)), http.StatusBadRequest, "to: must not be before from"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			res, body := get(t, h, "/review?"+tt.query)
			if res.StatusCode != tt.status || !strings.Contains(body, tt.msg) {
				t.Errorf("GET /review?%s = %d, want %d mentioning %q; body:\n%s", tt.query, res.StatusCode, tt.status, tt.msg, body)
			}
		})
	}
}

func TestReviewExports(t *testing.T) {
	in := recordIncident(t, reviewBase)
	h := reviewServer(t, in, reviewBase.Add(time.Hour))
	win := review.Window{From: reviewBase.Add(-time.Minute), To: reviewBase.Add(time.Minute)}
	q := windowQuery(win.From, win.To) + "&lock=" + url.QueryEscape(incidentOrders.String())

	// The exports are the same code as `leasewatch report`: Load, then write.
	r, err := review.Load(context.Background(), in.store, review.Query{Window: win, Locks: []string{incidentOrders.String()},
		Options: review.Options{MaxHandovers: reviewMaxHandovers}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Markdown", func(t *testing.T) {
		res, body := getOK(t, h, "/review.md?"+q, "text/markdown; charset=utf-8")
		if cd := res.Header.Get("Content-Disposition"); cd != `attachment; filename="leasewatch-review-20260314T095900Z.md"` {
			t.Errorf("Content-Disposition = %q", cd)
		}
		var want bytes.Buffer
		if err := review.WriteMarkdown(&want, r); err != nil {
			t.Fatal(err)
		}
		if body != want.String() {
			t.Errorf("Markdown export differs from the report:\n%s\n--- want\n%s", body, want.String())
		}
		if strings.Contains(body, "<img") || !strings.Contains(body, "&lt;img") {
			t.Errorf("hostile holder not escaped in Markdown")
		}
	})
	t.Run("JSON", func(t *testing.T) {
		res, body := getOK(t, h, "/review.json?"+q, "application/json")
		if cd := res.Header.Get("Content-Disposition"); cd != `attachment; filename="leasewatch-review-20260314T095900Z.json"` {
			t.Errorf("Content-Disposition = %q", cd)
		}
		var doc struct {
			From      string `json:"from"`
			Handovers int    `json:"handovers"`
			Locks     []struct {
				Name      string `json:"name"`
				Handovers []struct {
					Previous struct {
						Token *int64 `json:"token"`
					} `json:"previous"`
					GapMS  *int64 `json:"gap_ms"`
					Writes []struct {
						Verdict *string `json:"verdict"`
					} `json:"writes"`
					Narrative string `json:"narrative"`
				} `json:"handovers"`
			} `json:"locks"`
		}
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("decode: %v\n%s", err, body)
		}
		if doc.From != "2026-03-14T09:59:00Z" || doc.Handovers != 2 || len(doc.Locks) != 1 || doc.Locks[0].Name != "/locks/orders" {
			t.Fatalf("report = %+v, want orders' 2 handovers from 09:59", doc)
		}
		h0 := doc.Locks[0].Handovers[0]
		if *h0.Previous.Token != 41 || *h0.GapMS != 1400 || h0.Narrative == "" {
			t.Errorf("first handover = %+v, want token 41, gap 1400 ms and a narrative", h0)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		res, body := get(t, h, "/review.json?lock=nope%2Fx")
		if res.StatusCode != http.StatusNotFound || !strings.Contains(body, `"error":"lock nope/x not found"`) {
			t.Errorf("missing lock as JSON = %d %s", res.StatusCode, body)
		}
		res, body = get(t, h, "/review.md?from=x")
		if res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, "from: ") {
			t.Errorf("bad from as Markdown = %d %q", res.StatusCode, body)
		}
	})
}

func TestReviewCapsLocks(t *testing.T) {
	in := recordIncident(t, reviewBase)
	ctx := context.Background()
	// Enough other locks changing hands in the window to pass the cap.
	for i := range reviewMaxLocks {
		key := audit.LockKey{Source: incidentSource, Name: fmt.Sprintf("/locks/shard-%03d", i)}
		obs := []audit.Observation{{Lock: key, Kind: audit.EventGrant, At: reviewBase.Add(time.Duration(i) * time.Millisecond), Holder: "a", Token: audit.Int64(int64(1000 + 2*i))}}
		if err := in.rec.Record(ctx, audit.Input{Source: incidentSource, Kind: audit.KindEtcd, Observations: obs}); err != nil {
			t.Fatal(err)
		}
	}
	h := reviewServer(t, in, reviewBase.Add(time.Hour))
	q := windowQuery(reviewBase.Add(-time.Minute), reviewBase.Add(time.Minute))

	_, body := getOK(t, h, "/review?"+q, "text/html")
	doc := parseHTML(t, body)
	msg := doc.Find(`[role="alert"]`).Text()
	if !strings.Contains(msg, fmt.Sprintf("at most %d", reviewMaxLocks)) || !strings.Contains(msg, "pick a source or name the locks") {
		t.Errorf("too many locks: message %q", msg)
	}
	if doc.Find(`form[name="review"]`).Length() != 1 {
		t.Errorf("the page lost its form")
	}
	res, body := get(t, h, "/review.json?"+q)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "at most") {
		t.Errorf("too many locks as JSON = %d %s", res.StatusCode, body)
	}
	// Naming the lock narrows it again.
	_, body = getOK(t, h, "/review?"+q+"&lock="+url.QueryEscape(incidentOrders.String()), "text/html")
	if n := parseHTML(t, body).Find("article.handover").Length(); n != 2 {
		t.Errorf("%d handovers of the named lock, want 2", n)
	}
}

// A review export answers in its own format when the store cannot be read
// (an outage): JSON for .json and text for .md, never the HTML error page.
func TestReviewExportErrorsDuringStoreOutage(t *testing.T) {
	f := newFixture(t)
	base := serveReal(t, f.server)
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/review.json": "application/json", "/review.md": "text/plain"} {
		res, body := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil)
		if res.StatusCode < http.StatusInternalServerError {
			t.Errorf("GET %s with the store closed: status %d, want a 5xx", path, res.StatusCode)
		}
		if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, want) {
			t.Errorf("GET %s with the store closed: Content-Type %q, want %s (%.200s)", path, got, want, body)
		}
		if strings.Contains(body, "<html") || strings.Contains(body, "<!DOCTYPE") {
			t.Errorf("GET %s with the store closed answered a page: %.200s", path, body)
		}
	}
}
