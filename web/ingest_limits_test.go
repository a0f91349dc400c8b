package web

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"
)

// leasewatch takes bodies as they are: a compressed one is refused, naming
// the header, rather than read as broken JSON.
func TestIngestContentEncoding(t *testing.T) {
	f := newFixture(t)
	report := `{"source":"cache","lock":"lock:enc","resource":"r","outcome":"accepted"}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(report))
	zw.Close()

	for _, tc := range []struct{ name, encoding, body string }{
		{"Gzip", "gzip", gz.String()},
		{"GzipUpper", "GZIP", gz.String()},
		{"Brotli", "br", report},
		{"Listed", "identity, gzip", gz.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := f.do(t, http.MethodPost, "/api/v1/writes", strings.NewReader(tc.body),
				"Authorization", bearer, "Content-Type", "application/json", "Content-Encoding", tc.encoding)
			if res.StatusCode != http.StatusUnsupportedMediaType {
				t.Fatalf("Content-Encoding %s: status %d, want 415; body %s", tc.encoding, res.StatusCode, body)
			}
			if !bytes.Contains(body, []byte(`"error":"Content-Encoding: `)) {
				t.Errorf("body %s, want an error naming Content-Encoding", body)
			}
			if got := res.Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("Accept-Encoding = %q, want identity", got)
			}
		})
	}
	if ev := f.writeEvents(t, "cache", "lock:enc"); len(ev) != 0 {
		t.Fatalf("refused encodings stored %d writes", len(ev))
	}
	t.Run("Identity", func(t *testing.T) {
		res, body := f.do(t, http.MethodPost, "/api/v1/writes", strings.NewReader(report),
			"Authorization", bearer, "Content-Type", "application/json", "Content-Encoding", "identity")
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("Content-Encoding identity: status %d, want 202; body %s", res.StatusCode, body)
		}
	})
}

// Ingest takes JSON only: a body sent as a form, as text, under another
// JSON-like type or with no Content-Type is refused with 415 naming what to
// send, and nothing of it is stored, on both ingest endpoints.
func TestIngestContentType(t *testing.T) {
	f := newFixture(t)
	bodies := map[string]string{
		"/api/v1/writes":  `{"source":"cache","lock":"lock:ctype","resource":"r","outcome":"accepted"}`,
		"/api/v1/beliefs": `{"source":"cache","lock":"lock:ctype","token":1}`,
	}
	for path, body := range bodies {
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/problem+json", "application/jsonx", "json"} {
			t.Run(path+" "+ct, func(t *testing.T) {
				hdr := []string{"Authorization", bearer}
				if ct != "" {
					hdr = append(hdr, "Content-Type", ct)
				}
				res, b := f.do(t, http.MethodPost, path, strings.NewReader(body), hdr...)
				if res.StatusCode != http.StatusUnsupportedMediaType || !bytes.Contains(b, []byte(`send Content-Type: application/json`)) {
					t.Fatalf("Content-Type %q: %d %s, want 415 naming application/json", ct, res.StatusCode, b)
				}
			})
		}
	}
	if ev := f.writeEvents(t, "cache", "lock:ctype"); len(ev) != 0 {
		t.Fatalf("refused content types stored %d writes", len(ev))
	}
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		res, b := f.do(t, http.MethodPost, "/api/v1/writes", strings.NewReader(bodies["/api/v1/writes"]), "Authorization", bearer, "Content-Type", ct)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("Content-Type %q: %d %s, want 202", ct, res.StatusCode, b)
		}
	}
}

// A resource rejects a write because its token is below the highest it has
// accepted; one above it cannot have been rejected for its token.
func TestIngestRejectedAboveHighestToken(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ name, body, want string }{
		{"Object", `{"source":"cache","lock":"lock:ht","resource":"r","outcome":"rejected","token":43,"highest_token":42}`,
			"highest_token: 42 is below the rejected write's token 43"},
		{"Array", `[{"source":"cache","lock":"lock:ht","resource":"r","outcome":"rejected","token":41,"highest_token":42},
			{"source":"cache","lock":"lock:ht","resource":"r","outcome":"rejected","token":9223372036854775807,"highest_token":0}]`,
			"writes[1].highest_token: 0 is below the rejected write's token 9223372036854775807"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, m := f.post(t, tc.body, bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d %v, want 400", res.StatusCode, m)
			}
			if msg, _ := m["error"].(string); !strings.HasPrefix(msg, tc.want) {
				t.Errorf("error = %q, want it to start %q", msg, tc.want)
			}
		})
	}
	if ev := f.writeEvents(t, "cache", "lock:ht"); len(ev) != 0 {
		t.Fatalf("refused reports stored %d writes", len(ev))
	}
	// Equal tokens: a resource that takes only tokens above its highest
	// rejects a second write with the same one.
	body := `{"source":"cache","lock":"lock:ht","resource":"r","outcome":"rejected","token":42,"highest_token":42}`
	if res, m := f.post(t, body, bearer); res.StatusCode != http.StatusAccepted {
		t.Fatalf("rejected write at the highest token: status %d %v, want 202", res.StatusCode, m)
	}
}
