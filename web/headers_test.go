package web

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// wantSecurityHeaders are on every response, whatever its route or status.
var wantSecurityHeaders = map[string]string{
	"Content-Security-Policy": contentSecurityPolicy,
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "same-origin",
}

func checkSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, want := range wantSecurityHeaders {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %s = %q, want %q", what, k, got, want)
		}
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		name, method, path string
		header             []string
		status             int
	}{
		{"Page", http.MethodGet, "/", nil, http.StatusOK},
		{"LockPage", http.MethodGet, "/locks/" + itoa(f.orders.ID), nil, http.StatusOK},
		{"LiveRegion", http.MethodGet, "/", []string{"HX-Request", "true"}, http.StatusOK},
		{"Review", http.MethodGet, "/review", nil, http.StatusOK},
		{"API", http.MethodGet, "/api/v1/locks", nil, http.StatusOK},
		{"Static", http.MethodGet, "/static/app.js", nil, http.StatusOK},
		{"StaticMissing", http.MethodGet, "/static/nope.js", nil, http.StatusNotFound},
		{"Metrics", http.MethodGet, "/metrics", nil, http.StatusOK},
		{"Healthz", http.MethodGet, "/healthz", nil, http.StatusOK},
		{"Readyz", http.MethodGet, "/readyz", nil, http.StatusOK},
		{"Head", http.MethodHead, "/", nil, http.StatusOK},
		{"HeadNotFound", http.MethodHead, "/nope", nil, http.StatusNotFound},
		{"PageNotFound", http.MethodGet, "/nope", nil, http.StatusNotFound},
		{"APINotFound", http.MethodGet, "/api/v1/locks/987654", nil, http.StatusNotFound},
		{"APIBadRequest", http.MethodGet, "/api/v1/locks?from=yesterday", nil, http.StatusBadRequest},
		{"MethodNotAllowed", http.MethodDelete, "/api/v1/locks", nil, http.StatusMethodNotAllowed},
		{"IngestUnauthorized", http.MethodPost, "/api/v1/writes", nil, http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := f.do(t, tt.method, tt.path, nil, tt.header...)
			if res.StatusCode != tt.status {
				t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, res.StatusCode, tt.status)
			}
			checkSecurityHeaders(t, tt.method+" "+tt.path, res.Header)
		})
	}

	// Refusals carry them too: the headers are set before authentication.
	t.Run("BasicRefusal", func(t *testing.T) {
		f := newFixture(t, withAuth(Auth{Users: map[string]string{"a": bcryptHash(t, "pw")}}))
		res, _ := f.do(t, http.MethodGet, "/", nil)
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", res.StatusCode)
		}
		checkSecurityHeaders(t, "401", res.Header)
	})
	t.Run("ProxyRefusal", func(t *testing.T) {
		f := newFixture(t, withAuth(Auth{ProxyHeader: "X-Forwarded-User", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}))
		res, body := fetch(t, http.DefaultClient, http.MethodGet, serveReal(t, f.server)+"/locks", nil, "X-Forwarded-User", "alice")
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", res.StatusCode)
		}
		checkSecurityHeaders(t, "403", res.Header)
		if !strings.Contains(body, "Forbidden") {
			t.Errorf("403 page %.200q does not say Forbidden", body)
		}
	})
}

// The policy is strict: nothing inline, nothing from elsewhere, no framing.
func TestContentSecurityPolicyIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
		if !strings.Contains(contentSecurityPolicy, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", contentSecurityPolicy, want)
		}
	}
	for _, bad := range []string{"unsafe", "*", "data:", "http:", "https:"} {
		if strings.Contains(contentSecurityPolicy, bad) {
			t.Errorf("Content-Security-Policy %q allows %q", contentSecurityPolicy, bad)
		}
	}
}
