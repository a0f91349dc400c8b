package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"go.yaml.in/yaml/v3"
)

// openAPIValidator returns a validator of the served document, which must
// itself be a valid OpenAPI 3.1 document. It asserts formats (date-time),
// which JSON Schema leaves to annotation unless asked.
func openAPIValidator(t *testing.T, served []byte) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(served)
	if err != nil {
		t.Fatalf("the served OpenAPI document does not parse: %v", err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1") {
		t.Fatalf("openapi %q, want 3.1", v)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("the OpenAPI document: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("the OpenAPI document is not valid: %s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  at %s (%s): %s", se.FieldPath, se.KeywordLocation, se.Reason)
			}
		}
		t.FailNow()
	}
	return v
}

// Every endpoint of the API, asked for real on the fixture's data, answers
// what the OpenAPI document served at /api/v1/openapi.json says: each
// success and each error body (bad parameters, a missing lock, a missing or
// wrong token, a bad report), status by status. And the document lists no
// path the server does not route.
func TestOpenAPIDescribesEveryAnswer(t *testing.T) {
	f := newFixture(t)
	res, served := f.do(t, http.MethodGet, "/api/v1/openapi.json", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var fromYAML any
	if err := yaml.Unmarshal(openAPIYAML, &fromYAML); err != nil {
		t.Fatal(err)
	}
	var fromJSON any
	if err := json.Unmarshal(served, &fromJSON); err != nil {
		t.Fatalf("the served document is not JSON: %v", err)
	}
	v := openAPIValidator(t, served)

	id := itoa(f.orders.ID)
	holder := url.PathEscape(f.orders.Holder)
	report := `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":43,"outcome":"accepted","request_id":"openapi-1"}`
	bearer := "Bearer " + ingestToken
	calls := []struct {
		method, target, body, auth string
		status                     int
	}{
		{"GET", "/api/v1/sources", "", "", 200},
		{"GET", "/api/v1/locks", "", "", 200},
		{"GET", "/api/v1/locks?class=all&state=held&sort=margin&limit=2", "", "", 200},
		{"GET", "/api/v1/locks?class=mutex", "", "", 400},
		{"GET", "/api/v1/locks/" + id, "", "", 200},
		{"GET", "/api/v1/locks/" + itoa(f.hostile.ID), "", "", 200},
		{"GET", "/api/v1/locks/999999", "", "", 404},
		{"GET", "/api/v1/locks/abc", "", "", 400},
		{"GET", "/api/v1/locks/" + id + "/events", "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/events?limit=1", "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/events?kind=acquire", "", "", 400},
		{"GET", "/api/v1/locks/" + id + "/tenures", "", "", 200},
		{"GET", "/api/v1/locks/" + itoa(f.heartbeat.ID) + "/tenures", "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/verdict", "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/verdict?from=tomorrow", "", "", 400},
		{"GET", "/api/v1/locks/" + id + "/advice", "", "", 200},
		{"GET", "/api/v1/locks/" + itoa(f.recordStalls(t).ID) + "/advice?margin=0.25&retries=3", "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/advice?retries=1", "", "", 400},
		{"GET", "/api/v1/locks/" + id + "/at?t=" + url.QueryEscape(t0.Add(5*60e9).Format("2006-01-02T15:04:05Z07:00")), "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/at?t=" + url.QueryEscape(t0.Add(-60e9).Format("2006-01-02T15:04:05Z07:00")), "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/at", "", "", 400},
		{"GET", "/api/v1/holders/" + holder + "/tenures", "", "", 200},
		{"GET", "/api/v1/holders/" + holder + "/tenures?limit=1", "", "", 200},
		{"GET", "/api/v1/findings", "", "", 200},
		{"GET", "/api/v1/findings?class=all&limit=1", "", "", 200},
		{"GET", "/api/v1/findings?severity=high", "", "", 400},
		{"GET", "/api/v1/findings?lock=999999", "", "", 404},
		{"GET", "/api/v1/costs", "", "", 200},
		{"GET", "/api/v1/costs?window=24h&by=holder&limit=1", "", "", 200},
		{"GET", "/api/v1/costs?window=7d", "", "", 400},
		{"POST", "/api/v1/writes", report, bearer, 202},
		{"POST", "/api/v1/writes", "[" + report + "]", bearer, 202},
		{"POST", "/api/v1/writes", report, "", 401},
		{"POST", "/api/v1/writes", `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","outcome":"maybe"}`, bearer, 400},
		{"POST", "/api/v1/writes", strings.Replace(report, `"token":43`, `"token":44`, 1), bearer, 409},
		{"POST", "/api/v1/beliefs", `{"source":"prod-etcd","lock":"/locks/orders","token":42}`, bearer, 202},
		{"POST", "/api/v1/beliefs", `{"source":"prod-etcd","lock":"/locks/orders"}`, bearer, 400},
	}
	for _, c := range calls {
		t.Run(c.method+" "+c.target, func(t *testing.T) {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req := httptest.NewRequest(c.method, c.target, body)
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			f.handler.ServeHTTP(rec, req)
			resp := rec.Result()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, got)
			}
			resp.Body = io.NopCloser(bytes.NewReader(got))
			// The validator reads the request again: give it a fresh one.
			if c.body != "" {
				req.Body = io.NopCloser(strings.NewReader(c.body))
			}
			if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
				for _, e := range errs {
					t.Errorf("%s: %s", e.Message, e.Reason)
					for _, se := range e.SchemaValidationErrors {
						t.Errorf("  at %s (%s): %s", se.FieldPath, se.KeywordLocation, se.Reason)
					}
				}
				t.Logf("body: %.600s", got)
			}
			// A request that succeeded is one the document allows.
			if c.status < 300 {
				if c.body != "" {
					req.Body = io.NopCloser(strings.NewReader(c.body))
				}
				if ok, errs := v.ValidateHttpRequest(req); !ok {
					for _, e := range errs {
						t.Errorf("request: %s: %s", e.Message, e.Reason)
					}
				}
			}
		})
	}

	// Every documented path is routed: a GET or POST of it is not the
	// router's 404 "not found" (a missing lock's 404 names the lock).
	paths := fromJSON.(map[string]any)["paths"].(map[string]any)
	for p, item := range paths {
		target := strings.NewReplacer("{id}", id, "{holder}", holder).Replace(p)
		for method := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			res, b := f.do(t, strings.ToUpper(method), target, nil)
			if res.StatusCode == http.StatusNotFound && strings.Contains(string(b), "not found") && !strings.Contains(string(b), "lock") {
				t.Errorf("%s %s is documented but not routed: %d %s", method, p, res.StatusCode, b)
			}
		}
	}
}

// The document and the server agree on what a client may send: a value the
// document allows, the server takes, and a value the server refuses, the
// document refuses. Values are generated per field: each text field with
// every character up to U+00FF and around the bidirectional controls, and
// at its length limit; tokens in the spellings JSON has for one number;
// RFC 3339 times and near misses; limits and ids at their bounds. The few
// values the server takes beyond the document are listed as lenient and
// must stay so: null for an optional string, an empty at (both mean
// absent), and a limit past the most, served as the most.
//
// Not generated: a lone UTF-16 surrogate escape ("\udc00"), which the
// server refuses and a JSON Schema validator never sees (its decoder makes
// it U+FFFD); and an at outside the time policy, which depends on the
// time of receipt.
func TestOpenAPIAgreesOnInput(t *testing.T) {
	f := newFixture(t)
	v := openAPIValidator(t, openAPIJSON)
	check := func(t *testing.T, what string, req func() *http.Request, server func() error, lenient bool) {
		t.Helper()
		docOK, errs := v.ValidateHttpRequest(req())
		srvErr := server()
		switch {
		case docOK && srvErr != nil:
			t.Errorf("%s: the document allows it, the server refuses it: %v", what, srvErr)
		case !docOK && srvErr == nil && !lenient:
			msg := errs[0].Message
			for _, se := range errs[0].SchemaValidationErrors {
				msg += "; " + se.Reason
			}
			t.Errorf("%s: the server takes it, the document refuses it: %s", what, msg)
		case lenient && (docOK || srvErr != nil):
			t.Errorf("%s: want it refused by the document (%v) and taken by the server (%v)", what, docOK, srvErr)
		}
	}
	for _, c := range inputCases() {
		body := c.body()
		check(t, c.path+" "+string(body), func() *http.Request {
			req := httptest.NewRequest(http.MethodPost, c.path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+ingestToken)
			return req
		}, func() error {
			if c.path == "/api/v1/beliefs" {
				_, err := decodeBeliefs(body, knownSources, now)
				return err
			}
			_, err := decodeWrites(body, knownSources, now)
			return err
		}, c.lenient)
	}
	id := itoa(f.orders.ID)
	for _, c := range queryCases(id) {
		check(t, "GET "+c.target, func() *http.Request {
			return httptest.NewRequest(http.MethodGet, c.target, nil)
		}, func() error {
			if res, b := f.do(t, http.MethodGet, c.target, nil); res.StatusCode == http.StatusBadRequest {
				return errors.New(string(b))
			}
			return nil
		}, c.lenient)
	}
	// The document's time pattern is the server's.
	sent := fromDoc(t, "components", "schemas", "SentTime", "pattern")
	if sent != rfc3339.String() {
		t.Errorf("SentTime's pattern %q, the server's %q", sent, rfc3339.String())
	}
	// Its limits are the server's.
	if got := fromDoc(t, "components", "parameters", "limit", "schema", "maximum"); got != float64(maxLimit) {
		t.Errorf("limit's maximum %v, the server's %d", got, maxLimit)
	}
}

// fromDoc returns the value at path in the served document.
func fromDoc(t *testing.T, path ...string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(openAPIJSON, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("the document has no %v", path)
		}
		v = m[p]
	}
	return v
}

// inputCase is one ingest body: a valid report or belief with field set to
// value, raw JSON.
type inputCase struct {
	path, field string
	value       string
	lenient     bool
}

func (c inputCase) body() []byte {
	base := `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","outcome":"accepted","token":1}`
	if c.path == "/api/v1/beliefs" {
		base = `{"source":"prod-etcd","lock":"/locks/orders","token":1}`
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		panic(err)
	}
	m[c.field] = json.RawMessage(c.value)
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("%s = %s: %v", c.field, c.value, err))
	}
	return b
}

// inputCases generates the ingest bodies TestOpenAPIAgreesOnInput checks.
func inputCases() []inputCase {
	var cases []inputCase
	add := func(path string, fields []string, lenient func(field, value string) bool, values ...string) {
		for _, field := range fields {
			for _, val := range values {
				cases = append(cases, inputCase{path, field, val, lenient(field, val)})
			}
		}
	}
	never := func(string, string) bool { return false }
	optionalNull := func(field, value string) bool {
		return value == "null" && (field == "holder" || field == "request_id" || field == "at") || field == "at" && value == `""`
	}
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }

	// Text: every character up to U+00FF, those around the bidirectional
	// controls, a few beyond; empty, null and at the length limits.
	var texts []string
	for _, span := range [][2]rune{{0, 0x100}, {0x600, 0x620}, {0x2000, 0x2070}, {0xfeff, 0xff00}, {0xfffd, 0xfffe}, {0x1f600, 0x1f601}, {0xe0001, 0xe0002}} {
		for r := span[0]; r < span[1]; r++ {
			texts = append(texts, quote("a"+string(r)+"b"))
		}
	}
	texts = append(texts, `""`, "null", quote(strings.Repeat("é", maxIngestString)), quote(strings.Repeat("é", maxIngestString+1)),
		quote(strings.Repeat("x", maxRequestID)), quote(strings.Repeat("x", maxRequestID+1)))
	add("/api/v1/writes", []string{"lock", "resource", "holder", "request_id"}, optionalNull, texts...)
	add("/api/v1/beliefs", []string{"lock", "holder"}, optionalNull, texts...)

	// Tokens: one number in JSON's spellings, and the bounds of int64. The
	// validator reads numbers as float64, so int64's top 511 values are
	// past its format: int64; 2^63-1024 is the last it reads exactly.
	tokens := []string{"0", "1", "42", "42.0", "4.2e1", "420e-1", "4.2E+1", "0.0", "-0", "-0.0", "0e9", "1.5", "-1", "-1.0",
		"1e-1", "9223372036854774784", "9.223372036854774784e18", "9223372036854775808", "9.223372036854775808e18",
		"1e19", "1e400", "-1e400", "true", `"1"`, "null"}
	add("/api/v1/writes", []string{"token", "highest_token"}, never, tokens...)
	add("/api/v1/beliefs", []string{"token"}, never, tokens...)

	// Times (before the fixture's now), in RFC 3339's spellings and not.
	var times []string
	for _, s := range rfc3339Cases() {
		times = append(times, quote(s))
	}
	add("/api/v1/writes", []string{"at"}, optionalNull, append(times, `""`, "null")...)
	add("/api/v1/beliefs", []string{"at"}, optionalNull, times...)
	return cases
}

// rfc3339Cases are times before the fixture's now: RFC 3339's date-times
// and near misses.
func rfc3339Cases() []string {
	return []string{
		"2025-03-01T10:00:00Z", "2025-03-01t10:00:00z", "2025-03-01T10:00:00z", "2025-03-01t10:00:00Z",
		"2025-03-01T10:00:00.5Z", "2025-03-01T10:00:00.123456789012Z", "2025-03-01T10:00:00-00:00",
		"2025-02-01T10:00:00+23:59", "2025-02-01T10:00:00-23:59", "2024-02-29T00:00:00Z",
		"2016-12-31T23:59:60Z", "2016-12-31t23:59:60.5z", "2016-12-31T18:59:60-05:00", "2017-01-01T05:29:60+05:30",
		// Near misses.
		"2016-12-31T12:00:60Z", "2016-12-31T23:59:61Z", "2025-03-01T10:00:00+24:00", "2025-03-01T10:00:00+05:60",
		"2025-03-01T10:00:00,5Z", "2025-03-01T1:00:00Z", "2025-03-01T+1:00:00Z", "2025-03-01 10:00:00Z",
		"2025-03-01T10:00Z", "2025-02-29T10:00:00Z", "2025-13-01T10:00:00Z", "2025-03-01T24:00:00Z",
		"2025-03-01T10:60:00Z", "2025-03-01T10:00:00.Z", "2025-03-01T10:00:00+0100", "2025-03-01T10:00:00",
		"2025-03-01T10:00:00ZZ", " 2025-03-01T10:00:00Z", "２０２５-03-01T10:00:00Z", "",
	}
}

// queryCase is one GET of the API.
type queryCase struct {
	target  string
	lenient bool
}

// queryCases generates the parameters TestOpenAPIAgreesOnInput checks: limits
// and ids at their bounds, and RFC 3339 times.
func queryCases(id string) []queryCase {
	var cases []queryCase
	for _, n := range []string{"1", "10000", "0", "-1", "1.0", "+1", "01", "1e3", "1.5", "5.", ".5e1", "1e-1", "abc", "0x10", "NaN", "Inf", "1_0", "%201"} {
		cases = append(cases, queryCase{"/api/v1/locks?limit=" + n, false}, queryCase{"/api/v1/findings?limit=" + n, false})
	}
	// Past the most, a limit is served as the most.
	for _, n := range []string{"10001", "99999999999999999999"} {
		cases = append(cases, queryCase{"/api/v1/locks?limit=" + n, true}, queryCase{"/api/v1/locks/" + id + "/events?limit=" + n, true})
	}
	cases = append(cases, queryCase{"/api/v1/holders/worker-1/tenures?limit=500", false}, queryCase{"/api/v1/holders/worker-1/tenures?limit=501", true})
	// A lock id: the fixture's, and the bounds of int64 (a lock that does
	// not exist is a 404, not a refusal).
	for _, n := range []string{id, id + ".0", "+" + id, "9223372036854775807", "9223372036854775808", "0", "-1", "1.5"} {
		cases = append(cases, queryCase{"/api/v1/locks/" + n, false})
	}
	for _, n := range []string{id, id + ".0", id + "e0", "+" + id, "0", "-1", "1.5", "9223372036854775808"} {
		cases = append(cases, queryCase{"/api/v1/locks?after=" + n, false})
	}
	for _, s := range rfc3339Cases() {
		if s != "" { // an empty from is no from
			cases = append(cases, queryCase{"/api/v1/locks?from=" + url.QueryEscape(s), false},
				queryCase{"/api/v1/locks/" + id + "/at?t=" + url.QueryEscape(s), false})
		}
	}
	return cases
}
