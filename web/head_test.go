package web

import (
	"net/http"
	"strings"
	"testing"
)

// Every GET route answers HEAD (RFC 9110 9.3.2) with GET's status and
// headers and no body, over a real connection: probes and link checkers
// send HEAD.
func TestHeadWhereverGet(t *testing.T) {
	f := newFixture(t)
	base := serveReal(t, f.server)
	var paths []string
	for _, r := range f.server.echo.Routes() {
		if r.Method != http.MethodGet {
			continue
		}
		p := strings.ReplaceAll(r.Path, ":id", itoa(f.orders.ID))
		if strings.HasSuffix(p, "*") {
			paths = append(paths, strings.TrimSuffix(p, "*")+"app.js", strings.TrimSuffix(p, "*")+"nope.js")
			continue
		}
		paths = append(paths, p)
	}
	if len(paths) < 15 {
		t.Fatalf("found %d GET routes: %v", len(paths), paths)
	}
	// Answers that are not 200 too: not found, a bad parameter.
	paths = append(paths, "/locks/987654", "/api/v1/locks/987654", "/api/v1/locks?from=yesterday", "/nope")
	for _, p := range paths {
		get, _ := fetch(t, http.DefaultClient, http.MethodGet, base+p, nil)
		head, body := fetch(t, http.DefaultClient, http.MethodHead, base+p, nil)
		if head.StatusCode != get.StatusCode {
			t.Errorf("HEAD %s: status %d, GET's is %d", p, head.StatusCode, get.StatusCode)
		}
		if body != "" {
			t.Errorf("HEAD %s: body of %d bytes, want none", p, len(body))
		}
		if h, g := head.Header.Get("Content-Type"), get.Header.Get("Content-Type"); h != g {
			t.Errorf("HEAD %s: Content-Type %q, GET's is %q", p, h, g)
		}
	}
	// Only GET gains HEAD: POST routes still refuse it.
	if res, _ := fetch(t, http.DefaultClient, http.MethodHead, base+"/api/v1/writes", nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("HEAD /api/v1/writes: status %d, want 405", res.StatusCode)
	}
}
