package web

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasewatch/leasewatch/web/browsertest"
	"github.com/leasewatch/leasewatch/web/present"
)

// The dashboard works in a real browser behind basic authentication over
// HTTPS: the Content-Security-Policy lets htmx and app.js run, and the live
// regions' background requests carry the credentials the user gave for the
// page, so they refresh rather than fail with 401.
func TestBrowserBasicAuthOverTLS(t *testing.T) {
	chromium := browsertest.ChromiumPath(t)
	certFile, keyFile, _ := selfSigned(t, t.TempDir(), "browser")
	f := newFixture(t, func(c *Config) { c.TLS = serverTLS(t, certFile, keyFile) },
		withAuth(Auth{Users: map[string]string{"alice": bcryptHash(t, "correct horse")}}))
	base := serveReal(t, f.server)
	// The certificate is self-signed: the browser is told to accept it, as a
	// user would after checking its fingerprint.
	b := browsertest.Start(t, chromium, base, chromedp.IgnoreCertErrors)

	t.Run("OverviewRefreshesWithCredentials", func(t *testing.T) {
		b.T = t
		withCreds := strings.Replace(base, "https://", "https://alice:correct%20horse@", 1)
		b.Run("sign in", chromedp.Navigate(withCreds+"/findings"), chromedp.WaitVisible(chromedp.CSS("h1")))
		// From here on the credentials come from the browser's cache for the
		// realm, as after a login dialog, not from the address.
		b.Run("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("h1")))
		if h := b.Heading(); h == "Unauthorized" {
			t.Fatalf("the browser's credentials were refused")
		}
		if href := browsertest.Eval[string](b, "location", `location.href`); strings.Contains(href, "@") {
			t.Fatalf("location %q still carries the credentials", href)
		}
		if !browsertest.Eval[bool](b, "htmx loaded", `typeof htmx === "object"`) {
			t.Fatal("htmx did not load: the Content-Security-Policy or authentication blocked /static/htmx.min.js")
		}
		browsertest.Eval[bool](b, "watch live requests", `(() => {
			window.__lwStatuses = [];
			document.body.addEventListener("htmx:afterRequest", e => window.__lwStatuses.push(e.detail.xhr.status));
			return true;
		})()`)
		deadline := time.Now().Add(3*present.RefreshOverview*time.Second + 5*time.Second)
		var statuses []int
		for len(statuses) == 0 && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			statuses = browsertest.Eval[[]int](b, "live statuses", `window.__lwStatuses`)
		}
		if len(statuses) == 0 {
			t.Fatalf("no live region refreshed within %s", 3*present.RefreshOverview*time.Second)
		}
		for _, s := range statuses {
			if s != 200 {
				t.Errorf("a live refresh answered %d, want 200: statuses %v", s, statuses)
			}
		}
		b.NoConsoleErrors("the overview behind basic authentication")
	})

	// Headless Chromium has no login dialog, so a page without credentials
	// cannot be opened at all; a request from the page that omits them shows
	// the refusal instead.
	t.Run("RefusedWithoutCredentials", func(t *testing.T) {
		b.T = t
		status := browsertest.Eval[int](b, "fetch without credentials", `fetch(location.origin + "/api/v1/locks", {credentials: "omit"}).then(r => r.status)`,
			chromedp.EvalAwaitPromise)
		if status != 401 {
			t.Errorf("GET /api/v1/locks without credentials from the page: %d, want 401", status)
		}
		b.TakeConsole() // the refused fetch is logged as a failed load
	})
}
