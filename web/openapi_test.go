package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"go.yaml.in/yaml/v3"
)

// openAPIValidator returns a validator of the served document, which must
// itself be a valid OpenAPI 3.1 document.
func openAPIValidator(t *testing.T, served []byte) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(served)
	if err != nil {
		t.Fatalf("the served OpenAPI document does not parse: %v", err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1") {
		t.Fatalf("openapi %q, want 3.1", v)
	}
	v, errs := validator.NewValidator(doc)
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
		{"GET", "/api/v1/locks/" + id + "/at?t=" + url.QueryEscape(t0.Add(5*60e9).Format("2006-01-02T15:04:05Z07:00")), "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/at?t=" + url.QueryEscape(t0.Add(-60e9).Format("2006-01-02T15:04:05Z07:00")), "", "", 200},
		{"GET", "/api/v1/locks/" + id + "/at", "", "", 400},
		{"GET", "/api/v1/holders/" + holder + "/tenures", "", "", 200},
		{"GET", "/api/v1/holders/" + holder + "/tenures?limit=1", "", "", 200},
		{"GET", "/api/v1/findings", "", "", 200},
		{"GET", "/api/v1/findings?class=all&limit=1", "", "", 200},
		{"GET", "/api/v1/findings?severity=high", "", "", 400},
		{"GET", "/api/v1/findings?lock=999999", "", "", 404},
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
