package web

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/web/browsertest"
)

// The browser tests drive Debian's Chromium (web/browsertest) through the
// dashboard, served by the real Server over a real SQLite store that the
// real recorder filled with the incident of recordIncident.

// serveIncident runs the real Server on a loopback port over the incident.
func serveIncident(t *testing.T, in *incident) string {
	t.Helper()
	srv, err := New(Config{
		Store: in.rec.Fresh(in.store), Writes: in.rec, KnownSources: incidentSources,
		Sources: func() []audit.Source {
			return []audit.Source{
				{Name: incidentSource, Kind: audit.KindEtcd, State: audit.SourceUp},
				{Name: "cluster-a", Kind: audit.KindKubernetes, State: audit.SourceUp},
			}
		},
		IngestTokens: []string{"browser-test"}, Logger: slog.New(slog.DiscardHandler), RenewMarginRatio: 0.25,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// pathIs is a script condition: link a goes to path, with any query.
func pathIs(path string) string {
	return fmt.Sprintf(`new URL(a.href).pathname === %q`, path)
}

func TestBrowserDashboard(t *testing.T) {
	chromium := browsertest.ChromiumPath(t)
	start := time.Now()
	// The incident happened a few minutes ago, inside every default window.
	base := time.Now().UTC().Add(-5 * time.Minute).Truncate(time.Second)
	in := recordIncident(t, base)
	orders, billing := in.lock(t, incidentOrders), in.lock(t, incidentBilling)
	ordersPath := "/locks/" + strconv.FormatInt(orders.ID, 10)
	billingPath := "/locks/" + strconv.FormatInt(billing.ID, 10)
	b := browsertest.Start(t, chromium, serveIncident(t, in))
	artifacts := browsertest.ArtifactsDir(t)
	t.Logf("artifacts in %s", artifacts)

	t.Run("Overview", func(t *testing.T) {
		b.T = t
		b.Open("/")
		b.Screenshot(artifacts, "overview.png")
		b.NoConsoleErrors("the overview")
		// Each held lock's strip draws its tenures on one scale that fits
		// the incident's five minutes, not the right-most pixels of an hour.
		strips := browsertest.Eval[float64](b, "count the strips", `document.querySelectorAll("svg.strip").length`)
		widest := browsertest.Eval[float64](b, "measure the strips' tenures",
			`Math.max(0, ...[...document.querySelectorAll("svg.strip rect.strip-seg")].map(r => r.getBoundingClientRect().width))`)
		label := browsertest.Eval[string](b, "read the strips' span", `[...document.querySelectorAll("th")].map(th => th.textContent.trim()).find(t => t.startsWith("Last ")) || ""`)
		if strips != 3 || widest < 20 || label == "Last hour" {
			t.Errorf("%v strips, widest tenure %v px, spanning %q; want 3 strips fitted to the incident", strips, widest, label)
		}
	})

	t.Run("FilterLocks", func(t *testing.T) {
		b.T = t
		b.Open("/locks")
		ok := browsertest.Eval[bool](b, "filter by name", `(() => {
			const q = document.querySelector('form input[name="q"]');
			if (!q) return false;
			q.value = "orders";
			q.form.requestSubmit();
			return true;
		})()`)
		if !ok {
			t.Fatal(`the locks page has no form field named "q"`)
		}
		b.WaitLocation("the filtered list", func(loc string) bool { return strings.Contains(loc, "q=orders") })
		if href := b.MarkLink(pathIs(ordersPath)); href == "" {
			t.Fatalf("the list filtered by \"orders\" has no link to %s", ordersPath)
		}
		if href := b.MarkLink(pathIs(billingPath)); href != "" {
			t.Errorf("the list filtered by \"orders\" links to billing: %s", href)
		}
		b.NoConsoleErrors("the filtered locks list")
	})

	t.Run("OpenLock", func(t *testing.T) {
		b.T = t
		if b.MarkLink(pathIs(ordersPath)) == "" {
			t.Fatalf("no link to %s", ordersPath)
		}
		b.Click()
		b.WaitLocation("the lock page", func(loc string) bool { return strings.HasPrefix(loc, ordersPath) })
		if h := b.Heading(); !strings.Contains(h, "/locks/orders") {
			t.Errorf("lock page heading = %q, want the lock's name", h)
		}
		b.NoConsoleErrors("the lock page")
	})

	t.Run("ChangeWindow", func(t *testing.T) {
		b.T = t
		before := b.Location()
		// A link to this lock with another window (a preset, earlier, zoom),
		// or else the window form.
		href := b.MarkLink(fmt.Sprintf(`new URL(a.href).pathname === %q && /[?&](from|window)=/.test(new URL(a.href).search) &&
			new URL(a.href).pathname + new URL(a.href).search !== location.pathname + location.search`, ordersPath))
		var loc string
		if href != "" {
			b.Click()
			want, err := url.Parse(href)
			if err != nil {
				t.Fatal(err)
			}
			loc = b.WaitLocation("the window of "+href, func(loc string) bool { return loc != before && loc == want.Path+urlQuery(want) })
		} else {
			from, to := base.Add(-10*time.Minute), base.Add(10*time.Minute)
			ok := browsertest.Eval[bool](b, "submit the window form", fmt.Sprintf(`(() => {
				const f = Array.from(document.forms).find(f => f.querySelector('input[name="from"]') && f.querySelector('input[name="to"]'));
				if (!f) return false;
				for (const [name, rfc, local] of [["from", %q, %q], ["to", %q, %q]]) {
					const i = f.querySelector('input[name="' + name + '"]');
					i.value = i.type === "datetime-local" ? local : rfc;
				}
				f.requestSubmit();
				return true;
			})()`, from.Format(time.RFC3339), from.Format("2006-01-02T15:04:05"), to.Format(time.RFC3339), to.Format("2006-01-02T15:04:05")))
			if !ok {
				t.Fatal("the lock page offers no other window: no link and no form with from and to")
			}
			loc = b.WaitLocation("the submitted window", func(loc string) bool { return loc != before && strings.Contains(loc, "from=") })
		}
		if h := b.Heading(); !strings.Contains(h, "/locks/orders") {
			t.Errorf("after changing the window to %s the heading is %q", loc, h)
		}
		b.NoConsoleErrors("the lock page in another window")
	})

	t.Run("LockTimeline", func(t *testing.T) {
		b.T = t
		v := url.Values{}
		v.Set("from", base.Add(-30*time.Second).Format(time.RFC3339))
		v.Set("to", base.Add(30*time.Second).Format(time.RFC3339))
		b.Open(ordersPath + "?" + v.Encode())
		b.Screenshot(artifacts, "lock-timeline.png")
		b.NoConsoleErrors("the lock timeline")

		// The leadership health panel: three charts, each with its bars
		// drawn (a width from the stylesheet) and counted.
		charts := browsertest.Eval[float64](b, "count the health charts", `document.querySelectorAll("#health figure.health-chart").length`)
		drawn := browsertest.Eval[float64](b, "count the drawn health bars",
			`[...document.querySelectorAll("#health .health-fill")].filter(e => e.getBoundingClientRect().width > 0).length`)
		if charts != 3 || drawn == 0 {
			t.Errorf("the health panel shows %v charts with %v drawn bars, want 3 charts with bars", charts, drawn)
		}
		b.ScreenshotOf(artifacts, "health.png", "#health")
	})

	t.Run("VerdictPanel", func(t *testing.T) {
		b.T = t
		b.Open(ordersPath + "?verdict=all")
		kind := browsertest.Eval[string](b, "read the verdict", `document.querySelector("#verdict .verdict-badge").textContent.trim()`)
		if kind != "✖ unsafe" {
			t.Errorf("orders' verdict over its whole history reads %q, want ✖ unsafe", kind)
		}
		b.ScreenshotOf(artifacts, "verdict.png", "#verdict")
		// The deciding reason links to the findings behind it.
		if href := b.MarkLink(`a.closest("#verdict li.decides") !== null`); href == "" {
			t.Fatal("the verdict's deciding reason links to no findings")
		}
		b.Click()
		loc := b.WaitLocation("the reason's findings", func(loc string) bool { return strings.Contains(loc, "/findings?") })
		if !strings.Contains(loc, "kind=unfenced_write") {
			t.Errorf("the unsafe reason led to %s, want the unfenced_write findings", loc)
		}
		b.NoConsoleErrors("the verdict panel and its findings")
	})

	t.Run("HolderPageAndAtHighlight", func(t *testing.T) {
		b.T = t
		b.Open(ordersPath + "?window=1h")
		// The holder named in the tenure list leads to its page.
		if href := b.MarkLink(`a.closest("td.holder") !== null && a.textContent.trim() === "worker-1"`); href != "/holders/worker-1" {
			t.Fatalf("the tenure list links worker-1 to %q, want its holder page", href)
		}
		b.Click()
		b.WaitLocation("the holder page", func(loc string) bool { return loc == "/holders/worker-1" })
		if h := b.Heading(); h != "Holder worker-1" {
			t.Errorf("holder page heading = %q", h)
		}
		b.Screenshot(artifacts, "holder.png")
		// Its tenure of orders opens the lock at the grant, highlighted.
		if b.MarkLink(pathIs(ordersPath)+` && new URL(a.href).searchParams.has("at")`) == "" {
			t.Fatalf("the holder page has no link to %s at a grant", ordersPath)
		}
		b.Click()
		b.WaitLocation("the lock at the grant", func(loc string) bool { return strings.HasPrefix(loc, ordersPath+"?at=") })
		b.Run("wait for the banner", chromedp.WaitVisible(chromedp.CSS("#at")))
		banner := browsertest.Eval[string](b, "read the banner", `document.querySelector("#at").textContent.replace(/\s+/g, " ").trim()`)
		if !strings.Contains(banner, "held by worker-1 with token 41") {
			t.Errorf("the banner reads %q, want worker-1 holding token 41", banner)
		}
		marked := browsertest.Eval[string](b, "read the highlighted tenure", `(() => {
			const row = document.querySelector("tr.at-current td.holder");
			const bar = document.querySelector("svg.timeline a.tenure.at title");
			return (row ? row.textContent.trim() : "") + "|" + (bar ? bar.textContent.split("·")[0].trim() : "");
		})()`)
		if marked != "worker-1|worker-1" {
			t.Errorf("highlighted tenure row|bar = %q, want worker-1|worker-1", marked)
		}
		b.ScreenshotOf(artifacts, "lock-at.png", "main")
		b.NoConsoleErrors("the holder page and the lock at a grant")
	})

	t.Run("FollowFindingToTimeline", func(t *testing.T) {
		b.T = t
		b.Open("/findings")
		// The stale write's row links to the lock's timeline around it.
		href := b.MarkLink(fmt.Sprintf(`%s && (a.closest("tr, li, article, section") || a).textContent.includes("stale_write") &&
			(/[?&]from=/.test(new URL(a.href).search) || /timeline/i.test(a.textContent + a.className))`, pathIs(ordersPath)))
		if href == "" {
			href = b.MarkLink(fmt.Sprintf(`%s && (a.closest("tr, li, article, section") || a).textContent.includes("stale_write")`, pathIs(ordersPath)))
		}
		if href == "" {
			t.Fatalf("no stale_write finding links to %s", ordersPath)
		}
		b.Click()
		b.WaitLocation("the finding's timeline", func(loc string) bool { return strings.HasPrefix(loc, ordersPath) })
		if h := b.Heading(); !strings.Contains(h, "/locks/orders") {
			t.Errorf("following the finding (%s) led to %q", href, h)
		}
		b.NoConsoleErrors("the findings page and the finding's timeline")
	})

	t.Run("ExportReport", func(t *testing.T) {
		b.T = t
		v := url.Values{}
		v.Set("from", base.Add(-time.Minute).Format(time.RFC3339))
		v.Set("to", base.Add(time.Minute).Format(time.RFC3339))
		b.Open("/review?" + v.Encode())
		if h := b.Heading(); h != "Incident review" {
			t.Errorf("review heading = %q", h)
		}
		b.Screenshot(artifacts, "review.png")
		href := b.MarkLink(`new URL(a.href).pathname === "/review.md"`)
		if href == "" {
			t.Fatal("the review page has no Markdown export link")
		}
		// Download it as the browser would: the link is an attachment.
		res, err := http.Get(b.Base() + href)
		if err != nil {
			t.Fatalf("GET %s: %v", href, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		ct, cd := res.Header.Get("Content-Type"), res.Header.Get("Content-Disposition")
		if res.StatusCode != http.StatusOK || ct != "text/markdown; charset=utf-8" || !strings.HasPrefix(cd, "attachment;") {
			t.Fatalf("GET %s = %d, %q, %q", href, res.StatusCode, ct, cd)
		}
		got := struct{ Body string }{string(body)}
		for _, want := range []string{
			"# Incident review",
			"## demo-etcd//locks/orders",
			"worker-1 (token 41) stopped renewing; its lease expired 2.0 s after the last renewal",
			"a write with token 41 arrived 3.1 s after the expiry and was rejected by the ledger: fencing held",
			"**unfenced write accepted: fencing failed**",
		} {
			if !strings.Contains(got.Body, want) {
				t.Errorf("exported Markdown lacks %q:\n%s", want, got.Body)
			}
		}
		b.NoConsoleErrors("the incident review")
	})

	t.Run("EveryPageWithoutConsoleErrors", func(t *testing.T) {
		b.T = t
		for _, path := range []string{"/", "/locks", "/locks?class=all", ordersPath, billingPath, "/findings", "/sources", "/review"} {
			b.Open(path)
			b.NoConsoleErrors(path)
		}
	})
	t.Logf("browser run took %s", time.Since(start).Round(time.Millisecond))
}

// urlQuery is u's query with its leading "?", or "".
func urlQuery(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	return "?" + u.RawQuery
}
