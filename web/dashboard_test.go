package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// htmlDoc parses a page for goquery.
func htmlDoc(t *testing.T, what, body string) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: parse: %v", what, err)
	}
	return doc
}

// text returns the whitespace-normalised text of the selection.
func text(s *goquery.Selection) string { return strings.Join(strings.Fields(s.Text()), " ") }

func TestOverviewPage(t *testing.T) {
	f := newFixture(t)
	doc := htmlDoc(t, "/", f.page(t, "/", http.StatusOK))

	tiles := text(doc.Find("ul.tiles"))
	for _, want := range []string{"2 locks", "1 held", "1 free", "1 near expiry", "1 heartbeats", "1 sources down"} {
		if !strings.Contains(tiles, want) {
			t.Errorf("tiles %q lack %q", tiles, want)
		}
	}
	near := doc.Find(`section[aria-labelledby="h-near"] tbody tr`)
	if near.Length() != 1 || !strings.Contains(text(near), "/locks/orders") || !strings.Contains(text(near), "near expiry") {
		t.Errorf("near expiry rows = %q, want orders with its warning", text(near))
	}
	if held := doc.Find(`section[aria-labelledby="h-held"] tbody tr`); held.Length() != 1 || !strings.Contains(text(held), "worker-2") {
		t.Errorf("held rows = %q, want orders held by worker-2", text(held))
	}
	// The held lock's last hour: worker-1's tenure (expired at t0+13s) and
	// worker-2's since t0+10m, a handover between, and its lease_expired
	// warning; its stale_write info is left out.
	strip := doc.Find(`section[aria-labelledby="h-held"] tbody tr svg.strip`)
	if strip.Find("rect.strip-seg").Length() != 2 || strip.Find("line.strip-handover").Length() != 1 ||
		strip.Find("path.strip-expired").Length() != 1 || !strings.Contains(strip.AttrOr("aria-label", ""), "1 handover, 1 expiry") {
		t.Errorf("held lock's strip: %d tenures, %d handovers, %d expiries, label %q; want 2, 1, 1 and their counts",
			strip.Find("rect.strip-seg").Length(), strip.Find("line.strip-handover").Length(),
			strip.Find("path.strip-expired").Length(), strip.AttrOr("aria-label", ""))
	}
	if w, all := strip.Find("circle.strip-finding.warning").Length(), strip.Find("circle").Length(); w != 1 || all != 1 {
		t.Errorf("held lock's strip marks %d warnings of %d findings, want its one warning alone", w, all)
	}
	// The fixture's findings are older than a day before now? No: they are
	// within the hour, so the day's counts show them.
	sevs := text(doc.Find("ul.sevs"))
	if !strings.Contains(sevs, "0 critical") || !strings.Contains(sevs, "2 warning") || !strings.Contains(sevs, "1 info") {
		t.Errorf("severity counts %q", sevs)
	}
	if n := doc.Find(`section[aria-labelledby="h-findings"] tbody tr`).Length(); n != 3 {
		t.Errorf("recent findings rows = %d, want 3", n)
	}
	src := text(doc.Find(`section[aria-labelledby="h-sources"] tbody`))
	if !strings.Contains(src, "cluster-a") || !strings.Contains(src, "connection refused") {
		t.Errorf("sources %q", src)
	}

	t.Run("LiveRegion", func(t *testing.T) {
		live := doc.Find("#overview")
		if live.AttrOr("hx-get", "") != "/" || live.AttrOr("hx-select", "") != "#overview" ||
			live.AttrOr("hx-trigger", "") != "every 5s" || live.AttrOr("hx-swap", "") != "outerHTML" {
			t.Errorf("live region attributes: %v", live.Nodes[0].Attr)
		}
		if href := doc.Find("p.refresh a").AttrOr("href", ""); href != "/" {
			t.Errorf("refresh link = %q, want the page itself (the fallback without JavaScript)", href)
		}
	})
}

func TestOverviewEmpty(t *testing.T) {
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "empty.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv, err := New(Config{Store: audit.Settled(store), RenewMarginRatio: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: store, handler: srv.Handler()}
	for _, p := range []string{"/", "/locks", "/findings", "/sources"} {
		doc := htmlDoc(t, p, f.page(t, p, http.StatusOK))
		if doc.Find("p.empty").Length() == 0 {
			t.Errorf("%s on an empty database shows no empty state", p)
		}
	}
	doc := htmlDoc(t, "/", f.page(t, "/", http.StatusOK))
	for _, want := range []string{"No held lock is near expiry.", "No lock is held.", "No findings in the last 24 hours.", "No sources configured."} {
		if !strings.Contains(text(doc.Find("main")), want) {
			t.Errorf("empty overview lacks %q", want)
		}
	}
}

// manyLocks adds n held locks named lock-000.. to the fixture's store, their
// changes a second apart and expiries shuffled.
func manyLocks(t *testing.T, f *fixture, n int) {
	t.Helper()
	var b audit.Batch
	for i := range n {
		b.Locks = append(b.Locks, audit.TrackState{Lock: audit.Lock{
			Source: "prod-etcd", Kind: audit.KindEtcd, Name: fmt.Sprintf("lock-%03d", i), Class: audit.ClassLock,
			State: audit.StateHeld, Holder: fmt.Sprintf("h%d", i%3), Token: audit.Int64(int64(i)),
			RenewedAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Duration(1+(i*7)%n) * time.Second),
			LeaseDuration: time.Minute, ChangedAt: t0.Add(time.Duration(i) * time.Second),
		}})
	}
	if err := f.store.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func lockNames(doc *goquery.Document) []string {
	var out []string
	doc.Find("table.locks tbody td.name").Each(func(_ int, s *goquery.Selection) { out = append(out, text(s)) })
	return out
}

func TestLocksPagination(t *testing.T) {
	f := newFixture(t)
	manyLocks(t, f, 25)

	page := func(target string) *goquery.Document {
		t.Helper()
		return htmlDoc(t, target, f.page(t, target, http.StatusOK))
	}
	doc := page("/locks?source=prod-etcd&q=lock-&limit=10")
	if got := lockNames(doc); len(got) != 10 || got[0] != "lock-000" || got[9] != "lock-009" {
		t.Fatalf("first page = %v", got)
	}
	if m := text(doc.Find("p.meta").First()); !strings.Contains(m, "25 locks match") {
		t.Errorf("meta %q lacks the total", m)
	}
	next, ok := doc.Find(`nav.pager a[rel="next"]`).Attr("href")
	if !ok || doc.Find(`nav.pager a[rel="prev"]`).Length() != 0 {
		t.Fatalf("first page pager: next %q, want next only", next)
	}
	doc = page(next)
	if got := lockNames(doc); len(got) != 10 || got[0] != "lock-010" {
		t.Fatalf("second page = %v", got)
	}
	prev, _ := doc.Find(`nav.pager a[rel="prev"]`).Attr("href")
	next, _ = doc.Find(`nav.pager a[rel="next"]`).Attr("href")
	if got := lockNames(page(prev)); len(got) != 10 || got[0] != "lock-000" || got[9] != "lock-009" {
		t.Errorf("previous page = %v, want the first page again", got)
	}
	last := page(next)
	if got := lockNames(last); len(got) != 5 || got[4] != "lock-024" {
		t.Errorf("last page = %v", got)
	}
	if last.Find(`nav.pager a[rel="next"]`).Length() != 0 {
		t.Errorf("last page links to a next page")
	}

	t.Run("SortByChange", func(t *testing.T) {
		got := lockNames(page("/locks?source=prod-etcd&q=lock-&sort=changed&limit=3"))
		if len(got) != 3 || got[0] != "lock-024" || got[2] != "lock-022" {
			t.Errorf("by change = %v, want the newest first", got)
		}
	})
	t.Run("SortByMarginIsHeldByLeaseLeft", func(t *testing.T) {
		doc := page("/locks?sort=margin&limit=2")
		got := lockNames(doc)
		if len(got) != 2 || got[0] != "/locks/orders" {
			t.Errorf("by margin = %v, want orders (1s left) first", got)
		}
		if v := doc.Find(`select[name="state"] option[selected]`).AttrOr("value", ""); v != "held" {
			t.Errorf("state filter shows %q, want held (implied by the margin order)", v)
		}
		if cur := text(doc.Find(`p.meta strong[aria-current]`)); cur != "Lease left" {
			t.Errorf("current order = %q", cur)
		}
	})
	t.Run("HolderAndKind", func(t *testing.T) {
		got := lockNames(page("/locks?holder=h1&kind=etcd"))
		if len(got) != 8 {
			t.Errorf("holder h1 = %v, want 8 locks", got)
		}
		if got := lockNames(page("/locks?kind=redis")); len(got) != 0 {
			t.Errorf("kind redis = %v, want none", got)
		}
	})
	t.Run("HolderLinks", func(t *testing.T) {
		href := page("/locks?q=orders").Find("td.holder a").AttrOr("href", "")
		if href != "/holders/worker-2" {
			t.Fatalf("holder link = %q, want the holder's page", href)
		}
		// The holder's page leads on to the locks it holds now.
		if !slices.Contains(page(href).Find("a").Map(func(_ int, a *goquery.Selection) string { return a.AttrOr("href", "") }),
			"/locks?class=all&holder=worker-2") {
			t.Errorf("the holder page %s does not link to the locks list filtered by its holder", href)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		f.page(t, "/locks?sort=size", http.StatusBadRequest)
		f.page(t, "/locks?after=999999", http.StatusBadRequest)
		f.page(t, "/locks?after=-1", http.StatusBadRequest)
		f.page(t, "/locks?kind=consul", http.StatusBadRequest)
	})
}

func TestLockPageTimeline(t *testing.T) {
	f := newFixture(t)
	target := "/locks/" + itoa(f.orders.ID)
	doc := htmlDoc(t, target, f.page(t, target, http.StatusOK))
	svg := doc.Find("svg.timeline")
	if svg.Length() != 1 {
		t.Fatalf("timeline svg count = %d", svg.Length())
	}
	var lanes []string
	svg.Find("text.lane-label").Each(func(_ int, s *goquery.Selection) {
		lanes = append(lanes, strings.TrimSpace(s.Contents().Not("title").Text()))
	})
	if strings.Join(lanes, ",") != "worker-1,worker-2" {
		t.Errorf("lanes = %v, want worker-1 then worker-2", lanes)
	}
	bars := svg.Find("a.tenure")
	if bars.Length() != 2 {
		t.Fatalf("tenure bars = %d, want 2", bars.Length())
	}
	first := bars.Eq(0)
	if !first.HasClass("end-expired") || !first.HasClass("observed") || first.Find("polygon.end.expired").Length() != 1 {
		t.Errorf("worker-1's tenure classes %q: want expired (with its marker) and first seen", first.AttrOr("class", ""))
	}
	if title := first.ChildrenFiltered("title").Text(); !strings.Contains(title, "worker-1 · token 41") || !strings.Contains(title, "expired") {
		t.Errorf("worker-1's tooltip = %q", title)
	}
	if href := first.AttrOr("href", ""); !strings.HasPrefix(href, target+"?from=") {
		t.Errorf("zoom link = %q", href)
	}
	if !bars.Eq(1).HasClass("held") || bars.Eq(1).Find("rect.renew-band").Length() != 1 {
		t.Errorf("worker-2's tenure: want held, with its 100 renewals (no times known) as a band")
	}
	if w := svg.Find("g.write.rejected"); w.Length() != 1 || w.AttrOr("tabindex", "") != "0" || !strings.Contains(w.Find("title").Text(), "orders-db") {
		t.Errorf("rejected write marker: %d, focusable %q", w.Length(), w.AttrOr("tabindex", ""))
	}
	if svg.Find("line.now").Length() != 1 {
		t.Errorf("no now line in a window ending now")
	}
	if doc.Find("#lock-live").AttrOr("hx-trigger", "") != "every 10s" {
		t.Errorf("a window ending now does not refresh itself")
	}
	if n := doc.Find("ul.legend li").Length(); n < 10 {
		t.Errorf("legend has %d entries", n)
	}

	t.Run("Presets", func(t *testing.T) {
		var got []string
		doc.Find("nav.window-nav .group").First().Children().Each(func(_ int, s *goquery.Selection) { got = append(got, text(s)) })
		if strings.Join(got, " ") != "15m 1h 6h 24h 7d" || text(doc.Find(`nav.window-nav strong[aria-current]`).First()) != "1h" {
			t.Errorf("presets = %v", got)
		}
	})
	t.Run("CustomWindowIsFixed", func(t *testing.T) {
		q := "?from=" + t0.Add(9*time.Minute).Format(time.RFC3339) + "&to=" + t0.Add(12*time.Minute).Format(time.RFC3339)
		doc := htmlDoc(t, q, f.page(t, target+q, http.StatusOK))
		if doc.Find("#lock-live[hx-get]").Length() != 0 {
			t.Errorf("a fixed window polls")
		}
		if doc.Find("svg.timeline a.tenure").Length() != 1 || doc.Find("svg.timeline line.now").Length() != 0 {
			t.Errorf("window 10:09..10:12 shows %d tenures", doc.Find("svg.timeline a.tenure").Length())
		}
		if !doc.Find("details.custom-window").Is("[open]") {
			t.Errorf("custom window form closed for a custom window")
		}
	})
	t.Run("LocalTime", func(t *testing.T) {
		doc := htmlDoc(t, "tz", f.page(t, target+"?tz=Asia/Kolkata", http.StatusOK))
		if z := text(doc.Find("svg.timeline text.zone")); z != "Asia/Kolkata" {
			t.Errorf("zone label = %q", z)
		}
		if !strings.Contains(text(doc.Find("dl.summary")), "IST") {
			t.Errorf("summary times are not in the chosen zone: %q", text(doc.Find("dl.summary")))
		}
	})
	t.Run("EventPages", func(t *testing.T) {
		doc := htmlDoc(t, "limit", f.page(t, target+"?limit=2", http.StatusOK))
		if n := doc.Find("#events ~ div table tbody tr").Length(); n != 2 {
			t.Errorf("event rows = %d, want 2", n)
		}
		older, ok := doc.Find(`nav.pager a[rel="next"]`).Attr("href")
		if !ok {
			t.Fatal("no link to older events")
		}
		doc = htmlDoc(t, older, f.page(t, strings.Split(older, "#")[0], http.StatusOK))
		rows := doc.Find("#events ~ div table tbody tr")
		if rows.Length() != 2 || !strings.Contains(text(rows.Last()), "observed") {
			t.Errorf("older events = %q, want the two oldest", text(rows))
		}
	})
	t.Run("IdleLockShowsItsLastChange", func(t *testing.T) {
		// Released three hours ago: the default hour ending now would be
		// empty, so the page shows the hour around the last change.
		key := audit.LockKey{Source: "prod-etcd", Name: "/locks/idle"}
		released := now.Add(-3 * time.Hour)
		if err := f.store.Apply(context.Background(), audit.Batch{
			Locks: []audit.TrackState{{Lock: audit.Lock{Source: key.Source, Name: key.Name, Kind: audit.KindEtcd,
				Class: audit.ClassLock, State: audit.StateFree, ChangedAt: released}}},
			Tenures: []audit.Tenure{{Lock: key, Seq: 1, Holder: "old-worker", Token: audit.Int64(7),
				GrantedAt: released.Add(-10 * time.Minute), EndedAt: released, End: audit.EndReleased}},
		}); err != nil {
			t.Fatal(err)
		}
		l, err := f.store.LockByKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		doc := htmlDoc(t, "idle", f.page(t, "/locks/"+itoa(l.ID), http.StatusOK))
		if n := doc.Find("svg.timeline a.tenure").Length(); n != 1 {
			t.Errorf("idle lock's default window shows %d tenures, want its last one", n)
		}
		if doc.Find("div#lock-live[hx-get]").Length() != 0 || doc.Find(`nav.window-nav strong[aria-current]`).Length() != 1 {
			t.Errorf("the window around the last change is fixed, with only the zone marked current")
		}
		if note := text(doc.Find("p.window-note")); !strings.Contains(note, "Nothing changed in the last 1h") {
			t.Errorf("idle lock's window note = %q, want it to say why", note)
		}
	})
	t.Run("ShortHistoryFitsTheWindow", func(t *testing.T) {
		// A lock first granted two minutes ago: a preset of an hour or 15
		// minutes opens on its history (and a tenth of it before), says so
		// and still follows now; a window asked for by its times does not.
		key := audit.LockKey{Source: "prod-etcd", Name: "/locks/young"}
		for i, holder := range []string{"w-1", "w-2"} {
			at := now.Add(time.Duration(i-2) * time.Minute)
			if err := f.rec.Record(context.Background(), audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{{
				Lock: key, Kind: audit.EventGrant, At: at, Holder: holder, Token: audit.Int64(int64(10 + i)), LeaseDuration: time.Minute,
			}}}); err != nil {
				t.Fatal(err)
			}
		}
		l, err := f.store.LockByKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		wantFrom := now.Add(-2*time.Minute - 12*time.Second).UTC().Format(time.RFC3339Nano)
		for _, q := range []string{"", "?window=15m", "?window=1h"} {
			doc := htmlDoc(t, "young"+q, f.page(t, "/locks/"+itoa(l.ID)+q, http.StatusOK))
			from, _ := doc.Find("div.window p.meta time").First().Attr("datetime")
			note := doc.Find("p.window-note")
			if from != wantFrom || !strings.Contains(text(note), "history began 2m0s ago") {
				t.Errorf("%q: window from %s with note %q, want from %s (the history and a tenth) and a note", q, from, text(note), wantFrom)
			}
			if href, _ := note.Find("a").Attr("href"); !strings.Contains(href, "from=") || doc.Find("span.live-badge").Length() != 1 {
				t.Errorf("%q: the note links to %q and the window is live: %d; want a link to the whole preset, live", q, href, doc.Find("span.live-badge").Length())
			}
		}
		// An instant before the history keeps the preset, so it stays shown.
		before := url.Values{"window": {"1h"}, "at": {now.Add(-30 * time.Minute).Format(time.RFC3339)}}
		if doc := htmlDoc(t, "young at", f.page(t, "/locks/"+itoa(l.ID)+"?"+before.Encode(), http.StatusOK)); doc.Find("p.window-note").Length() != 0 {
			t.Errorf("a window holding ?at= before the history was fitted: %q", text(doc.Find("p.window-note")))
		}
		// Neither tenure has renewed since its grant: no last renewal shows,
		// rather than the lease's older one.
		young := htmlDoc(t, "young", f.page(t, "/locks/"+itoa(l.ID), http.StatusOK))
		rows := young.Find("table.grid").FilterFunction(func(_ int, s *goquery.Selection) bool {
			return strings.Contains(text(s.Find("thead")), "Last renewal")
		}).Find("tbody tr")
		for i := range rows.Length() {
			if cell := text(rows.Eq(i).Find("td").Eq(5)); cell != "—" {
				t.Errorf("young lock's tenure %d shows last renewal %q, want none", i, cell)
			}
		}
		if rows.Length() != 2 {
			t.Errorf("young lock's tenure rows %q: want two", text(rows))
		}
		custom := "?" + windowQuery(now.Add(-time.Hour), now)
		doc := htmlDoc(t, "young custom", f.page(t, "/locks/"+itoa(l.ID)+custom, http.StatusOK))
		if doc.Find("p.window-note").Length() != 0 {
			t.Errorf("a window given by its times was fitted: %q", text(doc.Find("p.window-note")))
		}
	})
	t.Run("Errors", func(t *testing.T) {
		f.page(t, target+"?window=2h", http.StatusBadRequest)
		f.page(t, target+"?tz=Mars/Olympus", http.StatusBadRequest)
		f.page(t, target+"?from=2025-03-01T10:00:00Z&to=2025-02-01T10:00:00Z", http.StatusBadRequest)
		f.page(t, target+"?before=nope", http.StatusBadRequest)
	})
}

func TestFindingsPageLinksToTheTimeline(t *testing.T) {
	f := newFixture(t)
	doc := htmlDoc(t, "/findings", f.page(t, "/findings", http.StatusOK))
	var stale *goquery.Selection
	doc.Find("table.findings tbody tr").Each(func(_ int, s *goquery.Selection) {
		if strings.Contains(text(s), "stale_write") {
			stale = s
		}
	})
	if stale == nil {
		t.Fatal("no stale_write row")
	}
	href := stale.Find("a.tl-link").AttrOr("href", "")
	// 11:00.123 to 11:01.623 (1.5 s) padded by a minute either side.
	want := "/locks/" + itoa(f.orders.ID) + "?from=2025-03-01T10%3A10%3A00.123456789Z&to=2025-03-01T10%3A12%3A01.623456789Z#finding-"
	if !strings.HasPrefix(href, want) {
		t.Errorf("timeline link = %q, want %q…", href, want)
	}
	tl := htmlDoc(t, href, f.page(t, strings.Split(href, "#")[0], http.StatusOK))
	id := strings.Split(href, "#")[1]
	if tl.Find("tr#"+id).Length() != 1 {
		t.Errorf("the timeline page does not list finding %s", id)
	}

	t.Run("Filters", func(t *testing.T) {
		doc := htmlDoc(t, "source", f.page(t, "/findings?source=cluster-a", http.StatusOK))
		if n := doc.Find("table.findings tbody tr").Length(); n != 0 {
			t.Errorf("cluster-a findings = %d, want 0", n)
		}
		doc = htmlDoc(t, "lock key", f.page(t, "/findings?lock=prod-etcd//locks/orders", http.StatusOK))
		if n := doc.Find("table.findings tbody tr").Length(); n != 2 {
			t.Errorf("findings of prod-etcd//locks/orders = %d, want 2", n)
		}
		f.page(t, "/findings?lock=prod-etcd/nope", http.StatusNotFound)
	})
	t.Run("OlderPage", func(t *testing.T) {
		doc := htmlDoc(t, "limit", f.page(t, "/findings?limit=2", http.StatusOK))
		older, ok := doc.Find(`nav.pager a[rel="next"]`).Attr("href")
		if !ok || doc.Find("table.findings tbody tr").Length() != 2 {
			t.Fatal("no older page after 2 of 3 findings")
		}
		doc = htmlDoc(t, older, f.page(t, older, http.StatusOK))
		if rows := doc.Find("table.findings tbody tr"); rows.Length() != 1 || !strings.Contains(text(rows), "lease_expired") {
			t.Errorf("older page = %q, want the oldest finding", text(rows))
		}
	})
}

func TestSourcesPageBlindWindowsAndDegraded(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Sources = func() []audit.Source {
			return []audit.Source{{Name: "cache", Kind: audit.KindRedis, State: audit.SourceUp,
				Degraded: "keyspace notifications unavailable: polling every 1s"}}
		}
	})
	detail := map[string]any{"from": t0.Add(time.Minute).Format(time.RFC3339Nano), "to": t0.Add(3 * time.Minute).Format(time.RFC3339Nano), "reason": "reconnect"}
	key := audit.LockKey{Source: "cache", Name: "lock:a"}
	if err := f.store.Apply(context.Background(), audit.Batch{
		Events:   []audit.Event{{Lock: key, Kind: audit.EventBlind, At: t0.Add(3 * time.Minute), Detail: detail}},
		Findings: []audit.Finding{{Lock: key, Kind: audit.FindingBlindWindow, At: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}},
		Cursors:  []audit.Cursor{{Source: "cache", Position: "42", At: now.Add(-2 * time.Second)}},
	}); err != nil {
		t.Fatal(err)
	}
	doc := htmlDoc(t, "/sources", f.page(t, "/sources", http.StatusOK))
	row := text(doc.Find("table tbody tr").First())
	for _, want := range []string{"cache", "redis", "up", "polling every 1s", "42", "2s ago"} {
		if !strings.Contains(row, want) {
			t.Errorf("source row %q lacks %q", row, want)
		}
	}
	blind := text(doc.Find("table").Eq(1).Find("tbody tr"))
	for _, want := range []string{"cache", "2m0s", "reconnect"} {
		if !strings.Contains(blind, want) {
			t.Errorf("blind window row %q lacks %q", blind, want)
		}
	}
	api := f.getJSON(t, "/api/v1/sources", http.StatusOK)
	if src := list(t, api, "sources"); len(src) != 1 || src[0]["degraded"] != "keyspace notifications unavailable: polling every 1s" {
		t.Errorf("API sources = %v, want degraded in the JSON", src)
	}
}

// The sources page shows each collector's observation lag with how long ago
// it was measured, and says what the figure covers.
func TestSourcesPageObservationLag(t *testing.T) {
	f := newFixture(t)
	doc := htmlDoc(t, "/sources", f.page(t, "/sources", http.StatusOK))
	table := doc.Find("table").First()
	col := -1
	table.Find("thead th").Each(func(i int, th *goquery.Selection) {
		if text(th) == "Observation lag" {
			col = i
		}
	})
	if col < 0 {
		t.Fatalf("sources table headers %q lack Observation lag", text(table.Find("thead")))
	}
	for _, tc := range []struct{ source, want, measured string }{
		{"prod-etcd", "1.5s 2s ago", now.Add(-2 * time.Second).Format(time.RFC3339Nano)},
		{"cluster-a", "—", ""}, // no commit yet
	} {
		row := table.Find("tbody tr").FilterFunction(func(_ int, tr *goquery.Selection) bool {
			return text(tr.Find("td").First()) == tc.source
		})
		cell := row.Find("td").Eq(col)
		if got := text(cell); got != tc.want {
			t.Errorf("%s: observation lag = %q, want %q", tc.source, got, tc.want)
		}
		if got := cell.Find("time").AttrOr("datetime", ""); got != tc.measured {
			t.Errorf("%s: observation lag measured at %q, want %q", tc.source, got, tc.measured)
		}
	}
	if note := text(doc.Find("#lag-note")); !strings.Contains(note, "from the change in the backend to being stored") {
		t.Errorf("sources page note = %q, want it to say what the lag covers", note)
	}
}

// Lock names, holders and details come from backends: nothing in them may
// become markup, in HTML or in the timeline's SVG, and control characters
// are shown as U+FFFD.
func TestHostileStringsOnEveryPage(t *testing.T) {
	f := newFixture(t)
	const svgXSS = `"><svg onload=alert(1)>`
	name := svgXSS + "\x1b[2J\u202e"
	holder := "<img src=x onerror=alert(1)>\x00\x07"
	key := audit.LockKey{Source: "prod-etcd", Name: name}
	if err := f.store.Apply(context.Background(), audit.Batch{
		Locks: []audit.TrackState{{Lock: audit.Lock{Source: key.Source, Name: name, Kind: audit.KindEtcd, Class: audit.ClassLock,
			State: audit.StateHeld, Holder: holder, Token: audit.Int64(5), AcquiredAt: now.Add(-time.Minute),
			RenewedAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Second), LeaseDuration: 10 * time.Second, ChangedAt: now.Add(-time.Minute)}}},
		Tenures: []audit.Tenure{{Lock: key, Seq: 1, Holder: holder, Token: audit.Int64(5), GrantedAt: now.Add(-time.Minute)}},
		Events: []audit.Event{
			{Lock: key, Kind: audit.EventGrant, At: now.Add(-time.Minute), Holder: holder, Token: audit.Int64(5), Detail: map[string]any{svgXSS: holder}},
			{Lock: key, Kind: audit.EventWriteRejected, At: now.Add(-30 * time.Second), Holder: holder, Token: audit.Int64(4), Resource: svgXSS},
		},
		Findings: []audit.Finding{{Lock: key, Kind: audit.FindingOverlap, At: now.Add(-40 * time.Second), Until: now.Add(-35 * time.Second),
			Summary: svgXSS, Holders: []string{holder}, Resource: svgXSS}},
	}); err != nil {
		t.Fatal(err)
	}
	l, err := f.store.LockByKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/locks", "/locks?q=svg", "/locks/" + itoa(l.ID), "/locks/" + itoa(l.ID) + "?tz=Europe/Paris", "/findings", "/sources"} {
		body := f.page(t, p, http.StatusOK)
		for _, bad := range []string{"<svg onload", "<img src=x", "\x1b", "\x00", "\x07", "\u202e"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		doc := htmlDoc(t, p, body)
		if n := doc.Find("svg").FilterFunction(func(_ int, s *goquery.Selection) bool { _, ok := s.Attr("onload"); return ok }).Length(); n > 0 {
			t.Errorf("%s has an svg with onload", p)
		}
		if doc.Find("img").Length() > 0 {
			t.Errorf("%s has an img element", p)
		}
	}
	doc := htmlDoc(t, "lock", f.page(t, "/locks/"+itoa(l.ID), http.StatusOK))
	if h := text(doc.Find("h1")); !strings.Contains(h, svgXSS+"\uFFFD[2J\uFFFD") {
		t.Errorf("heading = %q, want the name as text with control characters replaced", h)
	}
	svg := doc.Find("svg.timeline")
	if !strings.Contains(svg.Find("title#tl-title").Text(), svgXSS) {
		t.Errorf("timeline title %q lacks the name as text", svg.Find("title#tl-title").Text())
	}
	if !strings.Contains(svg.Find("text.lane-label title").Text(), "<img src=x onerror=alert(1)>\uFFFD\uFFFD") {
		t.Errorf("lane tooltip %q lacks the holder as text", svg.Find("text.lane-label title").Text())
	}
	if !strings.Contains(svg.Find("g.write title").Text(), svgXSS) || !strings.Contains(svg.Find("a.hazard title").Text(), svgXSS) {
		t.Errorf("write and hazard tooltips lack the hostile resource and summary as text")
	}
}

// The API takes the locks page's additions: kind, holder, sort and keyset
// cursors, next to its contract parameters.
func TestAPILocksPages(t *testing.T) {
	f := newFixture(t)
	manyLocks(t, f, 5)
	names := func(target string) []string {
		t.Helper()
		var out []string
		for _, l := range list(t, f.getJSON(t, target, http.StatusOK), "locks") {
			out = append(out, l["name"].(string))
		}
		return out
	}
	first := names("/api/v1/locks?q=lock-&limit=2")
	if strings.Join(first, ",") != "lock-000,lock-001" {
		t.Fatalf("first page = %v", first)
	}
	l, err := f.store.LockByKey(context.Background(), audit.LockKey{Source: "prod-etcd", Name: "lock-001"})
	if err != nil {
		t.Fatal(err)
	}
	if got := names("/api/v1/locks?q=lock-&limit=2&after=" + itoa(l.ID)); strings.Join(got, ",") != "lock-002,lock-003" {
		t.Errorf("after lock-001 = %v", got)
	}
	if got := names("/api/v1/locks?q=lock-&sort=changed&limit=1"); strings.Join(got, ",") != "lock-004" {
		t.Errorf("newest change = %v", got)
	}
	if got := names("/api/v1/locks?holder=h1&kind=etcd"); strings.Join(got, ",") != "lock-001,lock-004" {
		t.Errorf("holder h1 = %v", got)
	}
	wantError(t, f.getJSON(t, "/api/v1/locks?sort=size", http.StatusBadRequest), "sort")
	wantError(t, f.getJSON(t, "/api/v1/locks?after=1&before=2", http.StatusBadRequest), "before")
}

// Heartbeats are recorded but kept out of the default views and alerts: a
// node's lease running out (the fixture's node-1 lease_expired) is missing
// from the overview's counts and list, the findings page and the findings
// API, and shows with class=heartbeat or class=all, or when its lock is
// named.
func TestHeartbeatFindingsOutOfDefaultViews(t *testing.T) {
	f := newFixture(t)
	const hbSummary = "node-1 stopped renewing"

	t.Run("Overview", func(t *testing.T) {
		doc := htmlDoc(t, "/", f.page(t, "/", http.StatusOK))
		if sevs := text(doc.Find("ul.sevs")); !strings.Contains(sevs, "2 warning") {
			t.Errorf("severity counts %q, want 2 warning (the heartbeat's lease_expired not counted)", sevs)
		}
		if rows := text(doc.Find(`section[aria-labelledby="h-findings"] tbody`)); strings.Contains(rows, hbSummary) {
			t.Errorf("recent findings %q list the heartbeat's finding", rows)
		}
	})

	t.Run("Page", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			shown bool
			class string // the class the filter form shows as selected
		}{
			{"", false, ""},
			{"class=lock", false, ""}, // the form's first option, "locks", as on the locks page
			{"class=heartbeat", true, "heartbeat"},
			{"class=all", true, "all"},
			{"source=cluster-a", false, ""},
			{"source=cluster-a&class=heartbeat&kind=lease_expired", true, "heartbeat"},
			{"lock=" + itoa(f.heartbeat.ID), true, "all"},
			{"lock=cluster-a/kube-node-lease/node-1", true, "all"},
		} {
			target := "/findings?" + tc.query
			doc := htmlDoc(t, target, f.page(t, target, http.StatusOK))
			if got := strings.Contains(text(doc.Find("table.findings tbody")), hbSummary); got != tc.shown {
				t.Errorf("%s lists the heartbeat's finding: %v, want %v", target, got, tc.shown)
			}
			if got := doc.Find(`select[name="class"] option[selected]`).AttrOr("value", ""); got != tc.class {
				t.Errorf("%s class selected = %q, want %q", target, got, tc.class)
			}
		}
		f.page(t, "/findings?class=heartbeats", http.StatusBadRequest)
	})

	t.Run("API", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			want  int // findings; the heartbeat's is one of them when shown
			shown bool
		}{
			{"", 3, false},
			{"class=lock", 3, false},
			{"class=heartbeat", 1, true},
			{"class=all", 4, true},
			{"kind=lease_expired", 1, false},
			{"kind=lease_expired&class=all", 2, true},
			{"lock=" + itoa(f.heartbeat.ID), 1, true},
			{"lock=" + itoa(f.heartbeat.ID) + "&class=lock", 0, false},
		} {
			got := list(t, f.getJSON(t, "/api/v1/findings?"+tc.query, http.StatusOK), "findings")
			shown := false
			for _, fd := range got {
				if fd["summary"] == hbSummary {
					shown = true
					wantNumber(t, "lock_id", fd["lock_id"], float64(f.heartbeat.ID))
				}
			}
			if len(got) != tc.want || shown != tc.shown {
				t.Errorf("findings?%s: %d findings, heartbeat's shown %v; want %d, %v", tc.query, len(got), shown, tc.want, tc.shown)
			}
		}
		wantError(t, f.getJSON(t, "/api/v1/findings?class=mutex", http.StatusBadRequest), "class")
		if locks := list(t, f.getJSON(t, "/api/v1/locks?class=all", http.StatusOK), "locks"); len(locks) != 3 {
			t.Errorf("locks?class=all: %d locks, want 3 (every class, as without class)", len(locks))
		}
	})

	t.Run("SourcesBlindLinksCoverEveryClass", func(t *testing.T) {
		// A blind window covers a source's every lock, heartbeats too.
		key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-1"}
		if err := f.store.Apply(context.Background(), audit.Batch{Findings: []audit.Finding{
			{Lock: key, Kind: audit.FindingBlindWindow, At: now.Add(-3 * time.Minute), Until: now.Add(-2 * time.Minute)},
		}}); err != nil {
			t.Fatal(err)
		}
		doc := htmlDoc(t, "/sources", f.page(t, "/sources", http.StatusOK))
		links := 0
		doc.Find(`a[href^="/findings?"]`).Each(func(_ int, s *goquery.Selection) {
			href := s.AttrOr("href", "")
			if !strings.Contains(href, "kind=blind_window") {
				return
			}
			links++
			if !strings.Contains(href, "class=all") {
				t.Errorf("blind window link %q would hide the heartbeats' blind windows", href)
			}
			page := htmlDoc(t, href, f.page(t, href, http.StatusOK))
			if page.Find("table.findings tbody tr").Length() == 0 {
				t.Errorf("%s lists no blind window", href)
			}
		})
		if links == 0 {
			t.Error("the sources page links to no blind window findings")
		}
	})
}

// TestOverviewStripKeepsWarningsBehindInfo: a held lock whose resources
// raised more info findings in the hour than the strip reads (exposures,
// rejected stale writes) still shows its warning on the strip.
func TestOverviewStripKeepsWarningsBehindInfo(t *testing.T) {
	f := newFixture(t)
	var b audit.Batch
	for i := range query.HeldFindings + 10 {
		b.Findings = append(b.Findings, audit.Finding{Lock: audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"},
			Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: now.Add(-time.Duration(i+1) * time.Second),
			Resource: "orders-db", Tokens: []int64{41, 42}, Summary: "rejected"})
	}
	if err := f.store.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	doc := htmlDoc(t, "/", f.page(t, "/", http.StatusOK))
	strip := doc.Find(`section[aria-labelledby="h-held"] tbody tr svg.strip`)
	if w := strip.Find("circle.strip-finding.warning").Length(); w != 1 {
		t.Errorf("held lock's strip marks %d warnings behind %d newer info findings, want its one warning", w, query.HeldFindings+10)
	}
}
