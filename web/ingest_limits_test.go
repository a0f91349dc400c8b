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
