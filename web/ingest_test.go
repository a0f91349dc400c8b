package web

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// post sends a write report body with the given Authorization header.
func (f *fixture) post(t *testing.T, body, auth string) (*http.Response, map[string]any) {
	t.Helper()
	return f.postTo(t, "/api/v1/writes", body, auth)
}

// postTo sends an ingest body to path with the given Authorization header.
func (f *fixture) postTo(t *testing.T, path, body, auth string) (*http.Response, map[string]any) {
	t.Helper()
	hdr := []string{"Content-Type", "application/json"}
	if auth != "" {
		hdr = append(hdr, "Authorization", auth)
	}
	res, b := f.do(t, http.MethodPost, path, strings.NewReader(body), hdr...)
	var m map[string]any
	if err := jsonUnmarshal(b, &m); err != nil {
		t.Fatalf("POST %s: decode %q: %v", path, b, err)
	}
	return res, m
}

// writeEvents returns the write events stored for a lock, or none if the lock
// does not exist.
func (f *fixture) writeEvents(t *testing.T, source, lock string) []audit.Event {
	t.Helper()
	ctx := context.Background()
	l, err := f.store.LockByKey(ctx, audit.LockKey{Source: source, Name: lock})
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return nil
	}
	if err != nil {
		t.Fatalf("lock %s/%s: %v", source, lock, err)
	}
	events, err := f.store.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("events of %s/%s: %v", source, lock, err)
	}
	var out []audit.Event
	for _, e := range events {
		if e.Kind == audit.EventWriteAccepted || e.Kind == audit.EventWriteRejected {
			out = append(out, e)
		}
	}
	return out
}

const bearer = "Bearer " + ingestToken

func TestIngestStoresWrites(t *testing.T) {
	f := newFixture(t)
	body := `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,
		"outcome":"accepted","highest_token":42,"holder":"worker-2","at":"2025-03-01T11:00:00.5Z","request_id":"r-100"}`
	res, m := f.post(t, body, bearer)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST = %d %v, want 202", res.StatusCode, m)
	}
	wantKeys(t, "response", m, "accepted")
	wantNumber(t, "accepted", m["accepted"], 1)

	var got []audit.Event
	for _, e := range f.writeEvents(t, "prod-etcd", "/locks/orders") {
		if e.RequestID == "r-100" {
			got = append(got, e)
		}
	}
	if len(got) != 1 {
		t.Fatalf("stored %d events with request r-100, want 1", len(got))
	}
	e := got[0]
	if e.Kind != audit.EventWriteAccepted || e.Resource != "orders-db" || e.Token == nil || *e.Token != 42 ||
		!e.At.Equal(time.Date(2025, 3, 1, 11, 0, 0, 5e8, time.UTC)) {
		t.Errorf("stored event = %+v", e)
	}

	t.Run("RetryIsIdempotent", func(t *testing.T) {
		res, m := f.post(t, body, bearer)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("retry = %d %v, want 202", res.StatusCode, m)
		}
		n := 0
		for _, e := range f.writeEvents(t, "prod-etcd", "/locks/orders") {
			if e.RequestID == "r-100" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("after a retry, %d events with request r-100, want 1", n)
		}
	})

	t.Run("Array", func(t *testing.T) {
		body := `[{"source":"cache","lock":"lock:cart","resource":"carts","token":7,"outcome":"accepted"},
			{"source":"cache","lock":"lock:cart","resource":"carts","token":null,"outcome":"rejected","holder":"h"}]`
		res, m := f.post(t, body, bearer)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("POST array = %d %v, want 202", res.StatusCode, m)
		}
		wantNumber(t, "accepted", m["accepted"], 2)
		events := f.writeEvents(t, "cache", "lock:cart")
		if len(events) != 2 {
			t.Fatalf("stored %d write events for cache/lock:cart, want 2", len(events))
		}
		// at defaults to the receipt time.
		for _, e := range events {
			if !e.At.Equal(now) {
				t.Errorf("event at = %v, want receipt time %v", e.At, now)
			}
		}
	})

	t.Run("Metric", func(t *testing.T) {
		_, body := f.do(t, http.MethodGet, "/metrics", nil)
		if !bytes.Contains(body, []byte(`leasewatch_ingest_writes_total{outcome="accepted"} 3`)) ||
			!bytes.Contains(body, []byte(`leasewatch_ingest_writes_total{outcome="rejected"} 1`)) {
			t.Errorf("ingest counters wrong:\n%s", grepLines(body, "leasewatch_ingest_writes_total"))
		}
	})
}

func TestIngestUnauthorized(t *testing.T) {
	body := `{"source":"cache","lock":"lock:a","resource":"r","outcome":"accepted"}`
	f := newFixture(t)
	for _, tc := range []struct{ name, auth string }{
		{"Missing", ""},
		{"Wrong", "Bearer nope"},
		{"Prefix", "Bearer " + ingestToken[:4]},
		{"NotBearer", "Basic " + ingestToken},
		{"Empty", "Bearer "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, m := f.post(t, body, tc.auth)
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST = %d, want 401", res.StatusCode)
			}
			wantError(t, m, "token")
		})
	}
	t.Run("NoTokensConfigured", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.IngestTokens = []string{""} })
		for _, auth := range []string{bearer, "Bearer ", "Bearer  "} {
			res, _ := f.post(t, body, auth)
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST with %q and no tokens configured = %d, want 401", auth, res.StatusCode)
			}
		}
	})
	if ev := f.writeEvents(t, "cache", "lock:a"); len(ev) != 0 {
		t.Fatalf("unauthorized requests stored %d events", len(ev))
	}
}

func TestIngestTooLarge(t *testing.T) {
	f := newFixture(t)
	pad := strings.Repeat(" ", maxIngestBody)
	body := `{"source":"cache","lock":"lock:big","resource":"r","outcome":"accepted"}` + pad
	t.Run("ContentLength", func(t *testing.T) {
		res, m := f.post(t, body, bearer)
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("POST %d bytes = %d, want 413", len(body), res.StatusCode)
		}
		wantError(t, m, "large")
	})
	t.Run("Chunked", func(t *testing.T) {
		// No Content-Length: the limit must hold while reading.
		req := newChunkedRequest(body)
		req.Header.Set("Authorization", bearer)
		req.Header.Set("Content-Type", "application/json")
		rec := newRecorder()
		f.handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked POST = %d, want 413", rec.Code)
		}
	})
	if ev := f.writeEvents(t, "cache", "lock:big"); len(ev) != 0 {
		t.Fatalf("oversize requests stored %d events", len(ev))
	}
}

func TestIngestInvalid(t *testing.T) {
	f := newFixture(t)
	ok := `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted"}`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"NotJSON", `{"source":`, "body: invalid JSON"},
		{"Empty", ``, "body"},
		{"Scalar", `42`, "body"},
		{"EmptyArray", `[]`, "writes: empty array"},
		{"ArrayOfScalars", `[1]`, "writes[0]: must be a write report object"},
		{"UnknownField", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","tokn":1}`,
			"tokn: unknown field"},
		{"DuplicateField", `{"source":"cache","source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted"}`,
			"source: duplicate field"},
		{"TokenString", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","token":"42"}`,
			"token: must be an integer or null"},
		{"TokenFraction", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","token":4.5}`,
			"token: must be an integer"},
		{"TokenNegative", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","token":-1}`,
			"token: must not be negative"},
		{"HighestTokenBool", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","highest_token":true}`,
			"highest_token: must be an integer or null"},
		{"LockNumber", `{"source":"cache","lock":7,"resource":"r","outcome":"accepted"}`, "lock: must be a string"},
		{"MissingSource", `{"lock":"lock:bad","resource":"r","outcome":"accepted"}`, "source: required"},
		{"MissingLock", `{"source":"cache","resource":"r","outcome":"accepted"}`, "lock: required"},
		{"MissingResource", `{"source":"cache","lock":"lock:bad","outcome":"accepted"}`, "resource: required"},
		{"MissingOutcome", `{"source":"cache","lock":"lock:bad","resource":"r"}`, "outcome: required"},
		{"EmptyLock", `{"source":"cache","lock":"","resource":"r","outcome":"accepted"}`, "lock: required"},
		{"UnknownSource", `{"source":"staging","lock":"lock:bad","resource":"r","outcome":"accepted"}`,
			`source: unknown source "staging"`},
		{"BadOutcome", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"ok"}`,
			`outcome: must be "accepted" or "rejected"`},
		{"BadAt", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","at":"2025-03-01 10:00"}`,
			"at: must be an RFC 3339 time"},
		{"AtNumber", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","at":1700000000}`,
			"at: must be a string"},
		{"BidiOverrideLock", `{"source":"cache","lock":"lock:\u202ebad","resource":"r","outcome":"accepted"}`,
			`lock: must not contain control characters or bidirectional controls: U+202E at character 6 (a collector records one escaped, as \xe2\x80\xae)`},
		{"BidiIsolateHolder", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","holder":"h\u2066"}`,
			"holder: must not contain control characters or bidirectional controls: U+2066"},
		{"RightToLeftMarkResource", `{"source":"cache","lock":"lock:bad","resource":"r\u200f","outcome":"accepted"}`,
			"resource: must not contain control characters or bidirectional controls: U+200F"},
		{"ArabicLetterMarkRequestID", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","request_id":"\u061c1"}`,
			"request_id: must not contain control characters or bidirectional controls: U+061C"},
		{"InvalidUTF8", "{\"source\":\"cache\",\"lock\":\"lock:bad\",\"resource\":\"r\xff\",\"outcome\":\"accepted\"}",
			"resource: must be valid UTF-8"},
		{"LoneSurrogate", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","holder":"\udc00"}`,
			"holder: must be valid UTF-8"},
		{"ControlChar", `{"source":"cache","lock":"lock:bad\u0007","resource":"r","outcome":"accepted"}`,
			"lock: must not contain control characters"},
		{"Newline", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","holder":"a\nb"}`,
			"holder: must not contain control characters"},
		{"LongString", `{"source":"cache","lock":"lock:bad","resource":"` + strings.Repeat("r", 1025) + `","outcome":"accepted"}`,
			"resource: must be at most 1024 characters"},
		{"LongRequestID", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","request_id":"` +
			strings.Repeat("x", 201) + `"}`, "request_id: must be at most 200 characters"},
		{"LongMultibyte", `{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","holder":"` +
			strings.Repeat("é", 1025) + `"}`, "holder: must be at most 1024 characters"},
		{"SecondOfArray", `[` + ok + `,{"source":"cache","lock":"lock:bad","resource":"r","outcome":"maybe"}]`,
			`writes[1].outcome: must be "accepted" or "rejected"`},
		{"FirstBadWins", `[` + ok + `,` + ok + `,{"source":"cache","lock":"lock:bad","resource":"r","outcome":"x"},{"bogus":1}]`,
			`writes[2].outcome`},
		{"TrailingData", ok + ` {}`, "body: invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, m := f.post(t, tc.body, bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST = %d %v, want 400", res.StatusCode, m)
			}
			wantError(t, m, tc.want)
		})
	}
	// A 400 stores nothing of its request, not even its valid reports.
	if ev := f.writeEvents(t, "cache", "lock:bad"); len(ev) != 0 {
		t.Fatalf("rejected requests stored %d events: %+v", len(ev), ev)
	}
}

// failingWrites is a WriteReporter that fails every report with err.
type failingWrites struct{ err error }

func (w failingWrites) ReportWrites(context.Context, []audit.WriteReport) error { return w.err }

func (w failingWrites) ReportBeliefs(context.Context, []audit.Belief) error { return w.err }

func TestIngestReporterFails(t *testing.T) {
	body := `{"source":"cache","lock":"lock:late","resource":"r","outcome":"accepted"}`
	// A store that is down, and a replica that no longer owns the source:
	// nothing stored, and the client tries again (reaching the owner).
	for _, tc := range []struct{ name, code, msg, retryAfter string }{
		{"Unavailable", audit.EUNAVAILABLE, "recorder is shut down", retryAfter},
		{"Fenced", audit.EFENCED, "source cache is owned by a newer replica (token 3 refused, the store holds 4)", retryAfterFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Writes = failingWrites{audit.Errorf(tc.code, "%s", tc.msg)} })
			res, m := f.post(t, body, bearer)
			if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("POST = %d %v, Retry-After %q; want 503 with Retry-After %s", res.StatusCode, m, res.Header.Get("Retry-After"), tc.retryAfter)
			}
			wantError(t, m, tc.msg)
		})
	}
	t.Run("InternalErrorHidden", func(t *testing.T) {
		f := newFixture(t, func(c *Config) {
			c.Writes = failingWrites{errors.New("disk I/O error at /var/lib/leasewatch.db")}
		})
		res, m := f.post(t, body, bearer)
		if res.StatusCode != http.StatusInternalServerError {
			t.Fatalf("POST = %d %v, want 500", res.StatusCode, m)
		}
		wantError(t, m, "internal error")
		if strings.Contains(m["error"].(string), "disk") {
			t.Fatalf("500 leaks the internal error: %v", m)
		}
	})
	t.Run("NoReporter", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.Writes = nil })
		res, _ := f.post(t, body, bearer)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("POST without a reporter = %d, want 503", res.StatusCode)
		}
	})
}

func TestDecodeWritesDefaults(t *testing.T) {
	got, err := decodeWrites([]byte(`{"source":"cache","lock":"l","resource":"r","outcome":"rejected","token":null,"holder":null,"at":null}`),
		knownSources, now)
	if err != nil {
		t.Fatalf("decodeWrites: %v", err)
	}
	want := audit.WriteReport{Source: "cache", Lock: "l", Resource: "r", Outcome: audit.WriteRejected, At: now}
	if len(got) != 1 || got[0].Token != nil || got[0].HighestToken != nil ||
		got[0].Source != want.Source || got[0].Lock != want.Lock || got[0].Resource != want.Resource ||
		got[0].Outcome != want.Outcome || !got[0].At.Equal(want.At) {
		t.Fatalf("decodeWrites = %+v, want %+v", got, want)
	}
	// A literal U+FFFD is valid text, unlike one the decoder substituted.
	if _, err := decodeWrites([]byte(`{"source":"cache","lock":"l`+"\uFFFD"+`","resource":"\ufffd","outcome":"accepted"}`),
		knownSources, now); err != nil {
		t.Fatalf("decodeWrites with a literal U+FFFD: %v", err)
	}
}

// A token is read by its value, a time by RFC 3339 in its every spelling: a
// lower-case t or z, and a leap second, read as the last nanosecond before
// the minute ends, in order with the times around it.
func TestDecodeSpellings(t *testing.T) {
	for _, tc := range []struct {
		field, value string
		want         any
	}{
		{"token", "42.0", int64(42)}, {"token", "4.2e1", int64(42)}, {"token", "420E-1", int64(42)}, {"token", "-0", int64(0)},
		{"token", "9.223372036854775807e18", int64(9223372036854775807)},
		{"at", `"2025-03-01t10:00:00.5z"`, time.Date(2025, 3, 1, 10, 0, 0, 5e8, time.UTC)},
		{"at", `"2016-12-31T23:59:60.5Z"`, time.Date(2016, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{"at", `"2016-12-31T18:59:60-05:00"`, time.Date(2016, 12, 31, 23, 59, 59, 999999999, time.UTC)},
	} {
		body := `{"source":"cache","lock":"l","resource":"r","outcome":"accepted","` + tc.field + `":` + tc.value + `}`
		ws, err := decodeWrites([]byte(body), knownSources, now)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.field, tc.value, err)
		}
		var got any = ws[0].At
		if tc.field == "token" {
			got = *ws[0].Token
		}
		if got != tc.want {
			t.Errorf("%s %s = %v, want %v", tc.field, tc.value, got, tc.want)
		}
	}
}
