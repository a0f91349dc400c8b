package web

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard works in a real browser behind basic authentication over
// HTTPS: the Content-Security-Policy lets htmx and app.js run, and the live
// regions' background requests carry the credentials the user gave for the
// page, so they refresh rather than fail with 401.
func TestBrowserBasicAuthOverTLS(t *testing.T) {
	chromium := chromiumPath(t)
	certFile, keyFile, _ := selfSigned(t, t.TempDir(), "browser")
	f := newFixture(t, func(c *Config) { c.TLS = serverTLS(t, certFile, keyFile) },
		withAuth(Auth{Users: map[string]string{"alice": bcryptHash(t, "correct horse")}}))
	base := serveReal(t, f.server)
	// The certificate is self-signed: the browser is told to accept it, as a
	// user would after checking its fingerprint.
	b := startBrowser(t, chromium, base, chromedp.IgnoreCertErrors)

	t.Run("OverviewRefreshesWithCredentials", func(t *testing.T) {
		b.t = t
		withCreds := strings.Replace(base, "https://", "https://alice:correct%20horse@", 1)
		b.run("sign in", chromedp.Navigate(withCreds+"/findings"), chromedp.WaitVisible(chromedp.CSS("h1")))
		// From here on the credentials come from the browser's cache for the
		// realm, as after a login dialog, not from the address.
		b.run("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("h1")))
		if h := b.heading(); h == "Unauthorized" {
			t.Fatalf("the browser's credentials were refused")
		}
		if href := eval[string](b, "location", `location.href`); strings.Contains(href, "@") {
			t.Fatalf("location %q still carries the credentials", href)
		}
		if !eval[bool](b, "htmx loaded", `typeof htmx === "object"`) {
			t.Fatal("htmx did not load: the Content-Security-Policy or authentication blocked /static/htmx.min.js")
		}
		eval[bool](b, "watch live requests", `(() => {
			window.__lwStatuses = [];
			document.body.addEventListener("htmx:afterRequest", e => window.__lwStatuses.push(e.detail.xhr.status));
			return true;
		})()`)
		deadline := time.Now().Add(3*refreshOverview*time.Second + 5*time.Second)
		var statuses []int
		for len(statuses) == 0 && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			statuses = eval[[]int](b, "live statuses", `window.__lwStatuses`)
		}
		if len(statuses) == 0 {
			t.Fatalf("no live region refreshed within %s", 3*refreshOverview*time.Second)
		}
		for _, s := range statuses {
			if s != 200 {
				t.Errorf("a live refresh answered %d, want 200: statuses %v", s, statuses)
			}
		}
		b.noConsoleErrors("the overview behind basic authentication")
	})

	// Headless Chromium has no login dialog, so a page without credentials
	// cannot be opened at all; a request from the page that omits them shows
	// the refusal instead.
	t.Run("RefusedWithoutCredentials", func(t *testing.T) {
		b.t = t
		status := eval[int](b, "fetch without credentials", `fetch(location.origin + "/api/v1/locks", {credentials: "omit"}).then(r => r.status)`,
			chromedp.EvalAwaitPromise)
		if status != 401 {
			t.Errorf("GET /api/v1/locks without credentials from the page: %d, want 401", status)
		}
		b.console.take() // the refused fetch is logged as a failed load
	})
}
