package web

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasewatch/leasewatch/audit"
)

// FuzzDecodeWrites feeds decodeWrites arbitrary bodies. Whatever the body,
// decodeWrites must not panic and must either
//
//   - fail with an EINVALID *audit.Error whose message names the body, the
//     array or a field, and is short, valid UTF-8 text without control
//     characters (it is echoed to the sender and logged), or
//   - return at least one report, each of which passes what the store and
//     the pages rely on: a configured source, a lock, a resource and an
//     outcome; strings of valid UTF-8 without control characters or
//     bidirectional controls (audit.Unprintable) within
//     their limits; tokens that are not negative; a UTC time from 1678 to
//     maxReportSkew past receipt, which the store keeps as itself. A report
//     encoded again decodes to itself.
//
// Seeds: the examples of the API contract and of ingest_test.go, plus what
// testdata/fuzz/FuzzDecodeWrites holds. Run longer with
// go test -run '^$' -fuzz FuzzDecodeWrites -fuzztime 10m ./web
func FuzzDecodeWrites(f *testing.F) {
	for _, s := range []string{
		`{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,"outcome":"accepted","highest_token":42,"holder":"worker-2","at":"2025-03-01T11:00:00.5Z","request_id":"r-100"}`,
		`{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":43,"outcome":"rejected","highest_token":42}`,
		`[{"source":"cache","lock":"lock:cart","resource":"carts","token":7,"outcome":"accepted"},{"source":"cache","lock":"lock:cart","resource":"carts","token":null,"outcome":"rejected","holder":"h"}]`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"rejected","token":null,"holder":null,"at":null}`,
		`{"source":"cache","lock":"l` + "\uFFFD" + `","resource":"\ufffd","outcome":"accepted"}`,
		`{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","holder":"\udc00"}`,
		`{"source":"cache","lock":"lock:bad","resource":"r","outcome":"accepted","holder":"\ud83d\ude00"}`,
		"{\"source\":\"cache\",\"lock\":\"lock:bad\",\"resource\":\"r\xff\",\"outcome\":\"accepted\"}",
		`{"source":"cache","source":"cache","lock":"l","resource":"r","outcome":"accepted"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","token":9223372036854775808}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","token":1e3}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","token":4.2e1,"highest_token":1e-400,"holder":"h\u202e"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"2016-12-31t23:59:60.5z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"2025-03-01T11:00:00+14:00"}`,
		`{"source":"cache","lock":"<script>alert(1)</script>","resource":"r","outcome":"accepted","tokn":1}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"source":{"a":{"b":{"c":[1,2,3]}}},"lock":"l","resource":"r","outcome":"accepted"}`,
		`[]`, `{}`, `null`, `42`, ``, ` `, `{"source":`,
		// The time range: its bounds, the epoch, the zero time.Time, and
		// times past what int64 nanoseconds hold.
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"1970-01-01T00:00:00Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"1678-01-01T00:00:00Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"1677-12-31T23:59:59.999999999Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"1677-09-21T00:12:43.145224192Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"0001-01-01T00:00:00Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"0000-01-01T00:00:00Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"2262-04-11T23:47:16.854775807Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"2200-01-01T00:00:00Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"9999-12-31T23:59:59Z"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"` + now.Add(maxReportSkew).Format(time.RFC3339Nano) + `"}`,
		`{"source":"cache","lock":"l","resource":"r","outcome":"accepted","at":"` + now.Add(maxReportSkew+time.Nanosecond).Format(time.RFC3339Nano) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reports, err := decodeWrites(body, knownSources, now)
		if err != nil {
			checkIngestError(t, err)
			return
		}
		if len(reports) == 0 {
			t.Fatal("no error and no reports")
		}
		for i, r := range reports {
			checkDecodedReport(t, i, r)
			// Round trip: what the decoder accepted, encoded the way the
			// contract describes, decodes to the same report.
			again, err := decodeWrites(encodeReport(t, r), knownSources, now.Add(time.Hour))
			if err != nil {
				t.Fatalf("report %d %+v encoded again fails: %v", i, r, err)
			}
			if !sameReport(again[0], r) {
				t.Fatalf("report %d decodes to %+v, encoded and decoded again to %+v", i, r, again[0])
			}
		}
	})
}

// checkIngestError checks an error of decodeWrites.
func checkIngestError(t *testing.T, err error) {
	t.Helper()
	var e *audit.Error
	if !errors.As(err, &e) || e.Code != audit.EINVALID {
		t.Fatalf("error %v (%T), want an *audit.Error with code %s", err, err, audit.EINVALID)
	}
	msg := e.Message
	name, _, ok := strings.Cut(msg, ": ")
	if !ok || name == "" {
		t.Fatalf("error %q does not start with what it is about", msg)
	}
	if !utf8.ValidString(msg) || strings.ContainsFunc(msg, unicode.IsControl) {
		t.Fatalf("error %q is not plain text", msg)
	}
	if len(msg) > 512 {
		t.Fatalf("error is %d bytes, want at most 512: %q", len(msg), msg)
	}
}

// checkDecodedReport checks one report decodeWrites accepted.
func checkDecodedReport(t *testing.T, i int, r audit.WriteReport) {
	t.Helper()
	if _, ok := knownSources[r.Source]; !ok {
		t.Fatalf("report %d: source %q is not configured", i, r.Source)
	}
	if r.Lock == "" || r.Resource == "" {
		t.Fatalf("report %d: lock %q, resource %q: want both", i, r.Lock, r.Resource)
	}
	if r.Outcome != audit.WriteAccepted && r.Outcome != audit.WriteRejected {
		t.Fatalf("report %d: outcome %q", i, r.Outcome)
	}
	for _, s := range []struct {
		name, v string
		max     int
	}{
		{"source", r.Source, maxIngestString}, {"lock", r.Lock, maxIngestString}, {"resource", r.Resource, maxIngestString},
		{"holder", r.Holder, maxIngestString}, {"request_id", r.RequestID, maxRequestID},
	} {
		if !utf8.ValidString(s.v) || strings.ContainsFunc(s.v, audit.Unprintable) || utf8.RuneCountInString(s.v) > s.max {
			t.Fatalf("report %d: %s %q is not valid text of at most %d characters", i, s.name, s.v, s.max)
		}
	}
	for _, tok := range []*int64{r.Token, r.HighestToken} {
		if tok != nil && *tok < 0 {
			t.Fatalf("report %d: negative token %d", i, *tok)
		}
	}
	if r.Outcome == audit.WriteRejected && r.Token != nil && r.HighestToken != nil && *r.Token > *r.HighestToken {
		t.Fatalf("report %d: rejected token %d above the highest token %d", i, *r.Token, *r.HighestToken)
	}
	if r.At.IsZero() || r.At.Location() != time.UTC {
		t.Fatalf("report %d: at %v, want a UTC time", i, r.At)
	}
	// The time policy: from 1678 to the allowed skew past receipt, and so
	// a time the store keeps as itself.
	if r.At.Before(earliestReport) || r.At.After(now.Add(maxReportSkew)) {
		t.Fatalf("report %d: at %v, want from %v to %v", i, r.At, earliestReport, now.Add(maxReportSkew))
	}
	if back := audit.TimeOf(audit.Nanos(r.At)); !back.Equal(r.At) {
		t.Fatalf("report %d: at %v is kept as %v", i, r.At, back)
	}
}

// encodeReport writes r as the API's JSON object.
func encodeReport(t *testing.T, r audit.WriteReport) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"source": r.Source, "lock": r.Lock, "resource": r.Resource, "outcome": r.Outcome,
		"token": r.Token, "highest_token": r.HighestToken, "holder": r.Holder,
		"at": r.At.Format(time.RFC3339Nano), "request_id": r.RequestID,
	})
	if err != nil {
		t.Fatalf("encode %+v: %v", r, err)
	}
	return b
}

func sameReport(a, b audit.WriteReport) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Source == b.Source && a.Lock == b.Lock && a.Resource == b.Resource && a.Outcome == b.Outcome &&
		a.Holder == b.Holder && a.RequestID == b.RequestID && a.At.Equal(b.At) &&
		eq(a.Token, b.Token) && eq(a.HighestToken, b.HighestToken)
}
