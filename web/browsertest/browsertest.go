// Package browsertest drives Debian's Chromium through the dashboard for
// tests: a headless tab (Start) that opens pages, evaluates JavaScript
// (Eval), follows links, gathers what the pages log as errors and saves
// screenshots. Tests select elements by stable things only (hrefs, form
// field names, headings), so the pages can change around them.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ChromiumPath finds Chromium: $LEASEWATCH_CHROMIUM, /usr/bin/chromium, or
// chromium on $PATH. Without it the tests fail in CI and are skipped elsewhere.
func ChromiumPath(t *testing.T) string {
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

// ArtifactsDir is where screenshots go: $LEASEWATCH_ARTIFACTS, or a
// temporary directory.
func ArtifactsDir(t *testing.T) string {
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

// Browser is one Chromium tab on the dashboard. T is the test its failures
// go to: set it to each subtest's.
type Browser struct {
	T       *testing.T
	ctx     context.Context
	base    string
	console *consoleLog
}

// Start opens a headless Chromium tab on the dashboard at base (a URL with
// no trailing slash), with extra options; it closes with the test.
func Start(t *testing.T, execPath, base string, extra ...chromedp.ExecAllocatorOption) *Browser {
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
	b := &Browser{T: t, ctx: ctx, base: base, console: &consoleLog{}}
	// Listen starts the browser and sees every event from then on, in order,
	// before the command that follows it returns.
	if err := chromedp.Listen(ctx, b.console.listen); err != nil {
		t.Fatalf("start chromium %s: %v", execPath, err)
	}
	return b
}

// Run runs actions under a deadline and fails the test if they fail.
func (b *Browser) Run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.T.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates a script in the page under a deadline.
func Eval[T any](b *Browser, what, js string, opts ...chromedp.EvaluateOption) T {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		b.T.Fatalf("%s: %v", what, err)
	}
	return v
}

// Open navigates to a dashboard path and waits for its first heading.
func (b *Browser) Open(path string) {
	b.T.Helper()
	b.Run("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("h1")))
}

// Location is the tab's current path and query (no origin, no fragment), or
// "" while the tab is between two pages.
func (b *Browser) Location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState === "complete" && document.querySelector("h1") ? location.pathname + location.search : ""`))
	if err != nil {
		return "" // the old page is gone and the new one not there yet
	}
	return loc
}

// WaitLocation waits until the tab shows a complete page whose location
// satisfies ok.
func (b *Browser) WaitLocation(what string, ok func(loc string) bool) string {
	b.T.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if loc := b.Location(); loc != "" && ok(loc) {
			return loc
		}
		if time.Now().After(deadline) {
			b.T.Fatalf("timed out waiting for %s; location is %q", what, b.Location())
		}
		select {
		case <-b.ctx.Done():
			b.T.Fatalf("browser gone while waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Heading is the text of the page's first h1.
func (b *Browser) Heading() string {
	b.T.Helper()
	h := Eval[string](b, "read h1", `document.querySelector("h1").textContent`)
	return strings.Join(strings.Fields(h), " ")
}

// MarkLink finds a link with a script expression over the page's links (each
// an <a> element named a) and marks it so a real click can target it. It
// returns the link's href, or "" if none matched.
func (b *Browser) MarkLink(filter string) string {
	b.T.Helper()
	js := `(() => {
		document.querySelectorAll("[data-test-target]").forEach(e => e.removeAttribute("data-test-target"));
		const a = Array.from(document.querySelectorAll("a[href]")).find(a => ` + filter + `);
		if (!a) return "";
		a.setAttribute("data-test-target", "1");
		a.scrollIntoView();
		return a.getAttribute("href");
	})()`
	return Eval[string](b, "find link", js)
}

// Click clicks the link markLink marked, as a user would.
func (b *Browser) Click() {
	b.T.Helper()
	b.Run("click", chromedp.Click(chromedp.CSS(`[data-test-target="1"]`), chromedp.NodeVisible))
}

// NoConsoleErrors fails if the pages logged errors since the last check.
func (b *Browser) NoConsoleErrors(page string) {
	b.T.Helper()
	// Let late errors (a failed subresource, a script after load) arrive.
	b.Run("settle", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](`document.readyState === "complete"`, chromedp.WithPollingTimeout(10*time.Second))(ctx, t)
		return err
	}))
	for _, e := range b.console.take() {
		b.T.Errorf("%s logged an error: %s", page, e)
	}
}

func (b *Browser) Screenshot(dir, name string) { b.ScreenshotOf(dir, name, "") }

// ScreenshotOf saves a screenshot of the element sel selects, or of the whole
// page when sel is empty.
func (b *Browser) ScreenshotOf(dir, name, sel string) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	action := chromedp.FullScreenshot(100)
	if sel != "" {
		action = chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible)
	}
	png, err := chromedp.Run(ctx, action)
	if err != nil {
		b.T.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.T.Fatalf("save screenshot: %v", err)
	}
	b.T.Logf("screenshot: %s", path)
}

// Base is the dashboard's URL the tab was started on.
func (b *Browser) Base() string { return b.base }

// TakeConsole returns the errors the pages logged since the last call (or
// NoConsoleErrors), and forgets them.
func (b *Browser) TakeConsole() []string { return b.console.take() }
