package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// clocksFixture is the web fixture with a clock estimator: a leader 300 ms
// ahead whose fastest renewal took 3 ms, over two minutes; a standby 200 ms
// behind; a node 50 ms behind; a hostile holder 10 ms ahead.
func clocksFixture(t *testing.T) *fixture {
	t.Helper()
	c := audit.NewHolderClocks(0)
	renew := func(holder string, class audit.Class, offset, made, delay time.Duration) {
		m := now.Add(-2 * time.Minute).Add(made)
		c.Observe(audit.HolderKey{Source: "cluster-a", Holder: holder}, class, m.Add(delay), m.Add(offset))
	}
	renew("leader", audit.ClassLock, 300*time.Millisecond, 0, 3*time.Millisecond)
	renew("leader", audit.ClassLock, 300*time.Millisecond, time.Minute, 4*time.Millisecond)
	renew("standby", audit.ClassLock, -200*time.Millisecond, 0, 2*time.Millisecond)
	renew("node-1", audit.ClassHeartbeat, -50*time.Millisecond, 0, time.Millisecond)
	renew(xss, audit.ClassLock, 10*time.Millisecond, 0, time.Millisecond)
	return newFixture(t, func(cfg *Config) { cfg.Clocks = c })
}

// GET /api/v1/clocks lists the largest offsets either way first, as the
// OpenAPI document says, and names a bad parameter.
func TestAPIClocks(t *testing.T) {
	f := clocksFixture(t)
	m := f.getJSON(t, "/api/v1/clocks", http.StatusOK)
	if m["total"] != 4.0 || m["window_ms"] != 600000.0 {
		t.Fatalf("total %v, window_ms %v; want 4, 600000", m["total"], m["window_ms"])
	}
	var got []string
	for _, c := range m["clocks"].([]any) {
		c := c.(map[string]any)
		b, _ := json.Marshal([]any{c["holder"], c["class"], c["offset_ms"], c["bound_ms"], c["samples"], c["minutes"]})
		got = append(got, string(b))
	}
	want := []string{
		`["leader","lock",297,1,2,2]`,
		`["standby","lock",-202,null,1,1]`,
		`["node-1","heartbeat",-51,null,1,1]`,
		`["\u003cscript\u003ealert(1)\u003c/script\u003e","lock",9,null,1,1]`, // json.Marshal escapes < and >
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("clocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for target, n := range map[string]int{
		"/api/v1/clocks?class=heartbeat":             1,
		"/api/v1/clocks?limit=1":                     1,
		"/api/v1/clocks?source=cluster-a&class=lock": 3,
		"/api/v1/clocks?holder=standby":              1,
		"/api/v1/clocks?source=prod-etcd":            0,
	} {
		if got := len(f.getJSON(t, target, http.StatusOK)["clocks"].([]any)); got != n {
			t.Errorf("GET %s: %d clocks, want %d", target, got, n)
		}
	}
	for target, param := range map[string]string{
		"/api/v1/clocks?limit=0":     "limit",
		"/api/v1/clocks?limit=many":  "limit",
		"/api/v1/clocks?class=mutex": "class",
		"/clocks?class=heartbeats":   "class",
	} {
		res, body := f.do(t, http.MethodGet, target, nil)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), param+":") {
			t.Errorf("GET %s: %d %.200s, want 400 naming %s", target, res.StatusCode, body, param)
		}
	}

	v := openAPIValidator(t, openAPIJSON)
	for _, target := range []string{"/api/v1/clocks", "/api/v1/clocks?class=all&limit=2", "/api/v1/clocks?class=mutex"} {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, req)
		resp := rec.Result()
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
			for _, e := range errs {
				t.Errorf("GET %s: %s: %s", target, e.Message, e.Reason)
			}
		}
	}
}

// Without an estimator the list is empty, not an error.
func TestAPIClocksWithoutEstimator(t *testing.T) {
	f := newFixture(t)
	m := f.getJSON(t, "/api/v1/clocks", http.StatusOK)
	if len(m["clocks"].([]any)) != 0 || m["total"] != 0.0 {
		t.Fatalf("clocks without an estimator = %v", m)
	}
}

// The clocks page shows the same rows, escaped, and the navigation bar
// links to it.
func TestClocksPage(t *testing.T) {
	f := clocksFixture(t)
	res, body := f.do(t, http.MethodGet, "/clocks", nil)
	page := string(body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /clocks: %d %s", res.StatusCode, body)
	}
	order := []string{"leader", "+297 ms", "±1.0 ms", "standby", "-202 ms", "node-1", "heartbeat", "&lt;script&gt;alert(1)&lt;/script&gt;", "+9.0 ms"}
	at := 0
	for _, s := range order {
		i := strings.Index(page[at:], s)
		if i < 0 {
			t.Fatalf("the clocks page lacks %q after byte %d (want, in order, %q)", s, at, order)
		}
		at += i + len(s)
	}
	if strings.Contains(page, xss) {
		t.Fatal("the clocks page shows a holder unescaped")
	}
	if !strings.Contains(page, `<a href="/clocks" aria-current="page" class="current">Clocks</a>`) {
		t.Fatal("the navigation bar does not mark Clocks current")
	}
	_, body = f.do(t, http.MethodGet, "/clocks?class=heartbeat", nil)
	if page := string(body); !strings.Contains(page, "node-1") || strings.Contains(page, "standby") || !strings.Contains(page, "1 holder,") {
		t.Fatalf("the heartbeats' clocks page lists others: %.2000s", page)
	}
	_, body = f.do(t, http.MethodGet, "/", nil)
	if !strings.Contains(string(body), `<a href="/clocks">Clocks</a>`) {
		t.Fatal("the overview's navigation bar has no link to /clocks")
	}
}
