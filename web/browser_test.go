package web

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/leasewatch/leasewatch/audit"
)

// The browser tests drive Debian's Chromium through the dashboard, served by
// the real Server over a real SQLite store that the real recorder filled with
// the incident of recordIncident. They select elements by stable things only
// (hrefs, form field names, headings), so the pages can change around them.

// chromiumPath finds Chromium: $LEASEWATCH_CHROMIUM, /usr/bin/chromium, or
// chromium on $PATH. Without it the tests fail in CI and are skipped elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LEASEWATCH_CHROMIUM"), "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	const msg = "chromium not found: install Debian's chromium (make deps, or apt-get install chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// artifactsDir is where screenshots go: $LEASEWATCH_ARTIFACTS, or a
// temporary directory.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LEASEWATCH_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts directory: %v", err)
	}
	return dir
}

// consoleLog gathers what pages log as errors: console.error and
// console.assert calls, uncaught exceptions, and browser log entries at error
// level (a failed load, a Content-Security-Policy violation).
type consoleLog struct {
	mu     sync.Mutex
	errors []string
}

func (c *consoleLog) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errors = append(c.errors, fmt.Sprintf(format, args...))
}

// take returns the errors logged since the last take.
func (c *consoleLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.errors
	c.errors = nil
	return out
}

func (c *consoleLog) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if t := string(ev.Type); t == "error" || t == "assert" {
			var args []string
			for _, a := range ev.Args {
				if len(a.Value) > 0 {
					args = append(args, string(a.Value))
				} else {
					args = append(args, a.Description)
				}
			}
			c.add("console.%s: %s", ev.Type, strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		c.add("uncaught exception at %s:%d: %s", d.URL, d.LineNumber, msg)
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level == cdplog.EntryLevelError {
			c.add("%s error: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		}
	}
}

// browser is one Chromium tab on the dashboard.
type browser struct {
	t       *testing.T
	ctx     context.Context
	base    string
	console *consoleLog
}

func startBrowser(t *testing.T, execPath, base string, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx, base: base, console: &consoleLog{}}
	// Listen starts the browser and sees every event from then on, in order,
	// before the command that follows it returns.
	if err := chromedp.Listen(ctx, b.console.listen); err != nil {
		t.Fatalf("start chromium %s: %v", execPath, err)
	}
	return b
}

// run runs actions under a deadline and fails the test if they fail.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a script in the page under a deadline.
func eval[T any](b *browser, what, js string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// open navigates to a dashboard path and waits for its first heading.
func (b *browser) open(path string) {
	b.t.Helper()
	b.run("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("h1")))
}

// location is the tab's current path and query (no origin, no fragment), or
// "" while the tab is between two pages.
func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState === "complete" && document.querySelector("h1") ? location.pathname + location.search : ""`))
	if err != nil {
		return "" // the old page is gone and the new one not there yet
	}
	return loc
}

// waitLocation waits until the tab shows a complete page whose location
// satisfies ok.
func (b *browser) waitLocation(what string, ok func(loc string) bool) string {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if loc := b.location(); loc != "" && ok(loc) {
			return loc
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s; location is %q", what, b.location())
		}
		select {
		case <-b.ctx.Done():
			b.t.Fatalf("browser gone while waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// heading is the text of the page's first h1.
func (b *browser) heading() string {
	b.t.Helper()
	h := eval[string](b, "read h1", `document.querySelector("h1").textContent`)
	return strings.Join(strings.Fields(h), " ")
}

// markLink finds a link with a script expression over the page's links (each
// an <a> element named a) and marks it so a real click can target it. It
// returns the link's href, or "" if none matched.
func (b *browser) markLink(filter string) string {
	b.t.Helper()
	js := `(() => {
		document.querySelectorAll("[data-test-target]").forEach(e => e.removeAttribute("data-test-target"));
		const a = Array.from(document.querySelectorAll("a[href]")).find(a => ` + filter + `);
		if (!a) return "";
		a.setAttribute("data-test-target", "1");
		a.scrollIntoView();
		return a.getAttribute("href");
	})()`
	return eval[string](b, "find link", js)
}

// click clicks the link markLink marked, as a user would.
func (b *browser) click() {
	b.t.Helper()
	b.run("click", chromedp.Click(chromedp.CSS(`[data-test-target="1"]`), chromedp.NodeVisible))
}

// noConsoleErrors fails if the pages logged errors since the last check.
func (b *browser) noConsoleErrors(page string) {
	b.t.Helper()
	// Let late errors (a failed subresource, a script after load) arrive.
	b.run("settle", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](`document.readyState === "complete"`, chromedp.WithPollingTimeout(10*time.Second))(ctx, t)
		return err
	}))
	for _, e := range b.console.take() {
		b.t.Errorf("%s logged an error: %s", page, e)
	}
}

func (b *browser) screenshot(dir, name string) { b.screenshotOf(dir, name, "") }

// screenshotOf saves a screenshot of the element sel selects, or of the whole
// page when sel is empty.
func (b *browser) screenshotOf(dir, name, sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	action := chromedp.FullScreenshot(100)
	if sel != "" {
		action = chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible)
	}
	png, err := chromedp.Run(ctx, action)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("save screenshot: %v", err)
	}
	b.t.Logf("screenshot: %s", path)
}

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
	chromium := chromiumPath(t)
	start := time.Now()
	// The incident happened a few minutes ago, inside every default window.
	base := time.Now().UTC().Add(-5 * time.Minute).Truncate(time.Second)
	in := recordIncident(t, base)
	orders, billing := in.lock(t, incidentOrders), in.lock(t, incidentBilling)
	ordersPath := "/locks/" + strconv.FormatInt(orders.ID, 10)
	billingPath := "/locks/" + strconv.FormatInt(billing.ID, 10)
	b := startBrowser(t, chromium, serveIncident(t, in))
	artifacts := artifactsDir(t)
	t.Logf("artifacts in %s", artifacts)

	t.Run("Overview", func(t *testing.T) {
		b.t = t
		b.open("/")
		b.screenshot(artifacts, "overview.png")
		b.noConsoleErrors("the overview")
		// Each held lock's strip draws its tenures on one scale that fits
		// the incident's five minutes, not the right-most pixels of an hour.
		strips := eval[float64](b, "count the strips", `document.querySelectorAll("svg.strip").length`)
		widest := eval[float64](b, "measure the strips' tenures",
			`Math.max(0, ...[...document.querySelectorAll("svg.strip rect.strip-seg")].map(r => r.getBoundingClientRect().width))`)
		label := eval[string](b, "read the strips' span", `[...document.querySelectorAll("th")].map(th => th.textContent.trim()).find(t => t.startsWith("Last ")) || ""`)
		if strips != 3 || widest < 20 || label == "Last hour" {
			t.Errorf("%v strips, widest tenure %v px, spanning %q; want 3 strips fitted to the incident", strips, widest, label)
		}
	})

	t.Run("FilterLocks", func(t *testing.T) {
		b.t = t
		b.open("/locks")
		ok := eval[bool](b, "filter by name", `(() => {
			const q = document.querySelector('form input[name="q"]');
			if (!q) return false;
			q.value = "orders";
			q.form.requestSubmit();
			return true;
		})()`)
		if !ok {
			t.Fatal(`the locks page has no form field named "q"`)
		}
		b.waitLocation("the filtered list", func(loc string) bool { return strings.Contains(loc, "q=orders") })
		if href := b.markLink(pathIs(ordersPath)); href == "" {
			t.Fatalf("the list filtered by \"orders\" has no link to %s", ordersPath)
		}
		if href := b.markLink(pathIs(billingPath)); href != "" {
			t.Errorf("the list filtered by \"orders\" links to billing: %s", href)
		}
		b.noConsoleErrors("the filtered locks list")
	})

	t.Run("OpenLock", func(t *testing.T) {
		b.t = t
		if b.markLink(pathIs(ordersPath)) == "" {
			t.Fatalf("no link to %s", ordersPath)
		}
		b.click()
		b.waitLocation("the lock page", func(loc string) bool { return strings.HasPrefix(loc, ordersPath) })
		if h := b.heading(); !strings.Contains(h, "/locks/orders") {
			t.Errorf("lock page heading = %q, want the lock's name", h)
		}
		b.noConsoleErrors("the lock page")
	})

	t.Run("ChangeWindow", func(t *testing.T) {
		b.t = t
		before := b.location()
		// A link to this lock with another window (a preset, earlier, zoom),
		// or else the window form.
		href := b.markLink(fmt.Sprintf(`new URL(a.href).pathname === %q && /[?&](from|window)=/.test(new URL(a.href).search) &&
			new URL(a.href).pathname + new URL(a.href).search !== location.pathname + location.search`, ordersPath))
		var loc string
		if href != "" {
			b.click()
			want, err := url.Parse(href)
			if err != nil {
				t.Fatal(err)
			}
			loc = b.waitLocation("the window of "+href, func(loc string) bool { return loc != before && loc == want.Path+urlQuery(want) })
		} else {
			from, to := base.Add(-10*time.Minute), base.Add(10*time.Minute)
			ok := eval[bool](b, "submit the window form", fmt.Sprintf(`(() => {
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
			loc = b.waitLocation("the submitted window", func(loc string) bool { return loc != before && strings.Contains(loc, "from=") })
		}
		if h := b.heading(); !strings.Contains(h, "/locks/orders") {
			t.Errorf("after changing the window to %s the heading is %q", loc, h)
		}
		b.noConsoleErrors("the lock page in another window")
	})

	t.Run("LockTimeline", func(t *testing.T) {
		b.t = t
		v := url.Values{}
		v.Set("from", base.Add(-30*time.Second).Format(time.RFC3339))
		v.Set("to", base.Add(30*time.Second).Format(time.RFC3339))
		b.open(ordersPath + "?" + v.Encode())
		b.screenshot(artifacts, "lock-timeline.png")
		b.noConsoleErrors("the lock timeline")

		// The leadership health panel: three charts, each with its bars
		// drawn (a width from the stylesheet) and counted.
		charts := eval[float64](b, "count the health charts", `document.querySelectorAll("#health figure.health-chart").length`)
		drawn := eval[float64](b, "count the drawn health bars",
			`[...document.querySelectorAll("#health .health-fill")].filter(e => e.getBoundingClientRect().width > 0).length`)
		if charts != 3 || drawn == 0 {
			t.Errorf("the health panel shows %v charts with %v drawn bars, want 3 charts with bars", charts, drawn)
		}
		b.screenshotOf(artifacts, "health.png", "#health")
	})

	t.Run("VerdictPanel", func(t *testing.T) {
		b.t = t
		b.open(ordersPath + "?verdict=all")
		kind := eval[string](b, "read the verdict", `document.querySelector("#verdict .verdict-badge").textContent.trim()`)
		if kind != "✖ unsafe" {
			t.Errorf("orders' verdict over its whole history reads %q, want ✖ unsafe", kind)
		}
		b.screenshotOf(artifacts, "verdict.png", "#verdict")
		// The deciding reason links to the findings behind it.
		if href := b.markLink(`a.closest("#verdict li.decides") !== null`); href == "" {
			t.Fatal("the verdict's deciding reason links to no findings")
		}
		b.click()
		loc := b.waitLocation("the reason's findings", func(loc string) bool { return strings.Contains(loc, "/findings?") })
		if !strings.Contains(loc, "kind=unfenced_write") {
			t.Errorf("the unsafe reason led to %s, want the unfenced_write findings", loc)
		}
		b.noConsoleErrors("the verdict panel and its findings")
	})

	t.Run("HolderPageAndAtHighlight", func(t *testing.T) {
		b.t = t
		b.open(ordersPath + "?window=1h")
		// The holder named in the tenure list leads to its page.
		if href := b.markLink(`a.closest("td.holder") !== null && a.textContent.trim() === "worker-1"`); href != "/holders/worker-1" {
			t.Fatalf("the tenure list links worker-1 to %q, want its holder page", href)
		}
		b.click()
		b.waitLocation("the holder page", func(loc string) bool { return loc == "/holders/worker-1" })
		if h := b.heading(); h != "Holder worker-1" {
			t.Errorf("holder page heading = %q", h)
		}
		b.screenshot(artifacts, "holder.png")
		// Its tenure of orders opens the lock at the grant, highlighted.
		if b.markLink(pathIs(ordersPath)+` && new URL(a.href).searchParams.has("at")`) == "" {
			t.Fatalf("the holder page has no link to %s at a grant", ordersPath)
		}
		b.click()
		b.waitLocation("the lock at the grant", func(loc string) bool { return strings.HasPrefix(loc, ordersPath+"?at=") })
		b.run("wait for the banner", chromedp.WaitVisible(chromedp.CSS("#at")))
		banner := eval[string](b, "read the banner", `document.querySelector("#at").textContent.replace(/\s+/g, " ").trim()`)
		if !strings.Contains(banner, "held by worker-1 with token 41") {
			t.Errorf("the banner reads %q, want worker-1 holding token 41", banner)
		}
		marked := eval[string](b, "read the highlighted tenure", `(() => {
			const row = document.querySelector("tr.at-current td.holder");
			const bar = document.querySelector("svg.timeline a.tenure.at title");
			return (row ? row.textContent.trim() : "") + "|" + (bar ? bar.textContent.split("·")[0].trim() : "");
		})()`)
		if marked != "worker-1|worker-1" {
			t.Errorf("highlighted tenure row|bar = %q, want worker-1|worker-1", marked)
		}
		b.screenshotOf(artifacts, "lock-at.png", "main")
		b.noConsoleErrors("the holder page and the lock at a grant")
	})

	t.Run("FollowFindingToTimeline", func(t *testing.T) {
		b.t = t
		b.open("/findings")
		// The stale write's row links to the lock's timeline around it.
		href := b.markLink(fmt.Sprintf(`%s && (a.closest("tr, li, article, section") || a).textContent.includes("stale_write") &&
			(/[?&]from=/.test(new URL(a.href).search) || /timeline/i.test(a.textContent + a.className))`, pathIs(ordersPath)))
		if href == "" {
			href = b.markLink(fmt.Sprintf(`%s && (a.closest("tr, li, article, section") || a).textContent.includes("stale_write")`, pathIs(ordersPath)))
		}
		if href == "" {
			t.Fatalf("no stale_write finding links to %s", ordersPath)
		}
		b.click()
		b.waitLocation("the finding's timeline", func(loc string) bool { return strings.HasPrefix(loc, ordersPath) })
		if h := b.heading(); !strings.Contains(h, "/locks/orders") {
			t.Errorf("following the finding (%s) led to %q", href, h)
		}
		b.noConsoleErrors("the findings page and the finding's timeline")
	})

	t.Run("ExportReport", func(t *testing.T) {
		b.t = t
		v := url.Values{}
		v.Set("from", base.Add(-time.Minute).Format(time.RFC3339))
		v.Set("to", base.Add(time.Minute).Format(time.RFC3339))
		b.open("/review?" + v.Encode())
		if h := b.heading(); h != "Incident review" {
			t.Errorf("review heading = %q", h)
		}
		b.screenshot(artifacts, "review.png")
		href := b.markLink(`new URL(a.href).pathname === "/review.md"`)
		if href == "" {
			t.Fatal("the review page has no Markdown export link")
		}
		// Download it as the browser would: the link is an attachment.
		res, err := http.Get(b.base + href)
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
		b.noConsoleErrors("the incident review")
	})

	t.Run("EveryPageWithoutConsoleErrors", func(t *testing.T) {
		b.t = t
		for _, path := range []string{"/", "/locks", "/locks?class=all", ordersPath, billingPath, "/findings", "/sources", "/review"} {
			b.open(path)
			b.noConsoleErrors(path)
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
