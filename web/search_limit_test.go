package web

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A search longer than any lock name or holder is refused before SQLite's
// LIKE pattern limit (50,000 bytes) turns it into a 500.
func TestLockSearchLength(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/api/v1/locks", "/locks"} {
		t.Run(strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			for _, q := range []string{strings.Repeat("x", 50_000), strings.Repeat("é", maxQuery+1)} {
				res, body := f.do(t, http.MethodGet, path+"?q="+url.QueryEscape(q), nil)
				if res.StatusCode != http.StatusBadRequest {
					t.Fatalf("q of %d characters: status %d, want 400; body %.200s", len([]rune(q)), res.StatusCode, body)
				}
				if !bytes.Contains(body, []byte("q: must be at most 1024 characters")) {
					t.Errorf("q of %d characters: body %.300s, want it to name q and the limit", len([]rune(q)), body)
				}
			}
			// At the limit, with every character LIKE escapes, it works.
			q := strings.Repeat(`%_\`, maxQuery/3) + strings.Repeat("é", maxQuery%3)
			if res, body := f.do(t, http.MethodGet, path+"?q="+url.QueryEscape(q), nil); res.StatusCode != http.StatusOK {
				t.Fatalf("q of %d characters: status %d, want 200; body %.300s", maxQuery, res.StatusCode, body)
			}
		})
	}
}
