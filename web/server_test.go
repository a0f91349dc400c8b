package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// xss is a lock name and holder a hostile backend could report.
const xss = "<script>alert(1)</script>"

// t0 is the fixture's base time; now is the clock the server is given.
var (
	t0  = time.Date(2025, 3, 1, 10, 0, 0, 123456789, time.UTC)
	now = t0.Add(time.Hour)
)

const ingestToken = "s3cret-token"

var knownSources = map[string]audit.SourceKind{
	"prod-etcd": audit.KindEtcd,
	"cluster-a": audit.KindKubernetes,
	"cache":     audit.KindRedis,
}

// fixture is a server over a real SQLite store holding a few locks.
type fixture struct {
	store    *sqlite.Store
	server   *Server
	handler  http.Handler
	registry *prometheus.Registry
	rec      *audit.Recorder

	orders    audit.Lock // held, fenced, near expiry, with tenures, events and findings
	hostile   audit.Lock // name and holder are HTML
	heartbeat audit.Lock
}

type fixtureOption func(*Config)

func newFixture(t *testing.T, opts ...fixtureOption) *fixture {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{store: store, registry: prometheus.NewRegistry()}
	f.populate(t)

	rec := audit.NewRecorder(store, audit.TrackerConfig{SourceKinds: knownSources}, slog.New(slog.DiscardHandler),
		audit.WithClock(func() time.Time { return now }))
	if err := rec.Start(ctx); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(rec.Close)
	f.rec = rec

	cfg := Config{
		Store:        rec.Fresh(store),
		Writes:       rec,
		KnownSources: knownSources,
		Sources: func() []audit.Source {
			return []audit.Source{
				{Name: "prod-etcd", Kind: audit.KindEtcd, State: audit.SourceUp,
					Lag: 1500 * time.Millisecond, LagAt: now.Add(-2 * time.Second)},
				{Name: "cluster-a", Kind: audit.KindKubernetes, State: audit.SourceDown,
					BlindSince: t0.Add(30 * time.Minute), Error: "connection refused"},
			}
		},
		IngestTokens:     []string{"other-token", ingestToken},
		Registry:         f.registry,
		Logger:           slog.New(slog.DiscardHandler),
		Now:              func() time.Time { return now },
		RenewMarginRatio: 0.25,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.server = srv
	f.handler = srv.Handler()
	return f
}

func (f *fixture) populate(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	ordersKey := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	hostileKey := audit.LockKey{Source: "prod-etcd", Name: xss}
	hbKey := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-1"}

	orders := audit.Lock{
		Source: ordersKey.Source, Name: ordersKey.Name, Kind: audit.KindEtcd, Class: audit.ClassLock,
		State: audit.StateHeld, Holder: "worker-2", Token: audit.Int64(42),
		AcquiredAt: t0.Add(10 * time.Minute), RenewedAt: now.Add(-9 * time.Second),
		ExpiresAt: now.Add(time.Second), LeaseDuration: 10 * time.Second, ChangedAt: t0.Add(10 * time.Minute),
	}
	hostile := audit.Lock{
		Source: hostileKey.Source, Name: hostileKey.Name, Kind: audit.KindEtcd, Class: audit.ClassLock,
		State: audit.StateFree, Holder: xss, ChangedAt: t0.Add(20 * time.Minute),
	}
	hb := audit.Lock{
		Source: hbKey.Source, Name: hbKey.Name, Kind: audit.KindKubernetes, Class: audit.ClassHeartbeat,
		State: audit.StateHeld, Holder: "node-1", Token: audit.Int64(0),
		AcquiredAt: t0, RenewedAt: now.Add(-5 * time.Second), ExpiresAt: now.Add(35 * time.Second),
		LeaseDuration: 40 * time.Second, ChangedAt: t0,
	}
	b := audit.Batch{
		Locks: []audit.TrackState{{Lock: orders, NextSeq: 3}, {Lock: hostile, NextSeq: 2}, {Lock: hb, NextSeq: 2}},
		Tenures: []audit.Tenure{
			{Lock: ordersKey, Seq: 1, Holder: "worker-1", Token: audit.Int64(41), GrantedAt: t0, Observed: true,
				Renewals: 3, LastRenewedAt: t0.Add(3 * time.Second), LeaseDuration: 10 * time.Second,
				ExpiresAt: t0.Add(13 * time.Second), EndedAt: t0.Add(13 * time.Second), End: audit.EndExpired},
			{Lock: ordersKey, Seq: 2, Holder: "worker-2", Token: audit.Int64(42), GrantedAt: t0.Add(10 * time.Minute),
				Renewals: 100, LastRenewedAt: now.Add(-9 * time.Second), LeaseDuration: 10 * time.Second,
				ExpiresAt: now.Add(time.Second)},
			{Lock: hostileKey, Seq: 1, Holder: xss, GrantedAt: t0.Add(15 * time.Minute),
				EndedAt: t0.Add(20 * time.Minute), End: audit.EndReleased},
		},
		Events: []audit.Event{
			{Lock: ordersKey, Kind: audit.EventObserved, At: t0, Holder: "worker-1", Token: audit.Int64(41),
				TTL: 10 * time.Second, Position: "100", Detail: map[string]any{"lease": "694d7f1a2b3c4d5e"}},
			{Lock: ordersKey, Kind: audit.EventExpire, At: t0.Add(13 * time.Second), Holder: "worker-1",
				Token: audit.Int64(41), Inferred: true},
			{Lock: ordersKey, Kind: audit.EventGrant, At: t0.Add(10 * time.Minute), Holder: "worker-2",
				Token: audit.Int64(42), TTL: 10 * time.Second, Position: "180"},
			{Lock: ordersKey, Kind: audit.EventWriteRejected, At: t0.Add(11 * time.Minute), Holder: "worker-1",
				Token: audit.Int64(41), Resource: "orders-db", RequestID: "req-1",
				Detail: map[string]any{"highest_token": 42.0}},
			{Lock: hostileKey, Kind: audit.EventGrant, At: t0.Add(15 * time.Minute), Holder: xss,
				Detail: map[string]any{"note": xss}},
			{Lock: hostileKey, Kind: audit.EventRelease, At: t0.Add(20 * time.Minute), Holder: xss},
			{Lock: hbKey, Kind: audit.EventObserved, At: t0, Holder: "node-1", Token: audit.Int64(0)},
		},
		Findings: []audit.Finding{
			{Lock: ordersKey, Kind: audit.FindingLeaseExpired, Severity: audit.SeverityWarning, At: t0.Add(13 * time.Second),
				Summary: "worker-1 stopped renewing", Tokens: []int64{41}, Holders: []string{"worker-1"}},
			{Lock: ordersKey, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: t0.Add(11 * time.Minute),
				Until: t0.Add(11*time.Minute + 1500*time.Millisecond), Summary: "orders-db rejected token 41",
				Tokens: []int64{41, 42}, Holders: []string{"worker-1", "worker-2"}, Resource: "orders-db"},
			{Lock: hostileKey, Kind: audit.FindingUnfencedLock, Severity: audit.SeverityWarning, At: t0.Add(15 * time.Minute),
				Summary: "grant to " + xss + " carries no token", Holders: []string{xss}},
			// A heartbeat's finding is stored but left out of the default
			// views: every test that counts findings counts without it.
			{Lock: hbKey, Kind: audit.FindingLeaseExpired, Severity: audit.SeverityWarning, At: t0.Add(5 * time.Minute),
				Summary: "node-1 stopped renewing", Tokens: []int64{0}, Holders: []string{"node-1"}},
		},
	}
	if err := f.store.Apply(ctx, b); err != nil {
		t.Fatalf("apply fixture: %v", err)
	}
	for _, l := range []struct {
		key  audit.LockKey
		into *audit.Lock
	}{{ordersKey, &f.orders}, {hostileKey, &f.hostile}, {hbKey, &f.heartbeat}} {
		got, err := f.store.LockByKey(ctx, l.key)
		if err != nil {
			t.Fatalf("lock %s: %v", l.key, err)
		}
		*l.into = got
	}
}

// do sends a request to the server and returns the response with its body read.
func (f *fixture) do(t *testing.T, method, target string, body io.Reader, header ...string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return res, b
}

// getJSON GETs target, checks the status and decodes the body into a map.
func (f *fixture) getJSON(t *testing.T, target string, wantStatus int) map[string]any {
	t.Helper()
	res, body := f.do(t, http.MethodGet, target, nil)
	if res.StatusCode != wantStatus {
		t.Fatalf("GET %s: status %d, want %d; body %s", target, res.StatusCode, wantStatus, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("GET %s: Content-Type %q, want application/json", target, ct)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("GET %s: decode %s: %v", target, body, err)
	}
	return m
}

// wantError checks that an API response is {"error": msg} with msg containing want.
func wantError(t *testing.T, m map[string]any, want string) {
	t.Helper()
	msg, ok := m["error"].(string)
	if !ok || len(m) != 1 {
		t.Fatalf("error body = %v, want {\"error\": \"...\"}", m)
	}
	if !strings.Contains(msg, want) {
		t.Fatalf("error = %q, want it to contain %q", msg, want)
	}
}

// list returns m[key] as a list of objects.
func list(t *testing.T, m map[string]any, key string) []map[string]any {
	t.Helper()
	raw, ok := m[key].([]any)
	if !ok {
		t.Fatalf("%q = %#v, want a list", key, m[key])
	}
	out := make([]map[string]any, len(raw))
	for i, v := range raw {
		if out[i], ok = v.(map[string]any); !ok {
			t.Fatalf("%s[%d] = %#v, want an object", key, i, v)
		}
	}
	return out
}

// wantKeys checks that obj has exactly the given fields.
func wantKeys(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			t.Errorf("%s: missing field %q in %v", what, k, obj)
		}
	}
	if len(obj) != len(keys) {
		t.Errorf("%s: has %d fields, want %d: %v", what, len(obj), len(keys), obj)
	}
}

// wantTime checks that v is t formatted as RFC 3339 with nanoseconds in UTC.
func wantTime(t *testing.T, what string, v any, want time.Time) {
	t.Helper()
	if got, ok := v.(string); !ok || got != want.UTC().Format(time.RFC3339Nano) {
		t.Errorf("%s = %#v, want %q", what, v, want.UTC().Format(time.RFC3339Nano))
	}
}

// wantNumber checks that v is the JSON number want.
// pruneRenewals stores three renewals of the orders lock's first tenure
// (margins 0.5, 0.3 and 0.7, at t0 + 1, 2 and 3 s) and has retention prune
// them.
func (f *fixture) pruneRenewals(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var renewals []audit.Event
	for i, margin := range []float64{0.5, 0.3, 0.7} {
		renewals = append(renewals, audit.Event{Lock: f.orders.Key(), Kind: audit.EventRenew, At: t0.Add(time.Duration(i+1) * time.Second),
			Holder: "worker-1", Token: audit.Int64(41), Seq: 1, Detail: map[string]any{"margin_ratio": margin}})
	}
	// The newest event, which a store may keep (the next one's id must not fall below its sync mark).
	renewals = append(renewals, audit.Event{Lock: f.orders.Key(), Kind: audit.EventObserved, At: t0.Add(4 * time.Second)})
	if err := f.store.Apply(ctx, audit.Batch{Events: renewals, Synced: true}); err != nil {
		t.Fatal(err)
	}
	r := &audit.Retainer{Store: f.store, Now: func() time.Time { return t0.Add(time.Hour) },
		Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Minute}}}
	if err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
}

func wantNumber(t *testing.T, what string, v any, want float64) {
	t.Helper()
	if got, ok := v.(float64); !ok || got != want {
		t.Errorf("%s = %#v, want %v", what, v, want)
	}
}

func wantNull(t *testing.T, what string, v any) {
	t.Helper()
	if v != nil {
		t.Errorf("%s = %#v, want null", what, v)
	}
}

func TestHealthz(t *testing.T) {
	f := newFixture(t)
	res, body := f.do(t, http.MethodGet, "/healthz", nil)
	if res.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("GET /healthz = %d %q, want 200 ok", res.StatusCode, body)
	}
}

func TestReadyz(t *testing.T) {
	var readyErr error
	f := newFixture(t, func(c *Config) {
		c.Ready = func(context.Context) error { return readyErr }
	})
	t.Run("Ready", func(t *testing.T) {
		readyErr = nil
		res, body := f.do(t, http.MethodGet, "/readyz", nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /readyz = %d %q, want 200", res.StatusCode, body)
		}
	})
	t.Run("NotReady", func(t *testing.T) {
		readyErr = errors.New("collector prod-etcd has not synced")
		res, body := f.do(t, http.MethodGet, "/readyz", nil)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET /readyz = %d, want 503", res.StatusCode)
		}
		if !strings.Contains(string(body), "collector prod-etcd has not synced") {
			t.Fatalf("GET /readyz body %q does not give the reason", body)
		}
	})
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.do(t, http.MethodGet, "/api/v1/locks/"+itoa(f.orders.ID), nil)
	f.do(t, http.MethodGet, "/api/v1/locks/999999", nil)
	res, body := f.do(t, http.MethodGet, "/metrics", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", res.StatusCode)
	}
	text := string(body)
	for _, want := range []string{
		"leasewatch_http_request_duration_seconds_bucket",
		`route="/api/v1/locks/:id"`,
		`code="404"`,
		`leasewatch_ingest_writes_total{outcome="accepted"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "/api/v1/locks/999999") {
		t.Errorf("/metrics labels a raw path; want the route template")
	}
}

func TestNewRejectsDuplicateRegistration(t *testing.T) {
	f := newFixture(t)
	if _, err := New(Config{Store: f.rec.Fresh(f.store), Registry: f.registry}); err == nil {
		t.Fatal("New with a registry that already has the metrics: want an error")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a store: want an error")
	}
}

func TestServeShutsDownWithContext(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Registry = nil })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.server.Serve(ctx, ln) }()

	res, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz over TCP: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz over TCP = %d", res.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// newChunkedRequest returns a POST whose body length is unknown up front.
func newChunkedRequest(body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/api/v1/writes", io.MultiReader(strings.NewReader(body)))
	req.ContentLength = -1
	return req
}

// grepLines returns the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
